"""Running a test file's kernel tests on the CPU under Triton's interpreter.

`TRITON_INTERPRET=1` must be set before Triton compiles anything, so the file runs again in a process of its own;
a file's test that calls `run_under_interpreter` skips where its kernels run natively (CUDA), where Triton is missing,
and inside that process itself."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HAS_TRITON = importlib.util.find_spec("triton") is not None
needs_interpreter_run = pytest.mark.skipif(
    not HAS_TRITON or torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
    reason="needs Triton on a machine without CUDA (with CUDA the file's tests run the kernels themselves)")


def run_under_interpreter(test_file: str, deselect: str = "not under_the_interpreter", timeout_s: int = 900) -> None:
    """Run `test_file`'s tests matching `deselect` (a -k expression) under the interpreter; every one must pass,
    none skip (a skip there would mean the kernels did not run)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", deselect, test_file],
                            env=env, capture_output=True, text=True, cwd=Path(__file__).parents[1], timeout=timeout_s)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout, result.stdout[-2000:]
