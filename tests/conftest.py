"""Shared test set-up: CPU settings that keep random-weight models fast."""
import pytest
import torch

from backend_python.models.optional_imports import hide_unimportable_optional_packages

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
