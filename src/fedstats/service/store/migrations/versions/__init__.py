"""Migration scripts, applied in order by :func:`fedstats.service.store.upgrade`."""
