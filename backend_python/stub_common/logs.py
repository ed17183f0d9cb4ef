"""Where a Triton model's `voxlane.*` log lines go: the stub's stderr, which tritonserver's log takes in.

Without a handler Python prints only warnings, bare; the router's line per stream (the client's request id and the
LM's stream id, so one request can be followed from the gateway's log through the router's to the LM's) is INFO.
"""
from __future__ import annotations

import faulthandler
import logging
import sys

LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"  # the gateway's too, less its request id
LOGGER = "voxlane"


def configure_stub_logging(level: int = logging.INFO) -> None:
    """One stderr handler on the `voxlane` logger of this stub process (idempotent: a reload runs initialize again
    in a new process, a second call in one process adds nothing)."""
    if not faulthandler.is_enabled():  # a stub that crashes (a signal) prints its Python threads' stacks there too
        faulthandler.enable(sys.stderr, all_threads=True)
    logger = logging.getLogger(LOGGER)
    if any(getattr(handler, "is_voxlane_stub", False) for handler in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.is_voxlane_stub = True
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False  # the root's last-resort printing would repeat warnings bare
