"""The one rule every analysis's one-call API follows for ``engine``, ``randomness`` and ``ledger``.

Every ``api.py`` function has the shape ``analysis(data, config or keyword options, *, engine=None,
randomness=None, ledger=None)``, and resolves its arguments with :func:`resolve`:

* ``engine`` computes the rounds' sums: the route (serial, process, dask, secure), the block size, progress,
  and **the clients' private randomness** (``engine.randomness``, keyed by round and block);
* ``randomness`` is **the server's**: public seeds (projections, permutations), central noise, simulated
  populations and dropout. It defaults to ``engine.randomness`` (the server's draws use their own keys,
  ``randomness.generator("server", ...)``, so they never collide with the clients' streams);
* with neither given, both are one secure :class:`~fedstats.randomness.RandomSource`; with only
  ``randomness``, a serial engine is built on it, so ``randomness=RandomSource(seed=s)`` alone reproduces a
  whole run;
* ``ledger`` (a :class:`~fedstats.privacy.ledger.PrivacyLedger`) is charged for every release *before* the
  protocol runs, inside :meth:`~fedstats.privacy.ledger.PrivacyLedger.atomic`, so a refused request
  charges nothing and runs nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from fedstats.engine.core import Engine
from fedstats.privacy.ledger import BitMeter, PrivacyLedger
from fedstats.randomness import RandomSource

__all__ = ["charging", "resolve"]


def resolve(engine: Engine | None, randomness: RandomSource | None) -> tuple[Engine, RandomSource]:
    """Apply the rule above: return the engine that sums and the server's randomness.

    Parameters
    ----------
    engine : Engine or None
        The route; None builds a serial :class:`~fedstats.engine.core.Engine` on ``randomness``.
    randomness : RandomSource or None
        The server's randomness; None uses ``engine.randomness`` (or a new secure source).

    Returns
    -------
    (Engine, RandomSource)
    """
    if engine is None:
        engine = Engine(randomness=randomness if randomness is not None else RandomSource())
    return engine, (randomness if randomness is not None else engine.randomness)


@contextmanager
def charging(ledger: PrivacyLedger | None, bit_meter: BitMeter | None = None) -> Iterator[None]:
    """All-or-nothing charging of a request's releases (and disclosed bits).

    Parameters
    ----------
    ledger : PrivacyLedger or None
        Charged inside :meth:`PrivacyLedger.atomic`; None charges nothing.
    bit_meter : BitMeter or None
        Likewise for disclosed bits.

    Yields
    ------
    None
    """
    lctx: Any = ledger.atomic() if ledger is not None else nullcontext()
    bctx: Any = bit_meter.atomic() if bit_meter is not None else nullcontext()
    with lctx, bctx:
        yield
