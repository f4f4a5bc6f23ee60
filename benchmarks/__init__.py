"""Benchmarks of the control plane on the local stack (`make bench`); not tests: nothing here asserts timings."""
