"""Juarez & Korolova (2023) reproduction: the paper's published numbers and the constants of the runs."""

from __future__ import annotations

__all__ = ["ALPHAS", "NAME", "PAPER_ACTIVITY", "PAPER_TABLE1", "PAPER_TABLE2"]

NAME = "performance-gap"
_Z995 = 2.5758293035489004  # standard normal quantile at 0.995

#: The paper's Table 1 (minimum epsilon; None for "-").
PAPER_TABLE1: dict[str, dict[int, tuple[float | None, ...]]] = {
    "R": {
        10**5: (1.86, None, None),
        10**6: (0.63, None, None),
        10**7: (0.23, 1.86, None),
        10**8: (0.08, 0.63, None),
        10**9: (0.02, 0.23, 1.86),
    },
    "L": {
        10**5: (2.56, 17.89, 178.89),
        10**6: (0.71, 6.32, 56.57),
        10**7: (0.21, 2.56, 17.89),
        10**8: (0.07, 0.71, 6.32),
        10**9: (0.02, 0.21, 2.56),
    },
}
ALPHAS = (0.1, 0.01, 0.001)

#: The paper's Table 2: epsilon -> (R mean error, R sd, R alpha, L mean error, L sd, L alpha).
PAPER_TABLE2: dict[float, tuple[float, float, float, float, float, float]] = {
    0.01: (0.1241, 0.1410, 1.2586, 0.0504, 0.0337, 1.0525),
    0.1: (0.0082, 0.0059, 0.1206, 0.0046, 0.0040, 0.1060),
    1.0: (0.0008, 0.0006, 0.0094, 0.0008, 0.0005, 0.0118),
    10.0: (0.0001, 0.0000, 0.0032, 0.0001, 0.0000, 0.0009),
}
#: Appendix D's published per-sex means (male, female).
PAPER_ACTIVITY = {"tpr": (0.8901, 0.7177), "fpr": (0.1526, 0.2490)}
