"""The Grafana dashboard's queries, and the metric names they read (shared by its unit and e2e tests)."""
from __future__ import annotations

import json
import re
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "voxlane-dashboard.json"
# Grafana's variables, replaced by values the PromQL parser accepts
VARIABLES = {"$__rate_interval": "1m", "$job": ".*"}
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{")
PROMETHEUS_SERIES = {"up"}  # made by Prometheus per scrape target, never on an exporter's /metrics


def load() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries(dashboard: dict) -> list[str]:
    """Every panel's PromQL with Grafana's variables filled in."""
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for name, value in VARIABLES.items():
        exprs = [e.replace(name, value) for e in exprs]
    return exprs


def metric_names(exprs: list[str]) -> set[str]:
    """The series names the queries select (every selector in the dashboard carries a label matcher)."""
    return {name for e in exprs for name in SELECTOR.findall(e)}
