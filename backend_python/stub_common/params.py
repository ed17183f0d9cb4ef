"""Reading a Triton model's `config.pbtxt` parameters and applying its lane settings."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from typing import Mapping

from backend_python.models.families import DEFAULT_MODEL
from backend_python.stub_common.logs import configure_stub_logging
from protocol.settings import read_settings


def model_parameters(args: dict) -> dict[str, str]:
    """The `parameters { key: ... value: { string_value: ... } }` map of the model config."""
    config = json.loads(args["model_config"])
    return {key: value["string_value"] for key, value in config.get("parameters", {}).items()}


@dataclass(frozen=True)
class LaneSettings:
    """What a lane's model process runs and where: model, device, dtype, its MPS share of the GPU's SMs,
    and its torch settings. Rendered into the lane's config.pbtxt by `voxlane serve` (`to_parameters`),
    parsed back by the model process (`from_parameters`)."""

    model: str = DEFAULT_MODEL  # a preset name, checkpoint directory or cached Hugging Face id
    device: str = "cpu"
    dtype: str = "float32"
    mps_active_thread_percentage: int = 100
    mps_client_priority: int = 0  # CUDA_MPS_CLIENT_PRIORITY: 0 normal, 1 below normal (yields to the other lanes)
    num_threads: int = 1  # torch threads: several model processes share the cores
    pin_gpu: bool = False  # the stub sees only its instance's GPU (disaggregated layouts: lanes on different GPUs)
    cuda_graphs: bool = True  # codecs on CUDA replay graphs per bucket (parameter `cuda_graphs`: false = eager)
    cudnn_benchmark: bool = False  # cuDNN tunes each conv shape once (the graphed codec sees only its buckets)
    torch_compile: bool = True  # the LM on CUDA fuses its decode kernels with Inductor (`torch_compile`: false = off)
    stream_states: bool = False  # a codec lane keeps each stream's decoder state and decodes only new frames
    codec_steps: int = 0  # a flow-matching codec's function evaluations per window (0: the model's own)
    # a codec with its own graphs compiles their hot part first (`Codec.use_torch_compile`; CUDA only): measured on an
    # H200, a flow-matching codec's window 38.7 -> 23.9 ms at batch 1 and its capacity 7.5 -> 12.6 req/s
    # (BENCHMARKS.md, "Flow-matching families")
    codec_compile: bool = True
    # the LM's code predictor runs each layer's attention (q/k norms, RoPE, cache writes, attention over its
    # 16 positions) as one Triton kernel (`fused_predictor`: false = PyTorch's kernels; CUDA only)
    fused_predictor: bool = True
    # the LM's whole decode frame on fused Triton kernels: projections with their norms, SwiGLU and residual adds,
    # the talker's q/k norm + RoPE + KV write, one sampling kernel per codebook drawing its own noise in the graph
    # (`fused_frame`; a model whose LM has such a frame; CUDA only). Off by default: built and tested against the PyTorch frame under Triton's
    # interpreter, not yet run on a GPU (BENCHMARKS.md, "The frame on fused Triton kernels")
    fused_frame: bool = False
    # the fused frame's projections read float8 e4m3 weights (a scale per output row, quantised at load): half the
    # bytes, the model's numbers rounded (`fp8_weights`; off by default; the fused frame's models; CUDA only)
    fp8_weights: bool = False
    # MiB of KV for cached voice prompt prefixes in the LM lane (models/prompt_cache.py; families that declare
    # `caches_prompts`): a request whose voice's prefix is cached prefills only its own positions. 0: no cache. 256 MiB
    # holds ~230 prefixes of the 1.7B talker in bfloat16 (9 positions of 112 KiB without instructions)
    prompt_cache_mib: int = 256

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        if not 1 <= self.mps_active_thread_percentage <= 100:
            raise ValueError("mps_active_thread_percentage must be in [1, 100]")
        if self.mps_client_priority not in (0, 1):
            raise ValueError(f"mps_client_priority must be 0 (normal) or 1 (below normal), got {self.mps_client_priority}")
        if self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {self.num_threads}")
        if self.codec_steps < 0:
            raise ValueError(f"codec_steps must be >= 0 (0: the model's own), got {self.codec_steps}")
        if self.prompt_cache_mib < 0:
            raise ValueError(f"prompt_cache_mib must be >= 0 (0: no prompt cache), got {self.prompt_cache_mib}")

    @classmethod
    def from_parameters(cls, params: Mapping[str, str]) -> "LaneSettings":
        """From a lane model's config.pbtxt parameters (strings); absent keys keep the defaults."""
        return read_settings(cls, params, ignore_unknown=True, what="lane parameter")

    def to_parameters(self) -> dict[str, str]:
        """Every field as the string `from_parameters` reads back."""
        return {f.name: _render(getattr(self, f.name)) for f in fields(self)}

    def apply_mps_limit(self) -> None:
        """The lane's MPS share and client priority; must run before anything initialises CUDA in this stub."""
        if self.device != "cuda":
            return
        if self.mps_active_thread_percentage < 100:
            os.environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(self.mps_active_thread_percentage)
        if self.mps_client_priority:
            os.environ["CUDA_MPS_CLIENT_PRIORITY"] = str(self.mps_client_priority)

    def pin_instance_gpu(self, instance_device_id: str | None) -> str | None:
        """With `pin_gpu`, narrow CUDA_VISIBLE_DEVICES to the instance's GPU, which becomes device 0.

        Must run before CUDA initialises. Code that uses the current device (streams, CUDA graphs)
        then lands on the instance's GPU in every thread of the stub.
        """
        if self.device != "cuda" or not self.pin_gpu or instance_device_id is None:
            return instance_device_id
        inherited = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = inherited.split(",") if inherited else None
        os.environ["CUDA_VISIBLE_DEVICES"] = ids[int(instance_device_id)] if ids else instance_device_id
        return "0"

    def device_for(self, instance_device_id: str | None) -> str:
        return f"cuda:{instance_device_id or 0}" if self.device == "cuda" else "cpu"


def _render(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class LaneSetup:
    """What every model process of a lane starts from: its parameters, settings, model and device."""

    params: dict[str, str]
    lane: LaneSettings
    spec: object  # registry.ModelSpec
    device: str


def set_up_lane(args: dict) -> LaneSetup:
    """Apply the lane's MPS limit, then import torch, apply its torch settings and resolve the model (in that order)."""
    configure_stub_logging()
    params = model_parameters(args)
    lane = LaneSettings.from_parameters(params)
    lane.apply_mps_limit()
    instance_gpu = lane.pin_instance_gpu(args.get("model_instance_device_id"))
    import torch  # only after the MPS limit and the visible GPU are in the environment

    from backend_python.models import registry
    torch.set_flush_denormal(True)  # random-weight models hit denormals on CPU
    torch.set_num_threads(lane.num_threads)
    torch.backends.cudnn.benchmark = lane.cudnn_benchmark  # process-wide, so the lane decides it, here
    spec = registry.resolve(lane.model)
    return LaneSetup(params, lane, spec, lane.device_for(instance_gpu))
