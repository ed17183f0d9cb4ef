"""Shared test set-up: CPU settings that keep random-weight models fast."""
import gc
import os

import pytest
import torch

from backend_python.models.optional_imports import hide_unimportable_optional_packages
from tests import parallel

# before any test imports transformers' modeling code: where numpy<2 is pinned (the GPU machine's
# devpack) a scipy or scikit-learn built for numpy 2 would otherwise fail every such import
hide_unimportable_optional_packages()

torch.set_flush_denormal(True)  # denormals made random-weight models ~10x slower on CPU
torch.set_num_threads(1)  # several processes share 2 cores; threads contend


@pytest.fixture
def no_tf32():
    """fp32 comparisons on CUDA without TF32 matmuls and convolutions (restored afterwards)."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On a parallel worker: groups whole and longest first (tests/parallel.py). In one process the order stays
    pytest's own."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items[:] = parallel.in_start_order(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config) -> int:
    return parallel.auto_workers(len(os.sched_getaffinity(0)), parallel.available_gib())


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return parallel.GroupScheduling(config, log)


def pytest_collection_finish(session) -> None:
    """Everything imported so far goes to gc's permanent generation: a full collection (the router's `finalize`
    runs one, at every middle test's teardown) then walks only what the tests made, not torch's modules."""
    gc.freeze()
