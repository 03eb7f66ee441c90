r"""Warnings that a result cannot be useful as it stands: one rule for every analysis.

A private estimate can be correct (unbiased, its interval covering at the nominal level) and still say
nothing: at 20 devices and epsilon 1 a mean of ages declared in [0, 100] has a standard error of about 30
years, so its interval covers the whole range. Two checks, shared by the library, the CLI and the service:

* **interval**: the interval's width (the normal interval ``2 z se`` before any clip to the parameter
  space, or the released one if that is wider) exceeds :data:`RANGE_SHARE` of the declared range of the
  statistic (:func:`declared_range`: the mean's ``[low, high]``, the variance's
  ``[0, ((high - low) / 2)^2]``, the entropy's ``[0, log m]``, the gap's ``[-1, 1]`` of rates (``[-2, 2]``
  of signed values), I^2's ``[0, 1]``, the dispersion's ``[0, d / 4]`` for p = 2);
* **power**: a test whose power at a stated effect is below :data:`POWER_FLOOR` (the chi-square test at
  Cohen's medium effect ``w = 0.3`` unless another is stated, :func:`fedstats.analyses.chi2.planning.power`).

:func:`result_warnings` computes them from a result alone (everything it needs is on the result), and
:func:`attach_warnings` adds them to ``result.warnings`` after what the analysis said itself; the planners
(``fedstats plan``) say what would make the run useful.

Examples
--------
>>> from fedstats.results import AnalysisResult
>>> r = AnalysisResult("bitpushing.mean", 0.0, ci=(0.0, 41.9), standard_error=30.0,
...                    details={"parameter_space": (0.0, 100.0)})
>>> print(result_warnings(r)[0])  # doctest: +NORMALIZE_WHITESPACE
the 95% interval is 118 wide, 118% of the declared range [0, 100] of the mean: the result says little;
see 'fedstats plan mean' for what a useful interval needs
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

from fedstats._validation import check_real
from fedstats.results import AnalysisResult

__all__ = [
    "DEFAULT_EFFECT",
    "POWER_FLOOR",
    "RANGE_SHARE",
    "attach_warnings",
    "declared_range",
    "interval_warning",
    "power_warning",
    "result_warnings",
]

RANGE_SHARE = 0.5
"""An interval wider than this share of the declared range is flagged."""

POWER_FLOOR = 0.5
"""A test whose power at the stated effect is below this is flagged."""

DEFAULT_EFFECT = 0.3
"""Cohen's w of the chi-square power warning when no effect is stated: a "medium" effect (Cohen 1988,
Sec. 7.2.3: w = 0.1 small, 0.3 medium, 0.5 large)."""

_PLAN_COMMAND = {
    "mean": "mean",
    "variance": "variance",
    "gap": "gap",
    "entropy": "entropy",
    "heterogeneity": "heterogeneity",
    "chi2": "chi2",
}


def _kind(result: AnalysisResult) -> str:
    """``mean``, ``variance``, ``gap``, ``entropy``, ``heterogeneity``, ``chi2`` or ``""``, from the tag."""
    tag = result.analysis
    if tag.endswith(".mean") or tag == "mean":
        return "mean"
    if tag.endswith(".variance") or tag == "variance":
        return "variance"
    return {
        "chi2": "chi2",
        "entropy.shannon": "entropy",
        "performance_gap": "gap",
        "heterogeneity": "heterogeneity",
    }.get(tag, "")


def _what(result: AnalysisResult, kind: str) -> str:
    """The statistic's name in a warning (heterogeneity's headline is I^2 or the dispersion)."""
    if kind == "heterogeneity":
        i2 = getattr(result, "i2", None)
        return "I^2" if i2 is not None and result.estimate == i2.estimate else "dispersion"
    return kind or "estimate"


def declared_range(result: AnalysisResult) -> tuple[float, float] | None:
    """The range the estimate lives in, read from the result (None when it has none).

    Parameters
    ----------
    result : AnalysisResult

    Returns
    -------
    (float, float) or None
        ``details["parameter_space"]`` when the analysis states it (bit pushing's mean ``[low, high]`` and
        variance ``[0, ((high - low) / 2)^2]``); ``[0, log m]`` for an entropy over m categories; ``[-1, 1]``
        for a gap of rates, ``[-2, 2]`` for a gap of signed values; ``[0, 1]`` for I^2 and ``[0, d / 4]``
        for a p = 2 dispersion of d-vectors in ``[0, 1]^d`` (Popoviciu's inequality per coordinate).
    """
    space = result.details.get("parameter_space")
    if space is not None and len(space) == 2:
        return float(space[0]), float(space[1])
    kind = _kind(result)
    if kind == "entropy":
        m = int(getattr(result, "n_categories", 0) or 0)
        return (0.0, math.log(m)) if m >= 2 else None
    if kind == "gap":
        half = 2.0 if result.details.get("scale") == "signed" else 1.0
        return -half, half
    if kind == "heterogeneity":
        i2 = getattr(result, "i2", None)
        if i2 is not None and result.estimate == i2.estimate:
            return 0.0, 1.0
        mean = getattr(result, "mean", None)
        if getattr(result, "p", 2.0) == 2.0 and mean is not None:
            return 0.0, len(mean) / 4.0
    return None


def interval_warning(
    ci: tuple[float, float] | None,
    value_range: tuple[float, float] | None,
    *,
    standard_error: float | None = None,
    confidence: float = 0.95,
    what: str = "estimate",
    plan: str | None = None,
) -> str | None:
    """The warning for an interval covering more than :data:`RANGE_SHARE` of the declared range.

    Parameters
    ----------
    ci : (float, float) or None
        The released interval.
    value_range : (float, float) or None
        The declared range (``high > low``); None: no warning.
    standard_error : float, optional
        With it, the width is at least ``2 z se`` (the normal interval before a clip to the range).
    confidence : float
        Level of ``ci``, in (0, 1).
    what : str
        Names the statistic in the message.
    plan : str, optional
        The ``fedstats plan`` subcommand to point to.

    Returns
    -------
    str or None
    """
    if value_range is None:
        return None
    lo, hi = value_range
    span = hi - lo
    if not span > 0 or not math.isfinite(span):
        return None
    width = 0.0
    if ci is not None and ci[0] is not None and ci[1] is not None:
        width = float(ci[1]) - float(ci[0])
    if standard_error is not None and math.isfinite(standard_error) and standard_error > 0:
        # the standard library's normal quantile: a mean on the aggregate route never imports scipy
        z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
        width = max(width, 2.0 * z * float(standard_error))
    elif standard_error is not None and math.isinf(standard_error):
        width = math.inf
    if not width > RANGE_SHARE * span:
        return None
    share = "an unbounded share" if math.isinf(width) else f"{100 * width / span:.0f}%"
    where = f" see 'fedstats plan {plan}' for what a useful interval needs" if plan else ""
    return (
        f"the {100 * confidence:g}% interval is {width:.3g} wide, {share} of the declared range "
        f"[{lo:.4g}, {hi:.4g}] of the {what}: the result says little;{where}"
    ).rstrip(";")


def power_warning(
    power: float, *, effect: float, level: float, plan: str | None = None
) -> str | None:
    """The warning for a test with power below :data:`POWER_FLOOR` at the stated effect.

    Parameters
    ----------
    power : float
        In [0, 1].
    effect : float
        The stated effect (for the chi-square, Cohen's w).
    level : float
        The test's significance level.
    plan : str, optional
        The ``fedstats plan`` subcommand to point to.

    Returns
    -------
    str or None
    """
    if not power < POWER_FLOOR:
        return None
    where = (
        f"; see 'fedstats plan {plan}' for the clients or epsilon a useful test needs"
        if plan
        else ""
    )
    return (
        f"the test has power {power:.2f} at effect w = {effect:g} (level {level:g}): it would rarely "
        f"reject even when the variables are dependent at that strength, and 'not rejected' says "
        f"little{where}"
    )


def result_warnings(
    result: AnalysisResult,
    *,
    value_range: tuple[float, float] | None = None,
    effect: float | None = None,
    n_records: float | None = None,
) -> tuple[str, ...]:
    """Compute the usefulness warnings of a result (see the module docstring).

    Parameters
    ----------
    result : AnalysisResult
        Any analysis's result.
    value_range : (float, float), optional
        The declared range of the estimate; default :func:`declared_range`.
    effect : float, optional
        For a chi-square test: the effect (Cohen's w, > 0) at which its power is judged; default
        :data:`DEFAULT_EFFECT`.
    n_records : float, optional
        For a chi-square test: the records in the table (default what the result tells, the released
        marginals' total under DP; without either no power is judged).

    Returns
    -------
    tuple of str
        Empty when the result is informative.

    Raises
    ------
    ParameterError
        If ``effect`` is not positive.
    """
    kind = _kind(result)
    out: list[str] = []
    if kind == "chi2":
        w = (
            DEFAULT_EFFECT
            if effect is None
            else check_real("effect", effect, low=0.0, low_open=True)
        )
        from fedstats.analyses.chi2.planning import result_power

        power = result_power(result, effect=w, n_records=n_records)
        level = float(getattr(result, "level", 0.05))
        msg = (
            power_warning(power, effect=w, level=level, plan="chi2") if power is not None else None
        )
    else:
        rng = value_range if value_range is not None else declared_range(result)
        msg = interval_warning(
            result.ci,
            rng,
            standard_error=result.standard_error,
            confidence=result.confidence,
            what=_what(result, kind),
            plan=_PLAN_COMMAND.get(kind),
        )
    if msg is not None:
        out.append(msg)
    return tuple(out)


def attach_warnings(result: Any, **kwargs: Any) -> Any:
    """Add :func:`result_warnings` to ``result.warnings`` (after the analysis's own, without repeats).

    Parameters
    ----------
    result : AnalysisResult
        Changed in place.
    **kwargs
        ``value_range``, ``effect``, ``n_records``: as :func:`result_warnings`.

    Returns
    -------
    AnalysisResult
        ``result``.
    """
    if not isinstance(result, AnalysisResult):
        return result
    new = result_warnings(result, **kwargs)
    result.warnings = tuple(dict.fromkeys((*tuple(result.warnings or ()), *new)))
    return result
