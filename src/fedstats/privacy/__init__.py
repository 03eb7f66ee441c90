"""Differential privacy for fedstats: calibration, mechanisms and samplers, accounting.

``analysis`` holds the exact calibration and privacy-loss mathematics, ``mechanisms`` the vectorized
mechanisms and exact samplers, ``ledger`` the accounting of budgets and disclosed bits.
"""
