"""`voxlane bench`: an open-loop streaming load generator, its per-request records, summaries and plots.

Layers, each passing plain data to the next:
workload (what to say) → arrivals (when) → loadgen (gRPC streams, raw records)
→ records (TTFA, stalls, SLO per request) → summary (per rate, capacity) → plot.
"""
