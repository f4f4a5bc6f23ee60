"""The local ops console: a read-only web view of one deployment (executions, runs, registry, maze pictures)."""
