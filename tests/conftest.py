"""Suite-wide settings: set before any test module imports torch."""

import os

# torch's OpenMP threads spin while waiting; on a 2-core CI machine shared by Ray workers that
# slows the tiny-model tests up to 10x (measured: 23 s vs 100-150 s for the 64-maze evaluation).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
