"""`python -m opsctl` runs the ops CLI."""

import sys

from opsctl.cli import main

sys.exit(main())
