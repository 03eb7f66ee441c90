"""What devices and servers share, below both: encoding, signatures, certificates, seeds, the registry.

The canonical encoding, signatures and certificates, the run seed, and the registry of analyses.

``fedstats.client`` (the device SDK) and ``fedstats.service`` (the server) both import this package and
never each other. The canonical encoding (:mod:`.encoding`) is re-exported here, so ``wire.dumps``,
``wire.digest`` and friends read as they did; the other modules are imported on use:

* :mod:`.encoding` - canonical JSON (hashes, task ids, round parameters, sums);
* :mod:`.auth` - Ed25519 keys, signed requests, certificates;
* :mod:`.enrollment` - the enrollment authority and device identities;
* :mod:`.seeding` - commit-reveal run seeds and the ids derived from them;
* :mod:`.registry` - the installed analyses, their encoders and plans.
"""

from fedstats.wire.encoding import canonical_bytes, decode, digest, dumps, encode, loads

__all__ = ["canonical_bytes", "decode", "digest", "dumps", "encode", "loads"]
