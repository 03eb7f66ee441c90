"""``fedstats calibrate`` and ``fedstats privacy``: noise calibration and what a mechanism costs.

* ``fedstats calibrate gaussian --epsilon E --delta D [--sensitivity S] [--classical] [--json]`` prints the
  smallest Gaussian noise sigma (Balle & Wang 2018), or the classical one, with the delta it achieves
  exactly (``sigma``, ``delta_achieved`` in the JSON); ``--resolution-bits K`` adds the discrete Gaussian
  calibration on the 2^-k release grid.
* ``fedstats privacy explain MECHANISM [--epsilon E] [--delta D] [--sensitivity S] [--k K] ...`` prints the
  mechanism's privacy loss (computed from its output distribution), its variance and bias, and the grid its
  outputs are released on.
"""

from __future__ import annotations

import math
import sys
import warnings
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fedstats.cli._common import FedstatsGroup, JsonOption, check_applies, emit, state_from
from fedstats.errors import ParameterError

if TYPE_CHECKING:  # imported where used: ``--help`` loads neither rich, numpy nor scipy
    from rich.console import Console

    from fedstats.privacy.mechanisms import Mechanism

calibrate_app = typer.Typer(
    cls=FedstatsGroup, help="Calibrate noise to a privacy target.", no_args_is_help=True
)
privacy_app = typer.Typer(
    cls=FedstatsGroup, help="Privacy of fedstats' mechanisms.", no_args_is_help=True
)

MAX_SENSITIVITY = 1e150
"""Largest ``--sensitivity`` of ``calibrate gaussian`` (the noise's variance, ~ S^2, stays finite)."""

MECHANISMS = ("rr", "grr", "laplace", "gaussian", "harmony", "duchi", "piecewise", "dithering")

EpsilonOption = Annotated[float, typer.Option("--epsilon", help="Privacy parameter epsilon > 0.")]
SensitivityOption = Annotated[
    float,
    typer.Option(
        "--sensitivity", help="Sensitivity of the query (L2 for Gaussian, L1 for Laplace)."
    ),
]


def _table(rows: dict[str, Any]) -> Any:
    def render(console: Console) -> None:
        from rich.table import Table

        table = Table(show_header=False, box=None)
        for key, value in rows.items():
            table.add_row(key, f"{value:.10g}" if isinstance(value, float) else str(value))
        console.print(table)

    return render


@calibrate_app.command("gaussian")
def calibrate_gaussian(
    ctx: typer.Context,
    epsilon: EpsilonOption,
    delta: Annotated[float, typer.Option("--delta", help="Target delta in (0, 1).")],
    sensitivity: SensitivityOption = 1.0,
    classical: Annotated[
        bool,
        typer.Option(
            "--classical", help="Classical sigma = S sqrt(2 ln(1.25/D)) / E (needs E < 1)."
        ),
    ] = False,
    allow_large_epsilon: Annotated[
        bool,
        typer.Option(
            "--allow-large-epsilon",
            help="With --classical: accept E >= 1 as paper 000 does (unproven; warns).",
        ),
    ] = False,
    resolution_bits: Annotated[
        int | None,
        typer.Option(
            "--resolution-bits",
            min=1,
            max=40,
            help="Also calibrate the discrete Gaussian on the release grid 2^(ceil(log2 S) - K).",
        ),
    ] = None,
    json_flag: JsonOption = False,
) -> None:
    """Smallest Gaussian noise for (epsilon, delta)-DP, and the delta it achieves exactly."""
    from fedstats.privacy.analysis import (
        analytic_gaussian_delta,
        analytic_gaussian_sigma,
        classical_gaussian_sigma,
        gaussian_rho,
    )
    from fedstats.privacy.analysis.discrete_gaussian import (
        discrete_gaussian_delta,
        discrete_gaussian_sigma,
    )
    from fedstats.privacy.mechanisms import grid_spacing

    state = state_from(ctx, json_flag=json_flag)
    check_applies(
        ctx,
        "allow_large_epsilon",
        classical,
        "only with --classical (the analytic calibration holds for every epsilon)",
    )
    if not 0.0 < sensitivity <= MAX_SENSITIVITY:
        # sigma grows with the sensitivity and rho with its square: blame the sensitivity, not delta
        raise ParameterError(
            "--sensitivity",
            sensitivity,
            f"a real number in (0, {MAX_SENSITIVITY:g}] (sigma and rho would overflow beyond it)",
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if classical:
            if epsilon >= 1.0 and not allow_large_epsilon:
                raise ParameterError(
                    "--epsilon",
                    epsilon,
                    "a value in (0, 1) with --classical (drop --classical for the exact analytic "
                    "calibration, or add --allow-large-epsilon to reproduce paper 000's unproven usage)",
                )
            sigma = classical_gaussian_sigma(
                epsilon=epsilon,
                delta=delta,
                sensitivity=sensitivity,
                allow_large_epsilon=allow_large_epsilon,
            )
        else:
            sigma = analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
    for w in caught:
        typer.echo(f"warning: {w.message}", err=True)
    achieved = analytic_gaussian_delta(epsilon=epsilon, sigma=sigma, sensitivity=sensitivity)
    payload: dict[str, Any] = {
        "method": "classical" if classical else "analytic",
        "epsilon": epsilon,
        "delta": delta,
        "sensitivity": sensitivity,
        "sigma": sigma,
        "delta_achieved": achieved,
        "rho": gaussian_rho(sigma=sigma, sensitivity=sensitivity),
        "private": achieved <= delta,
        "source": "Dwork & Roth 2014, Thm. A.1"
        if classical
        else "Balle & Wang 2018, Thm. 8 (exact, log-space)",
    }
    if resolution_bits is not None:
        grid = grid_spacing(sensitivity, resolution_bits)
        d_int = math.ceil(sensitivity / grid)
        s_int = discrete_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=d_int)
        payload["grid"] = grid
        payload["integer_sensitivity"] = d_int
        payload["discrete_sigma"] = s_int * grid
        payload["discrete_delta_achieved"] = discrete_gaussian_delta(
            epsilon=epsilon, sigma=s_int, sensitivity=d_int
        )
    emit(state, payload, _table(payload))


