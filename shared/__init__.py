"""Common code of every spotsweep service: schemas, topology, settings, ports."""
