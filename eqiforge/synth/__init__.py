"""Rule synthesis and rule checking: ``eqiforge rules synthesize`` and ``eqiforge rules check``."""
