"""Bit pushing (Cormode & Markov 2021): bit-efficient local-DP mean and variance with adaptive rounds.

The analysis contract (``docs/architecture.md``):

* :mod:`~fedstats.analyses.bitpushing.client`: the device side, :func:`encode_bits` (Algorithm 1) and the
  code each client computes from its value;
* :mod:`~fedstats.analyses.bitpushing.protocol`: the server generators :func:`mean_protocol` and
  :func:`variance_protocol` (any stage of :data:`METHODS`), returning :class:`MeanEstimate` /
  :class:`VarianceEstimate` tagged ``"bitpushing.mean"`` / ``"bitpushing.variance"``;
* :mod:`~fedstats.analyses.bitpushing.api`: one call, :func:`mean` / :func:`variance`.

Underneath: :mod:`~fedstats.analyses.bitpushing.encoding` (declared range, fixed-point b-bit codes),
:mod:`~fedstats.analyses.bitpushing.allocation` (sampling vectors, Lemma 1 variance, Lemma 3 optimum),
:mod:`~fedstats.analyses.bitpushing.stages` (the code description and a stage's result) and
:mod:`~fedstats.analyses.bitpushing.bit_stages` (the basic, weighted and adaptive rounds). The baselines
(dithering, Piecewise, Duchi, Laplace) are :mod:`fedstats.analyses.mean_baselines`.

See ``docs/bitpushing.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedstats._lazy import lazy_exports

if TYPE_CHECKING:  # the same names, for type checkers (at run time they load lazily, below)
    from fedstats.analyses.bitpushing.allocation import (
        affine_permutation,
        bit_means,
        inclusion_probabilities,
        lemma1_variance,
        optimal_allocation,
        rr_noise_variance,
        weighted_probabilities,
    )
    from fedstats.analyses.bitpushing.api import (
        DEFAULT_SQUASH_THRESHOLD,
        mean,
        population_truth,
        variance,
    )
    from fedstats.analyses.bitpushing.api import mean as estimate_mean
    from fedstats.analyses.bitpushing.api import variance as estimate_variance
    from fedstats.analyses.bitpushing.bit_stages import (
        adaptive_stage,
        basic_stage,
        bit_round,
        weighted_stage,
    )
    from fedstats.analyses.bitpushing.client import encode_bits, public_uniform
    from fedstats.analyses.bitpushing.encoding import BitEncoding, bits_needed
    from fedstats.analyses.bitpushing.methods import METHODS, make_stage, stage_mechanisms
    from fedstats.analyses.bitpushing.protocol import (
        BIT_PUSHING_METHODS,
        BitPushingResult,
        MeanEstimate,
        VarianceEstimate,
        mean_protocol,
        variance_protocol,
    )
    from fedstats.analyses.bitpushing.stages import CodeSpec, Stage, StageEstimate

# Public name -> submodule. Loaded on first use (PEP 562), so that ``import
# fedstats.analyses.bitpushing.client`` on a device does not load the server stack.
_EXPORTS = {
    "allocation": (
        "affine_permutation",
        "bit_means",
        "inclusion_probabilities",
        "lemma1_variance",
        "optimal_allocation",
        "rr_noise_variance",
        "weighted_probabilities",
    ),
    "api": ("DEFAULT_SQUASH_THRESHOLD", "mean", "population_truth", "variance"),
    "bit_stages": (
        "adaptive_stage",
        "basic_stage",
        "bit_round",
        "weighted_stage",
    ),
    "client": ("encode_bits", "public_uniform"),
    "encoding": ("BitEncoding", "bits_needed"),
    "methods": ("METHODS", "make_stage", "stage_mechanisms"),
    "protocol": (
        "BIT_PUSHING_METHODS",
        "BitPushingResult",
        "MeanEstimate",
        "VarianceEstimate",
        "mean_protocol",
        "variance_protocol",
    ),
    "stages": ("CodeSpec", "Stage", "StageEstimate"),
}
_ALIASES = {"estimate_mean": "mean", "estimate_variance": "variance"}  # former names (benchmarks)
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "BIT_PUSHING_METHODS",
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
    "inclusion_probabilities",
    "lemma1_variance",
    "make_stage",
    "mean",
    "mean_protocol",
    "optimal_allocation",
    "population_truth",
    "public_uniform",
    "rr_noise_variance",
    "stage_mechanisms",
    "variance",
    "variance_protocol",
    "weighted_probabilities",
    "weighted_stage",
]

__getattr__, __dir__ = lazy_exports(__name__, _WHERE, _ALIASES)
