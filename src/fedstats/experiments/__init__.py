"""Experiments: the demo and reproductions of the papers' tables and figures."""
