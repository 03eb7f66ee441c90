"""DAP (draft-ietf-ppm-dap-09): the Distributed Aggregation Protocol's wire, HPKE and roles.

fedstats' two-aggregator Prio3 mode can speak DAP, the protocol Divvi Up's Janus, Cloudflare's Daphne and
Firefox's telemetry use, so that a DAP client can upload and a DAP collector can collect. The draft is
the one the latest Janus release (0.7.135) implements, so every message can be checked byte for byte
against published encodings. Modules:

* :mod:`fedstats.dap.codec`: the TLS presentation-language codec, strict;
* :mod:`fedstats.dap.hpke`: HPKE base mode (RFC 9180) for X25519 / HKDF-SHA256 / AES-128-GCM, HPKE configs;
* :mod:`fedstats.dap.messages`: every DAP-09 message with its encoding and media type;
* :mod:`fedstats.dap.task`: ids, HPKE info strings, the VDAF context and the batch checksum of a task;
* :class:`Client` (upload) and :class:`Collector` (collection from any DAP-09 leader), with its
  :class:`CollectorCredential` (``fedstats admin collect --dap``).

See the "DAP" section of ``docs/vdaf.md`` for what interoperates byte for byte and what does not.
"""

from __future__ import annotations

from fedstats.dap.client import Client
from fedstats.dap.collector import CollectionResult, Collector, CollectorCredential

__all__ = ["Client", "CollectionResult", "Collector", "CollectorCredential"]
