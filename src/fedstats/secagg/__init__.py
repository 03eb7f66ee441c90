"""Secure aggregation (Bell et al. 2020): the server learns only the sum of the clients' vectors mod 2^b.

Client and server are explicit state machines (:class:`SecAggClient`, :class:`SecAggServer`) exchanging
plain byte-serializable messages (:mod:`fedstats.secagg.messages`); :func:`run_secure_aggregation` runs
``n`` clients and a server in-process. See ``docs/secagg.md``.

References
----------
Bell, Bonawitz, Gascon, Lepoint, Raykova (2020). Secure single-server aggregation with (poly)logarithmic
overhead. CCS 2020, Alg. 2; Pang et al. 2023, App. B (Alg. 3, 4, Def. 4).
"""

from fedstats.secagg.client import SecAggClient
from fedstats.secagg.driver import DROPOUT_STAGES, SecAggResult, run_secure_aggregation
from fedstats.secagg.graph import harary_neighbors, random_harary_graph
from fedstats.secagg.params import SecAggParameters, find_parameters, validate_parameters
from fedstats.secagg.quantize import FixedPoint, Quantized, check_overflow
from fedstats.secagg.server import SecAggServer

__all__ = [
    "DROPOUT_STAGES",
    "FixedPoint",
    "Quantized",
    "SecAggClient",
    "SecAggParameters",
    "SecAggResult",
    "SecAggServer",
    "check_overflow",
    "find_parameters",
    "harary_neighbors",
    "random_harary_graph",
    "run_secure_aggregation",
    "validate_parameters",
]
