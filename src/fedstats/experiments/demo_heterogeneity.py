"""Demo: private heterogeneity (paper 000) of scikit-learn's digits, equal labels against a 91:1 skew."""

from __future__ import annotations

from typing import Any

from fedstats.analyses.heterogeneity import heterogeneity
from fedstats.experiments.heterogeneity_data import load_image_vectors, sample_by_label_ratio
from fedstats.randomness import RandomSource

__all__ = ["run_demo"]

_RATIOS = (("equal labels", "1:1:1:1:1:1:1:1:1:1"), ("91:1 skew", "91:1:1:1:1:1:1:1:1:1"))
_CLIENTS = 195  # the largest 91:1 sample the digits allow; the equal-label sample has the same size
_EPSILON, _DELTA = 4.0, 1e-5


def run_demo(randomness: RandomSource) -> list[dict[str, Any]]:
    """Dispersion and I^2 of both samples at (epsilon, delta) = (4, 1e-5), distributed noise.

    Returns
    -------
    list of dict
        Four rows (name, dataset, estimate, truth, error, epsilon, delta, interval).
    """
    x, labels, _ = load_image_vectors("digits")
    assert labels is not None
    rows: list[dict[str, Any]] = []
    for i, (label, ratio) in enumerate(_RATIOS):
        rs = randomness.child("heterogeneity", i)
        idx = sample_by_label_ratio(
            labels, ratio, fraction=_CLIENTS / labels.shape[0], rng=rs.generator("sample")
        )
        res = heterogeneity(
            x[idx], epsilon=_EPSILON, delta=_DELTA, noise="distributed", randomness=rs
        )
        for st in (res.dispersion, res.i2):
            assert st is not None
            rows.append(
                {
                    "name": f"heterogeneity {st.name} ({label})",
                    "dataset": f"digits, {len(idx)} clients, labels {ratio}",
                    "estimate": st.estimate,
                    "truth": st.truth,
                    "error": st.error,
                    "epsilon": _EPSILON,
                    "delta": _DELTA,
                    "interval": st.interval,
                }
            )
    return rows