def _build(
    mechanism: str,
    *,
    epsilon: float | None,
    delta: float | None,
    sensitivity: float,
    k: int | None,
    bit_depth: int,
    resolution_bits: int,
) -> Mechanism:
    from fedstats.privacy.mechanisms import (
        DuchiMechanism,
        GaussianMechanism,
        GeneralizedRandomizedResponse,
        Harmony,
        LaplaceMechanism,
        PiecewiseMechanism,
        RandomizedResponse,
        SubtractiveDithering,
    )

    if mechanism not in MECHANISMS:
        raise ParameterError("MECHANISM", mechanism, "one of " + ", ".join(MECHANISMS))
    if mechanism == "dithering":
        return SubtractiveDithering(bit_depth=bit_depth)
    if epsilon is None:
        raise ParameterError("--epsilon", None, f"a value > 0 (required for {mechanism})")
    bits = None if resolution_bits == 0 else resolution_bits
    if mechanism == "rr":
        return RandomizedResponse(epsilon=epsilon)
    if mechanism == "grr":
        if k is None:
            raise ParameterError("--k", None, "an integer >= 2 (required for grr)")
        return GeneralizedRandomizedResponse(epsilon=epsilon, k=k)
    if mechanism == "laplace":
        return LaplaceMechanism(epsilon=epsilon, sensitivity=sensitivity, resolution_bits=bits)
    if mechanism == "gaussian":
        if delta is None:
            raise ParameterError("--delta", None, "a value in (0, 1) (required for gaussian)")
        return GaussianMechanism(
            epsilon=epsilon, delta=delta, sensitivity=sensitivity, resolution_bits=bits
        )
    if mechanism == "harmony":
        return Harmony(epsilon=epsilon)
    if mechanism == "duchi":
        return DuchiMechanism(epsilon=epsilon)
    return PiecewiseMechanism(epsilon=epsilon, resolution_bits=bits)


def _sentence(info: dict[str, Any]) -> str:
    eps, dlt = info["epsilon"], info["delta"]
    if math.isinf(eps):
        priv = "is NOT differentially private on its own (deterministic given public randomness)"
    elif dlt:
        priv = f"is ({eps:.6g}, {dlt:.3g})-DP per application"
    else:
        priv = f"is {eps:.6g}-DP per application"
    if math.isinf(eps):
        safety = "add a DP mechanism before any release"
    elif info["floating_point_safe"]:
        safety = "safe to release"
    else:
        safety = "for simulation only (floating-point outputs can leak, Mironov 2012)"
    return (
        f"{info['mechanism']} {priv}; one report has variance {info['variance_worst_case']:.6g} "
        f"(worst case) and bias at most {info['bias_worst_case']:.3g}; outputs: {info['release_grid']}, "
        f"{safety}."
    )


@privacy_app.command("explain")
def explain(
    ctx: typer.Context,
    mechanism: Annotated[str, typer.Argument(help="One of: " + ", ".join(MECHANISMS) + ".")],
    epsilon: Annotated[float | None, typer.Option("--epsilon", help="Privacy parameter.")] = None,
    delta: Annotated[float | None, typer.Option("--delta", help="delta (gaussian).")] = None,
    sensitivity: SensitivityOption = 1.0,
    k: Annotated[int | None, typer.Option("--k", help="Domain size (grr).")] = None,
    bit_depth: Annotated[int, typer.Option("--bit-depth", help="Bits (dithering).")] = 1,
    resolution_bits: Annotated[
        int,
        typer.Option(
            "--resolution-bits",
            min=0,
            max=40,
            help="Release grid for laplace/gaussian/piecewise (0: float path, simulation only).",
        ),
    ] = 20,
    json_flag: JsonOption = False,
) -> None:
    """A mechanism's privacy loss, variance, bias and release grid, in words."""
    state = state_from(ctx, json_flag=json_flag)
    name = mechanism.lower()
    uses = {
        "epsilon": name != "dithering",
        "delta": name == "gaussian",
        "sensitivity": name in ("laplace", "gaussian"),
        "k": name == "grr",
        "bit_depth": name == "dithering",
        "resolution_bits": name in ("laplace", "gaussian", "piecewise"),
    }
    if name in MECHANISMS:
        for option, applies in uses.items():
            check_applies(ctx, option, applies, f"unset for {name} (it does not use it)")
    mech = _build(
        mechanism.lower(),
        epsilon=epsilon,
        delta=delta,
        sensitivity=sensitivity,
        k=k,
        bit_depth=bit_depth,
        resolution_bits=resolution_bits,
    )
    info = mech.explain()
    info["explanation"] = _sentence(info)

    def render(console: Console) -> None:
        console.print(info["explanation"])
        _table({key: v for key, v in info.items() if key not in ("explanation", "parameters")})(
            console
        )

    emit(state, info, render)
    sys.stdout.flush()


def register(app: typer.Typer) -> None:
    """Add the ``calibrate`` and ``privacy`` groups to the app."""
    app.add_typer(calibrate_app, name="calibrate")
    app.add_typer(privacy_app, name="privacy")
