"""Render the chart as `helm template` does, through Helm's own Go engine (the helm-python-sdk wheel).

    .venv/bin/python -m tools.render_chart [--set triton.gpus=2 …] [--namespace NS] [--name RELEASE]

prints the manifests (with `helm` installed, `helm template RELEASE deploy/helm/voxlane` prints the same).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parents[1] / "deploy" / "helm" / "voxlane"


def render(values: dict | None = None, name: str = "voxlane", namespace: str = "default") -> dict[str, str]:
    """Template path → rendered YAML, as Helm renders an install of `name` into `namespace`."""
    import helm_python
    return helm_python.Chart.load(CHART).render(values or {}, name=name, namespace=namespace, is_install=True)


def manifests(values: dict | None = None, name: str = "voxlane", namespace: str = "default") -> list[dict]:
    """Every Kubernetes object the chart renders."""
    return [doc for text in render(values, name, namespace).values() for doc in yaml.safe_load_all(text) if doc]


def parse_sets(sets: list[str]) -> dict:
    """`a.b=1` flags into nested values (YAML scalars: numbers and booleans keep their type)."""
    values: dict = {}
    for item in sets:
        key, _, raw = item.partition("=")
        *parents, leaf = key.split(".")
        node = values
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(raw)
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--name", default="voxlane")
    parser.add_argument("--namespace", default="default")
    args = parser.parse_args()
    for path, text in sorted(render(parse_sets(args.set), args.name, args.namespace).items()):
        if text.strip():
            print(f"---\n# Source: {path}\n{text.strip()}")


if __name__ == "__main__":
    main()
