"""Secure aggregation (Bell et al. 2020): the server learns only the sum of the clients' vectors mod 2^b.

Client and server are explicit, transport-free state machines (:class:`SecAggClient`,
:class:`SecAggServer`) exchanging byte-serializable messages (:mod:`fedstats.secagg.messages`);
:func:`run_secure_aggregation` runs ``n`` clients and a server in-process. Three threat models
(:data:`THREAT_MODELS`): ``"malicious"`` (default: identities certified by an
:class:`EnrollmentAuthority`, signed messages, client-pinned parameters and graph, consistency check),
``"semi-malicious"`` and ``"semi-honest"``; :data:`STOPPED_BY` says which attacks each stops. See
``docs/secagg.md``.

References
----------
Bell, Bonawitz, Gascon, Lepoint, Raykova (2020). Secure single-server aggregation with (poly)logarithmic
overhead. CCS 2020, Alg. 2 and Sec. 5; Pang et al. 2023, App. B (Alg. 3, 4, Def. 4).
Bonawitz et al. (2017). Practical secure aggregation for privacy-preserving machine learning. CCS 2017,
Sec. 4.3 (consistency check).

Names load on first use (:mod:`fedstats._lazy`): a device importing ``fedstats.secagg.quantize`` does
not load the client, driver and cryptography.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedstats._lazy import lazy_exports

if TYPE_CHECKING:
    from fedstats.secagg.client import SecAggClient
    from fedstats.secagg.driver import DROPOUT_STAGES, SecAggResult, run_secure_aggregation
    from fedstats.secagg.graph import harary_neighbors, public_harary_graph, random_harary_graph
    from fedstats.secagg.identity import (
        AuthorityVerifier,
        ClientIdentity,
        EnrollmentAuthority,
        RosterVerifier,
        SessionRoster,
    )
    from fedstats.secagg.params import (
        ATTACKS,
        STOPPED_BY,
        THREAT_MODELS,
        ClientConfig,
        SecAggParameters,
        find_parameters,
        validate_parameters,
    )
    from fedstats.secagg.quantize import FixedPoint, Quantized, check_overflow
    from fedstats.secagg.server import SecAggServer

_WHERE = {
    "ClientConfig": "params",
    "SecAggClient": "client",
    "DROPOUT_STAGES": "driver",
    "SecAggResult": "driver",
    "run_secure_aggregation": "driver",
    "harary_neighbors": "graph",
    "public_harary_graph": "graph",
    "random_harary_graph": "graph",
    "AuthorityVerifier": "identity",
    "ClientIdentity": "identity",
    "EnrollmentAuthority": "identity",
    "RosterVerifier": "identity",
    "SessionRoster": "identity",
    "ATTACKS": "params",
    "STOPPED_BY": "params",
    "THREAT_MODELS": "params",
    "SecAggParameters": "params",
    "find_parameters": "params",
    "validate_parameters": "params",
    "FixedPoint": "quantize",
    "Quantized": "quantize",
    "check_overflow": "quantize",
    "SecAggServer": "server",
}
__all__ = [
    "ATTACKS",
    "DROPOUT_STAGES",
    "STOPPED_BY",
    "THREAT_MODELS",
    "AuthorityVerifier",
    "ClientConfig",
    "ClientIdentity",
    "EnrollmentAuthority",
    "FixedPoint",
    "Quantized",
    "RosterVerifier",
    "SecAggClient",
    "SecAggParameters",
    "SecAggResult",
    "SecAggServer",
    "SessionRoster",
    "check_overflow",
    "find_parameters",
    "harary_neighbors",
    "public_harary_graph",
    "random_harary_graph",
    "run_secure_aggregation",
    "validate_parameters",
]
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
