"""Each Triton model in `model_repository/` is a thin `model.py` over the package of its own name in
`backend_python/` (docs/ARCHITECTURE.md): a reader names a model's code from its name alone. The urgent lanes
are the second models of a package: `codec_urgent` runs the code of `codec`, `refiner_urgent` that of `refiner`."""
from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = REPO_ROOT / "model_repository"
SAME_CODE_AS = {"codec_urgent": "codec", "refiner_urgent": "refiner"}  # model -> the model whose package it runs


def imported_package(model_py: Path) -> str:
    """The `backend_python.<package>` a model.py imports its model class from."""
    froms = [node.module for node in ast.walk(ast.parse(model_py.read_text()))
             if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("backend_python.")]
    assert len(froms) == 1, f"{model_py}: {froms}"
    return froms[0].split(".")[1]


def test_each_triton_model_runs_the_package_of_its_name():
    models = sorted(p.name for p in REPOSITORY.iterdir() if (p / "config.pbtxt").exists())
    assert {"vox_ensemble", "speechlm_lm", "codec", "codec_urgent", "voice_encoder", "voice_registry"} <= set(models)
    for model in models:
        package = imported_package(REPOSITORY / model / "1" / "model.py")
        assert package == SAME_CODE_AS.get(model, model), f"{model} runs backend_python.{package}"
        assert (REPO_ROOT / "backend_python" / package / "model.py").exists(), package


def test_the_architecture_document_names_each_model_and_its_package():
    text = (REPO_ROOT / "docs" / "ARCHITECTURE.md").read_text()
    for model in (p.name for p in REPOSITORY.iterdir() if (p / "config.pbtxt").exists()):
        assert f"| `{model}` | `backend_python/{SAME_CODE_AS.get(model, model)}/`" in text, model
