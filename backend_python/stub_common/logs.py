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
    # a stub that crashes (a signal) prints its Python threads' stacks there too, until it is unloaded
    if not faulthandler.is_enabled():
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


def stop_fault_reports() -> None:
    """The stub is being unloaded: its process exits next, and Triton 2.51's stubs often die of a segmentation
    fault on the way out (after "successfully unloaded"), which is no fault of a model's and would print a
    "Fatal Python error" into the server's log at every stop."""
    faulthandler.disable()
