"""Why the engine ended a request, where other processes read it (no torch import here: the router needs it)."""
CANCELLED = "cancelled"  # the finish reason of a cancelled request
