"""Resource figures of a running tritonserver and its stubs: `server/procstats.py`, here for the tools and tests.

    python -m tools.procstats --server-pid PID --every 15 > memory.csv    # samples until the server ends
"""
from __future__ import annotations

import sys

from server.procstats import (ProcStat, gpu_memory_used_mib, main, server_processes, snapshot, stat,  # noqa: F401
                               watch)

if __name__ == "__main__":
    sys.exit(main())
