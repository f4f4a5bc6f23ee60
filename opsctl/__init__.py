"""mazeops-ops: the operators' CLI to start, follow and inspect runs, adapters and champions."""
