"""The server's domain layer: tasks, runs and their driver, the ledger, secure sessions, report checks.

Domain functions work on one store transaction each and raise :class:`fedstats.errors.FedstatsError`
subclasses; they know nothing of HTTP.
"""
