"""Differential privacy for fedstats: exact calibration (``analysis``), vectorized mechanisms and samplers
(``mechanisms``), and accounting of budgets and disclosed bits (``ledger``).
"""
