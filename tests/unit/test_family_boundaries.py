"""Where a family's facts live: in its torch-free description (`models/<family>/description.py`), listed once in
`models/families.py`, and nowhere in the server outside `backend_python/models/`.

- the descriptions and their list import no torch (nor numpy, transformers, safetensors, Triton): imported in a
  process where those imports fail;
- the list holds every family package, and a family's `family.py` states none of its description's facts;
- no model code imports scheduler policy beyond the chunk plan's type (`scheduler.chunking`);
- no server code outside `models/` names a family: its names and preset prefixes are searched for in every .py
  file of `scheduler/`, `protocol/`, `backend_python/` outside `models/` and the launcher and gateway. Behaviour
  that differs per family reads a description's field instead.
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from backend_python.models.families import FAMILIES, find

REPO_ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO_ROOT / "backend_python" / "models"
HEAVY = ("torch", "torchaudio", "transformers", "numpy", "safetensors", "triton", "triton_python_backend_utils")
# the server's code outside models/: the launcher and the gateway live in `server/`; `audio/` is the router's too
SERVER_CODE = ("scheduler", "protocol", "audio", "backend_python", "server")
# the microbenchmarks: one named model's kernels, as tools/ are; the CLI: its help tells a user which families a
# flag acts on (what docs/ do), and behaviour that differs per family is still read from a description
NOT_SERVER = (REPO_ROOT / "server" / "microbench", REPO_ROOT / "server" / "cli.py")
SCHEDULER_TYPES_FOR_MODELS = {"scheduler.chunking"}  # a description states its chunk plan as a ChunkingConfig
FACTS = {"name", "tiny_presets", "random_presets", "is_checkpoint"}  # a description's, never restated in family.py

IMPORT_WITHOUT_HEAVY = """
import json, sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {heavy!r}:
            raise ImportError("refused in this test: " + name)
sys.meta_path.insert(0, Refuse())
import {module}
print(json.dumps(sorted(m for m in sys.modules if m.startswith("backend_python."))))
"""


def import_without_heavy(module: str) -> subprocess.CompletedProcess:
    code = IMPORT_WITHOUT_HEAVY.format(heavy=HEAVY, module=module)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)


def test_the_descriptions_and_their_list_import_nothing_heavy():
    done = import_without_heavy("backend_python.models.families")
    assert done.returncode == 0, done.stderr
    imported = set(json.loads(done.stdout.splitlines()[-1]))
    assert {f"{family.package}.description" for family in FAMILIES} <= imported


def test_a_module_that_imports_torch_fails_that_import():
    """The check can fail: a family's `family.py` (torch) does not import there."""
    done = import_without_heavy("backend_python.models.csm.family")
    assert done.returncode != 0 and "refused in this test: torch" in done.stderr


def family_packages() -> set[str]:
    return {f"backend_python.models.{path.parent.name}" for path in MODELS_DIR.glob("*/family.py")}


def test_the_list_holds_every_family_once():
    assert {family.package for family in FAMILIES} == family_packages()
    names = [family.name for family in FAMILIES]
    presets = [preset for family in FAMILIES for preset in family.presets]
    assert len(set(names)) == len(names) and len(set(presets)) == len(presets)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda family: family.name)
def test_a_family_module_restates_none_of_its_description(family):
    path = MODELS_DIR / family.package.rsplit(".", 1)[-1] / "family.py"
    assigned = set()
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        assigned |= {target.id for target in targets if isinstance(target, ast.Name)}
        if isinstance(node, ast.FunctionDef):
            assigned.add(node.name)
    assert assigned & FACTS == set()


@pytest.mark.parametrize("family", FAMILIES, ids=lambda family: family.name)
def test_a_preset_is_its_family_and_a_foreign_directory_none(family, tmp_path):
    for preset in family.presets:
        assert find(preset) == (family, None)
    assert not family.is_checkpoint(tmp_path)


def scheduler_imports(path: Path) -> set[str]:
    """The `scheduler` modules a source file imports from (absolute imports: scheduler is no package of theirs)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return {name for name in names if name.split(".")[0] == "scheduler"}


def test_model_code_imports_only_the_chunk_plans_type_from_the_scheduler():
    found = {str(path.relative_to(REPO_ROOT)): scheduler_imports(path) for path in MODELS_DIR.rglob("*.py")}
    assert {path: names for path, names in found.items() if names - SCHEDULER_TYPES_FOR_MODELS} == {}


def test_the_scheduler_import_check_sees_a_plan_table(tmp_path):
    planted = tmp_path / "codec.py"
    planted.write_text("from scheduler.family_plans import PLANS\nimport scheduler.routing\n")
    assert scheduler_imports(planted) == {"scheduler.family_plans", "scheduler.routing"}


def family_words() -> set[str]:
    """Each family's name, package, preset prefix (what its presets share, e.g. `qwen3-tts`) and the letters its
    package starts with (`cosyvoice`, `higgs`: how prose names it, `CosyVoice 3`, `Higgs v3`)."""
    words = set()
    for family in FAMILIES:
        package = family.package.rsplit(".", 1)[-1]
        shared = family.presets[0]
        for preset in family.presets:
            shared = shared[:next((i for i, (a, b) in enumerate(zip(shared, preset)) if a != b), len(shared))]
        words |= {family.name, package, shared.rsplit("-", 1)[0], re.match(r"[a-z]+", package).group()}
    return {word.lower() for word in words if word}


def family_pattern(words: set[str]) -> re.Pattern:
    """A word at the start of an identifier or word; a short one (`tse`, `csm`) only as a whole word."""
    parts = [re.escape(word) + ("(?![a-z])" if len(word) <= 4 else "") for word in sorted(words, key=len, reverse=True)]
    return re.compile(r"(?<![a-z0-9])(?:" + "|".join(parts) + ")", re.IGNORECASE)


def server_files() -> list[Path]:
    files = []
    for root in SERVER_CODE:
        path = REPO_ROOT / root
        files += [path] if path.is_file() else sorted(path.rglob("*.py")) if path.is_dir() else []
    return [path for path in files if path not in NOT_SERVER and not {MODELS_DIR, *NOT_SERVER} & set(path.parents)]


def family_names_in(files: list[Path], pattern: re.Pattern) -> list[str]:
    return [f"{path.relative_to(REPO_ROOT) if REPO_ROOT in path.parents else path.name}:{number}: {line.strip()}"
            for path in files for number, line in enumerate(path.read_text().splitlines(), 1)
            if pattern.search(line)]


def test_the_server_outside_models_names_no_family():
    files = server_files()
    assert any("class ServeConfig" in path.read_text() for path in files)  # the launcher is searched, wherever it is
    assert family_names_in(files, family_pattern(family_words())) == []


def test_the_name_search_finds_a_family_in_prose_and_in_a_preset(tmp_path):
    words = family_words()
    assert {"qwen3-tts", "qwen", "cosyvoice", "higgs-v3", "tse", "tontaube"} <= words
    planted = tmp_path / "routing.py"
    planted.write_text("# CosyVoice 3's codec\nif model.startswith('higgs-v3-'):\n    pass\nuntsen = 'itself'\n"
                       "x = 1  # a TontaubeV1 chunk\nmodel = 'tse-tiny'\n")
    found = family_names_in([planted], family_pattern(words))
    assert [line.split(":")[1] for line in found] == ["1", "2", "5", "6"]
