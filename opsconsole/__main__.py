"""`python -m opsconsole`: serve the ops console."""

from opsconsole.cli import main

raise SystemExit(main())
