"""Reading a Triton model's `config.pbtxt` parameters and applying its lane settings."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass


def model_parameters(args: dict) -> dict[str, str]:
    """The `parameters { key: ... value: { string_value: ... } }` map of the model config."""
    config = json.loads(args["model_config"])
    return {key: value["string_value"] for key, value in config.get("parameters", {}).items()}


@dataclass(frozen=True)
class LaneSettings:
    """Where a model instance runs: device, dtype and its MPS share of the GPU's SMs."""

    device: str = "cpu"
    dtype: str = "float32"
    mps_active_thread_percentage: int = 100
    pin_gpu: bool = False  # the stub sees only its instance's GPU (disaggregated layouts: lanes on different GPUs)
    cuda_graphs: bool = True  # codecs on CUDA replay graphs per bucket (parameter `cuda_graphs`: false = eager)
    torch_compile: bool = True  # the LM on CUDA fuses its decode kernels with Inductor (`torch_compile`: false = off)

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        if not 1 <= self.mps_active_thread_percentage <= 100:
            raise ValueError("mps_active_thread_percentage must be in [1, 100]")

    @classmethod
    def from_parameters(cls, params: dict[str, str]) -> "LaneSettings":
        return cls(device=params.get("device", "cpu"), dtype=params.get("dtype", "float32"),
                   mps_active_thread_percentage=int(params.get("mps_active_thread_percentage", "100")),
                   pin_gpu=params.get("pin_gpu", "false") == "true",
                   cuda_graphs=params.get("cuda_graphs", "true") == "true",
                   torch_compile=params.get("torch_compile", "true") == "true")

    def apply_mps_limit(self) -> None:
        """Must run before anything initialises CUDA in this stub process."""
        if self.device == "cuda" and self.mps_active_thread_percentage < 100:
            os.environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(self.mps_active_thread_percentage)

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


@dataclass(frozen=True)
class LaneSetup:
    """What every model process of a lane starts from: its parameters, settings, model and device."""

    params: dict[str, str]
    lane: LaneSettings
    spec: object  # registry.ModelSpec
    device: str


def set_up_lane(args: dict) -> LaneSetup:
    """Apply the lane's MPS limit, then import torch and resolve the model (in that order)."""
    params = model_parameters(args)
    lane = LaneSettings.from_parameters(params)
    lane.apply_mps_limit()
    instance_gpu = lane.pin_instance_gpu(args.get("model_instance_device_id"))
    import torch  # only after the MPS limit and the visible GPU are in the environment

    from backend_python.models import registry
    torch.set_flush_denormal(True)  # random-weight models hit denormals on CPU
    torch.set_num_threads(int(params.get("num_threads", "1")))  # several model processes share the cores
    spec = registry.resolve(params.get("model", registry.DEFAULT_MODEL))
    return LaneSetup(params, lane, spec, lane.device_for(instance_gpu))
