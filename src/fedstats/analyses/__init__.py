"""Analyses: one module per paper system, each a protocol on the round engine."""
