"""Bit pushing (Cormode & Markov 2021): bit-efficient local-DP mean and variance with adaptive rounds.

* :mod:`~fedstats.analyses.bitpushing.encoding`: declared range and fixed-point b-bit codes;
* :mod:`~fedstats.analyses.bitpushing.allocation`: sampling vectors, Lemma 1 variance, Lemma 3 optimum;
* :mod:`~fedstats.analyses.bitpushing.protocols`: the engine rounds (basic, weighted, adaptive), results,
  :func:`mean_protocol` and :func:`variance_protocol`;
* :mod:`~fedstats.analyses.bitpushing.api`: :func:`estimate_mean` / :func:`estimate_variance` with any
  method (bit pushing or a baseline from :mod:`fedstats.analyses.mean_baselines`).

See ``docs/bitpushing.md``.
"""

from fedstats.analyses.bitpushing.allocation import (
    affine_permutation,
    exact_counts,
    inclusion_probabilities,
    lemma1_variance,
    optimal_allocation,
    rr_noise_variance,
    weighted_probabilities,
)
from fedstats.analyses.bitpushing.api import (
    DEFAULT_SQUASH_THRESHOLD,
    METHODS,
    estimate_mean,
    estimate_variance,
    make_stage,
    population_truth,
)
from fedstats.analyses.bitpushing.encoding import BitEncoding, bits_needed, power_of_two_bound
from fedstats.analyses.bitpushing.protocols import (
    BitPushingResult,
    MeanEstimate,
    VarianceEstimate,
    adaptive_stage,
    basic_stage,
    bit_means,
    bit_round,
    encode_bits,
    mean_protocol,
    variance_protocol,
    weighted_stage,
)
from fedstats.analyses.bitpushing.stages import CodeSpec, Stage, StageEstimate, public_uniform

__all__ = [
    "DEFAULT_SQUASH_THRESHOLD",
    "METHODS",
    "BitEncoding",
    "BitPushingResult",
    "CodeSpec",
    "MeanEstimate",
    "Stage",
    "StageEstimate",
    "VarianceEstimate",
    "adaptive_stage",
    "affine_permutation",
    "basic_stage",
    "bit_means",
    "bit_round",
    "bits_needed",
    "encode_bits",
    "estimate_mean",
    "estimate_variance",
    "exact_counts",
    "inclusion_probabilities",
    "lemma1_variance",
    "make_stage",
    "mean_protocol",
    "optimal_allocation",
    "population_truth",
    "power_of_two_bound",
    "public_uniform",
    "rr_noise_variance",
    "variance_protocol",
    "weighted_probabilities",
    "weighted_stage",
]
