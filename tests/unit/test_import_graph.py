"""The import graph of `backend_python/` (and `clients/`, `server/`), read with `ast`: no circle between modules
nor between packages, no model family importing another family (siblings share through the floor under
`models/`, never through each other), and the top-level packages in their layers: `clients/` stands on
`protocol/` and `audio/` alone, and nothing but `server/` imports `server/`.

Every import counts, also one inside a function or under `TYPE_CHECKING`: a lazy import that closes
a circle is still a circle a reader has to hold in their head.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "backend_python"
MODELS = f"{PACKAGE}.models"


def module_files(root: Path = REPO_ROOT / PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the package (a package is its __init__)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(REPO_ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def imported_modules(module: str, path: Path, modules: set[str]) -> set[str]:
    """The modules of `modules` that `module` imports. `from x import y` imports x.y when that is a
    module, else x; a parent package that runs on the way to its submodule is not counted (every
    submodule would make a circle with an `__init__` that imports it)."""
    is_package = path.name == "__init__.py"
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = resolve(module, is_package, node.level, node.module)
            submodules = {f"{base}.{alias.name}" for alias in node.names} & modules
            names.update(submodules if len(submodules) == len(node.names) else submodules | {base})
    return (names & modules) - {module}


def resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of `from <level dots><target> import ...` written in `module`."""
    if level == 0:
        return target or ""
    parts = module.split(".")
    anchor = parts if is_package else parts[:-1]
    anchor = anchor[:len(anchor) - (level - 1)]
    return ".".join(anchor + ([target] if target else []))


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the package modules it imports (names that are not modules of ours are dropped)."""
    return {name: imported_modules(name, path, set(modules)) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph as [a, b, ..., a], or None (depth-first search with colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def family_of(module: str, families: set[str]) -> str | None:
    """The family package a module belongs to, e.g. `backend_python.models.csm`, or None (the floor)."""
    parts = module.split(".")
    if len(parts) < 3 or ".".join(parts[:2]) != MODELS:
        return None
    family = ".".join(parts[:3])
    return family if family in families else None


def families(modules: dict[str, Path]) -> set[str]:
    """The packages under models/ with a `family.py` (the module the registry reads)."""
    return {name.rsplit(".", 1)[0] for name in modules
            if name.startswith(MODELS + ".") and name.endswith(".family")}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(module_files())


def test_the_graph_sees_the_tree(graph):
    """Guards the reader: it finds the families and edges it is meant to judge."""
    fams = families(module_files())
    assert {f"{MODELS}.qwen3_tts", f"{MODELS}.csm", f"{MODELS}.orpheus"} <= fams
    assert f"{MODELS}.layers.decoder" in graph[f"{MODELS}.csm.layers"]
    assert f"{MODELS}.flashtts.description" in graph[f"{MODELS}.flashtts.codec"]


def test_backend_python_has_no_import_circle(graph):
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_family_imports_another_family(graph):
    fams = families(module_files())
    crossings = sorted(f"{src} -> {dst}" for src, targets in graph.items() for dst in targets
                       if family_of(src, fams) and family_of(dst, fams) not in (None, family_of(src, fams)))
    assert crossings == []


def test_the_floor_imports_no_family(graph):
    """The registry and the list of families (families.py) load a family by its package's name, never by an import:
    nothing under the families is a floor module's dependency."""
    fams = families(module_files())
    floor = (m for m in graph if family_of(m, fams) is None)
    crossings = sorted(f"{src} -> {dst}" for src in floor for dst in graph[src] if family_of(dst, fams))
    assert crossings == []


def test_find_cycle_reports_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_relative_imports_resolve():
    assert resolve(f"{MODELS}.csm.lm", False, 2, "layers.decoder") == f"{MODELS}.layers.decoder"
    assert resolve(f"{MODELS}.csm.lm", False, 1, None) == f"{MODELS}.csm"
    assert resolve(f"{MODELS}.csm", True, 1, "lm") == f"{MODELS}.csm.lm"


def package_graph(graph: dict[str, set[str]], depth: int) -> dict[str, set[str]]:
    """The graph between packages `depth` names deep (`backend_python.vox_ensemble`, `clients.bench`):
    an edge wherever a module of one imports a module of the other."""
    def package(module: str) -> str:
        return ".".join(module.split(".")[:depth])
    packages: dict[str, set[str]] = {}
    for src, targets in graph.items():
        packages.setdefault(package(src), set()).update(package(t) for t in targets if package(t) != package(src))
    return packages


@pytest.mark.parametrize("root", ["backend_python", "clients", "server"])
def test_no_package_circle(root):
    """A package that imports a package that imports it back cannot be read alone (the router and the
    voice registry were one such pair, through the encoder's client; bench and perf_analyzer another)."""
    graph = import_graph(module_files(REPO_ROOT / root))
    cycle = find_cycle(package_graph(graph, 2))
    assert cycle is None, " -> ".join(cycle)


def test_package_graph_sees_a_package_circle():
    graph = {"p.a.x": {"p.b.y"}, "p.b.y": set(), "p.b.z": {"p.a.w"}, "p.a.w": set()}
    assert find_cycle(package_graph(graph, 2)) == ["p.a", "p.b", "p.a"]


TOP_LEVEL = ("backend_python", "scheduler", "protocol", "audio", "clients", "server")
# what a top-level package may import of ours besides itself: a client runs with the wire protocol and the
# torch-free audio, without the server's code (and its torch); the floor those two are imports none of the rest
MAY_IMPORT = {"clients": {"protocol", "audio"}, "protocol": {"audio"}, "audio": {"protocol"}}


def top_level(module: str) -> str:
    return module.split(".")[0]


def layer_crossings(graph: dict[str, set[str]], package: str, allowed: set[str]) -> list[str]:
    """The edges out of `package`'s modules into top-level packages other than itself and `allowed`."""
    return sorted(f"{src} -> {dst}" for src, targets in graph.items() if top_level(src) == package
                  for dst in targets if top_level(dst) not in allowed | {package})


@pytest.fixture(scope="module")
def whole_graph() -> dict[str, set[str]]:
    """Every top-level package's modules and the edges between them all."""
    modules = {name: path for root in TOP_LEVEL for name, path in module_files(REPO_ROOT / root).items()}
    return import_graph(modules)


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_a_package_imports_only_the_layers_under_it(whole_graph, package):
    assert layer_crossings(whole_graph, package, MAY_IMPORT[package]) == []


@pytest.mark.parametrize("package", [p for p in TOP_LEVEL if p != "server"])
def test_nothing_but_the_server_imports_the_server(whole_graph, package):
    assert layer_crossings(whole_graph, package, set(TOP_LEVEL) - {"server"}) == []


def test_the_whole_graph_sees_the_layers(whole_graph):
    """Guards the reader: edges across top-level packages are seen, both plain and `from package import`."""
    assert "protocol.chunks" in whole_graph["clients.bench.records"]
    assert "audio.decoding" in whole_graph["clients.voices"]
    assert "clients.cli" in whole_graph["server.cli"]
    assert layer_crossings({"clients.x": {"server.y", "protocol.z"}, "server.y": {"clients.x"}}, "clients",
                           MAY_IMPORT["clients"]) == ["clients.x -> server.y"]
