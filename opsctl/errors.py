"""The one exception the CLI turns into a one-line error message and exit status 2."""


class OpsError(RuntimeError):
    """A refused or impossible operator request; the message says what to do instead."""
