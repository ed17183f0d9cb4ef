"""`voxlane serve`: render a run copy of the model repository and run `tritonserver` on it."""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import secrets
import shutil
import signal
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from backend_python.engine.config import LOOKAHEAD_OVERRIDE, EngineConfig, KVLayout
from backend_python.models.description import FamilyDescription
from backend_python.models.families import describe
from backend_python.stub_common.params import LaneSettings
from backend_python.stub_common.reference_inputs import ReferenceLimits
from backend_python.voice_registry.store import VoiceStoreSettings
from server.model_watch import ModelWatch
from server.mps import MpsDaemon
from server.triton_launch import Exposure, Ports, TritonProcess, find_triton
from clients.voices import RegistryError, call_registry
from protocol import models
from protocol.admin import CONTROL_KEY_FILE, key_hash
from protocol.limits import RequestLimits
from protocol.metrics import parse_live
from scheduler import AdmissionPolicyName, ChunkingConfig, FlowConfig, SchedulerConfig, ServingMode
from scheduler.chunking import GPU_IDLE_FIRST_CHUNK_FRAMES

REPOSITORY = Path(__file__).resolve().parent.parent / "model_repository"
LANE_MODELS = models.LANE_MODELS
CODEC_MODELS = (models.CODEC, models.CODEC_URGENT)
# lanes on the codec GPU in a disaggregated layout: the LM's GPU is its own
CODEC_GPU_MODELS = (*CODEC_MODELS, models.VOICE_ENCODER)
ROUTER_MODEL = models.ROUTER
# knobs `voxlane serve` has no flag for: each run keeps what the repository's config.pbtxt says (but a family with
# frames too many for its max_seq_len sets its own: its description's `max_seq_len`)
KEPT_FROM_REPOSITORY = ("cuda_graphs", "max_seq_len")
_ENGINE, _LANE = EngineConfig(), LaneSettings()  # the defaults, stated there once
FROM_MODEL = "model"  # a chunk growth not given: the model family's
log = logging.getLogger("voxlane.serve")
REVIVE_PERIOD_S = 0.5  # how often the server's keeper looks whether tritonserver still runs
REVIVE_BACKOFF_S = (1.0, 5.0, 30.0)  # waits before the keeper's next start after one failed (last one repeats)
# Starts of a tritonserver that a signal ends before it is ready: Triton 2.51's Python backend can abort as its stubs
# start on a loaded host (boost::interprocess::lock_exception; upstream server#8882, #5949). One that exits with a
# code (a model that cannot load, a port taken) is not started again: the next start would fail the same way.
START_ATTEMPTS = 3


@dataclass(frozen=True)
class ServeConfig:
    """Everything `voxlane serve` decides, built once from the command line.

    It builds the typed configs of each model (`scheduler_config`, `engine_config`, `lane_settings`)
    and `parameters` renders them into that model's config.pbtxt. Defaults come from those configs.
    """

    model: str = _LANE.model
    device: str = _LANE.device
    mode: ServingMode = SchedulerConfig.mode
    dtype: str | None = None  # None: float32 on cpu, bfloat16 on cuda
    ports: Ports = field(default_factory=Ports)
    max_slots: int = _ENGINE.max_slots  # resident streams in the LM lane (playing or paused on their listener)
    max_batch: int = _ENGINE.max_batch  # rows of one LM decode step
    kv_layout: KVLayout = _ENGINE.kv_layout
    kv_cache_gb: float = _ENGINE.kv_cache_gb  # 0: auto (engine/kv_memory.py)
    max_queued: int = _ENGINE.max_queued  # requests waiting for an LM slot or KV memory before new ones are refused
    overlap_min_rows: int = _ENGINE.overlap_min_rows  # a smaller LM step is not overlapped (EngineConfig)
    # the chunk plan; a field left at FROM_MODEL takes the model family's (its description's `chunk_plan`: most take
    # the engine's ramp 2, 4, 8, 10, …; a flow-matching codec's may be 18, 18, …). chunk_growth None: no ramp
    first_chunk_frames: int | None = None
    chunk_frames: int | None = None
    chunk_growth: float | None | str = FROM_MODEL
    # a stream's plan from the LM's load when it starts (scheduler/chunking.py): alone or with room, past busy_streams
    first_chunk_frames_idle: int | None = None
    first_chunk_frames_busy: int | None = None
    busy_streams: int | None = None
    first_chunk_room: float | None = None
    chunk_frames_busy: int | None = None
    # frames a chunk waits for after its own, as right context of a non-causal codec (a DAC decoder); None: the
    # model family's (its decoder's whole receptive field, so a chunk decodes as a full decode
    # does). Fewer frames: a first chunk sooner, each chunk's last samples an approximation
    codec_lookahead_frames: int | None = None
    num_threads: int = _LANE.num_threads  # torch threads per model process (cpu)
    partition: str | None = None  # None: "mps" on cuda, "none" on cpu
    # MPS active-thread percentages; None: the model family's (its description's `sm_shares`: 60/40 as measured,
    # 40/60 where the codec is the heavy part)
    lm_sm_pct: int | None = None  # of the LM lane
    codec_sm_pct: int | None = None  # of the background codec lane: 40 is ~53 of an H200's 132 SMs
    # of the voice encoder lane: it runs once per cloning request, before its LM prefill, beside the other lanes
    encoder_sm_pct: int = 25
    # of a cascade's background refinement lane (its refiners: a chunk's other codebooks); its urgent
    # refinement lane, like the urgent codec lane, takes the whole GPU
    refiner_sm_pct: int = 25
    # a flow-matching codec's function evaluations per window (Euler steps, or mean-flow evaluations); 0: the
    # model's own. The codec lanes and, in timeshare, the LM lane read it
    codec_steps: int = _LANE.codec_steps
    # the flow-matching codecs' DiT blocks compiled with Inductor before their graphs are captured (CUDA): on an H200
    # a flow-matching family's capacity at 90 % 7.5 -> 12.6 req/s (BENCHMARKS.md, "Flow-matching families")
    codec_compile: bool = _LANE.codec_compile
    # the LM's code predictor: each layer's attention as one Triton kernel (CUDA; `--no-fused-predictor`: PyTorch's)
    fused_predictor: bool = _LANE.fused_predictor
    # the LM's decode frame on fused Triton kernels (CUDA; `--no-fused-frame`: the compiled PyTorch frame)
    fused_frame: bool = _LANE.fused_frame
    fp8_weights: bool = _LANE.fp8_weights  # its projections in float8 (`--fp8-weights`; off by default)
    prompt_cache_mib: int = _LANE.prompt_cache_mib  # the LM's cached voice prompt prefixes (`--prompt-cache-mib`; 0: off)
    # the background codec's MPS client priority in voxlane mode (1: below the LM and the urgent lane): measured on
    # an H200, SLO attainment at 38 req/s 0.93 against 0.88 (BENCHMARKS.md, "Levers for the urgent lane")
    codec_mps_priority: int = 1
    # the background codec lane's Triton dynamic batching (a lever of the urgent lane, BENCHMARKS.md "Levers"):
    # the most chunks in one call (its CUDA graphs go up to 32 windows) and how long the batcher waits for more
    # when the lane is free
    codec_max_batch: int = 32
    codec_queue_delay_us: int = 2000
    urgent_budget: int = SchedulerConfig.urgent_budget  # urgent chunks in flight before low-slack ones go background
    margin_quantile: float | None = SchedulerConfig.margin_quantile  # routing margin from this latency quantile
    admission: str = SchedulerConfig.admission_policy.value  # LM admission policy: deadline-aware | prefill-first
    gpus: tuple[str, ...] = ()  # physical GPUs of this server (CUDA_VISIBLE_DEVICES); (): inherit
    codec_gpu: int = 0  # which of this server's GPUs runs the codec lanes (the LM runs on its first)
    flow: FlowConfig = field(default_factory=FlowConfig)  # backpressure: the router's bound and stall timeout
    # a streaming-text session whose text gets no piece this long ends (router and LM; the request's ceiling)
    text_idle_timeout_s: float = RequestLimits.text_idle_timeout_s
    # the longest audio a request may ask for (router and LM; a text that names none is cut there too): what a stream
    # can last, and so how long a stopping server waits for its streams (the chart's terminationGracePeriodSeconds)
    max_audio_seconds: float = RequestLimits.max_audio_seconds
    # registered voices live under it (`<data_dir>/voices/<model>`); "": $VOXLANE_CACHE/data. Servers given the
    # same directory share their voices
    data_dir: str = VoiceStoreSettings.data_dir
    # where tritonserver's ports listen (127.0.0.1: this machine only) and the admin key of its repository API
    exposure: Exposure = field(default_factory=Exposure)
    # the admin keys whose holders may write voices straight through Triton (protocol/admin.py): every one
    # `voxlane serve` was given; () with an `exposure.admin_key`: that key alone; () without: writes are open
    admin_keys: tuple[str, ...] = field(default=(), repr=False)
    # a file holding the server's control key (protocol/admin.py), which `voice_registry`'s model control takes
    # beside the admin keys; `Server` writes one per start. None: none (a rendering of the committed repository)
    control_key_file: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", _mode(self.mode))
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"--device must be cpu or cuda, got {self.device!r}")
        if self.admission not in ADMISSION_POLICIES:
            raise ValueError(f"--admission must be {' or '.join(ADMISSION_POLICIES)}, got {self.admission!r}")
        if self.partition not in (None, "mps", "none"):
            raise ValueError(f"--partition must be mps or none, got {self.partition!r}")
        if self.device == "cpu" and self.partition == "mps":
            raise ValueError("--partition mps needs --device cuda (MPS partitions GPU SMs)")
        lm_share, codec_share = self.family.sm_shares
        if self.lm_sm_pct is None:
            object.__setattr__(self, "lm_sm_pct", lm_share)
        if self.codec_sm_pct is None:
            object.__setattr__(self, "codec_sm_pct", codec_share)
        for name in ("lm_sm_pct", "codec_sm_pct", "encoder_sm_pct", "refiner_sm_pct"):
            if not 1 <= getattr(self, name) <= 100:
                raise ValueError(f"--{name.replace('_', '-')} must be in [1, 100], got {getattr(self, name)}")
        if not 1 <= self.codec_max_batch <= MAX_CODEC_BATCH:
            raise ValueError(f"--codec-max-batch must be in [1, {MAX_CODEC_BATCH}] (the codec lanes' CUDA graphs "
                             f"go up to {MAX_CODEC_BATCH} windows), got {self.codec_max_batch}")
        if not 0 <= self.codec_queue_delay_us <= MAX_CODEC_QUEUE_DELAY_US:
            raise ValueError(f"--codec-queue-delay-us must be in [0, {MAX_CODEC_QUEUE_DELAY_US}], "
                             f"got {self.codec_queue_delay_us}")
        if self.gpus and self.device != "cuda":
            raise ValueError("--gpus needs --device cuda")
        if not 0 <= self.codec_gpu < max(1, len(self.gpus)) or (self.codec_gpu and self.device != "cuda"):
            raise ValueError(f"the codec lanes' GPU {self.codec_gpu} is not one of this server's GPUs")
        if self.codec_lookahead_frames is not None and self.codec_lookahead_frames < 0:
            raise ValueError(f"--codec-lookahead-frames must be >= 0, got {self.codec_lookahead_frames}")
        if not self.max_audio_seconds > 0:
            raise ValueError(f"--max-audio-seconds must be > 0, got {self.max_audio_seconds}")
        RequestLimits.from_parameters(self.request_limit_parameters())
        self.engine_config()  # the typed configs validate the rest (chunk sizes, slots, threads)
        for model_name in LANE_MODELS:
            self.lane_settings(model_name)

    @functools.cached_property
    def family(self) -> FamilyDescription:
        """The model's family as its description tells it, read without loading the model."""
        return describe(self.model)

    @property
    def uses_mps(self) -> bool:
        """The MPS daemon runs for every mode on cuda unless --partition none."""
        return self.device == "cuda" and self.partition != "none"

    @property
    def runs_refiner_lanes(self) -> bool:
        """A cascade's refinement lanes run beside the codec lanes; in timeshare its LM lane refines inline."""
        return self.family.refines and self.mode is not ServingMode.TIMESHARE

    @property
    def is_partitioned(self) -> bool:
        return self.uses_mps and self.mode.is_partitioned

    @property
    def is_disaggregated(self) -> bool:
        """The LM lane has a GPU of its own; the codec lanes share another."""
        return self.codec_gpu != 0

    def gpu_of(self, model_name: str) -> int:
        """The device index (among this server's visible GPUs) of one lane's instance."""
        return self.codec_gpu if model_name in CODEC_GPU_MODELS else 0

    def server_env(self, has_mps: bool, inherited: str | None = None) -> dict[str, str]:
        """CUDA_VISIBLE_DEVICES of `tritonserver`: its GPUs, or, through MPS, the daemon's renumbered ones.

        `inherited` is the caller's CUDA_VISIBLE_DEVICES (default: this process's), used without
        --gpus: the daemon inherits it too, and its clients see those GPUs numbered from 0."""
        if not self.gpus and not has_mps:
            return {}  # the server inherits the caller's GPUs as they are
        inherited = os.environ.get("CUDA_VISIBLE_DEVICES", "") if inherited is None else inherited
        gpus = self.gpus or tuple(g.strip() for g in inherited.split(",") if g.strip())
        if not gpus:
            return {}
        visible = range(len(gpus)) if has_mps else gpus
        return {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in visible)}

    def sm_percentage(self, model_name: str) -> int:
        """The MPS active-thread percentage of one lane; 100 (whole GPU) when not partitioned."""
        if not self.is_partitioned or (self.is_disaggregated and model_name == models.LM):
            return 100
        return {models.LM: self.lm_sm_pct, models.CODEC: self.codec_sm_pct,
                models.VOICE_ENCODER: self.encoder_sm_pct, models.REFINER: self.refiner_sm_pct}.get(model_name, 100)

    def mps_priority(self, model_name: str) -> int:
        """The MPS client priority of one lane: the background codec's setting in voxlane mode under MPS, else
        normal (0). Only voxlane has an urgent lane to take the chunks a yielding background lane makes late."""
        is_yielding = self.uses_mps and self.mode is ServingMode.VOXLANE and model_name == models.CODEC
        return self.codec_mps_priority if is_yielding else 0

    @property
    def resolved_dtype(self) -> str:
        return self.dtype or ("bfloat16" if self.device == "cuda" else "float32")

    def scheduler_config(self) -> SchedulerConfig:
        """Routing, admission and chunking: the router and the LM lane both get these."""
        chunking = self.chunking()
        return SchedulerConfig(mode=self.mode, admission_policy=AdmissionPolicyName(self.admission),
                               urgent_budget=self.urgent_budget, margin_quantile=self.margin_quantile,
                               chunking=chunking)

    def chunking(self) -> ChunkingConfig:
        """The chunk plan: the fields given, the model family's plan for the rest."""
        plan = self.family.chunk_plan or ChunkingConfig()
        given = {"first_chunk_frames": self.first_chunk_frames, "chunk_frames": self.chunk_frames,
                 "first_chunk_frames_idle": self._idle_first_chunk(),
                 "first_chunk_frames_busy": self.first_chunk_frames_busy, "busy_streams": self.busy_streams,
                 "first_chunk_room": self.first_chunk_room, "chunk_frames_busy": self.chunk_frames_busy}
        given = {key: value for key, value in given.items() if value is not None}
        if self.chunk_growth != FROM_MODEL:
            given["chunk_growth"] = self.chunk_growth
        return dataclasses.replace(plan, **given)

    def _idle_first_chunk(self) -> int | None:
        """`first_chunk_frames_idle` as given (0: off), else on cuda the GPU default for a family on the engine's
        ramp (scheduler/chunking.py GPU_IDLE_FIRST_CHUNK_FRAMES) unless the first chunk is set."""
        if self.first_chunk_frames_idle is not None:
            return self.first_chunk_frames_idle or None
        if self.device == "cuda" and self.first_chunk_frames is None and self.family.chunk_plan is None:
            return GPU_IDLE_FIRST_CHUNK_FRAMES
        return None

    def engine_config(self) -> EngineConfig:
        """The LM lane's engine (its codec context comes from the model family, in the lane)."""
        return EngineConfig(max_slots=self.max_slots, max_batch=self.max_batch, max_queued=self.max_queued,
                            kv_layout=self.kv_layout, kv_cache_gb=self.kv_cache_gb,
                            overlap_min_rows=self.overlap_min_rows, scheduler=self.scheduler_config())

    def lane_settings(self, model_name: str) -> LaneSettings:
        """Model, device and torch settings of one lane's process."""
        return LaneSettings(model=self.model, device=self.device, dtype=self.resolved_dtype,
                            mps_active_thread_percentage=self.sm_percentage(model_name),
                            mps_client_priority=self.mps_priority(model_name),
                            num_threads=self.num_threads, pin_gpu=self.is_disaggregated,  # each stub sees its GPU
                            cudnn_benchmark=self._runs_codec(model_name),
                            stream_states=self._keeps_stream_states(model_name), codec_steps=self.codec_steps,
                            codec_compile=self.codec_compile, fused_predictor=self.fused_predictor,
                            fused_frame=self.fused_frame, fp8_weights=self.fp8_weights,
                            prompt_cache_mib=self.prompt_cache_mib)

    def _keeps_stream_states(self, model_name: str) -> bool:
        """The lane that sees a stream's chunks in order keeps their codec state: the background lane,
        or the LM itself in timeshare (the same engine improvement for the baseline)."""
        return model_name == models.CODEC or (model_name == models.LM and self._runs_codec(model_name))

    def _runs_codec(self, model_name: str) -> bool:
        """Whether this lane's process decodes audio (the LM does, inline, in timeshare)."""
        return model_name in CODEC_MODELS or (model_name == models.LM and self.mode is ServingMode.TIMESHARE)

    def voice_store_settings(self) -> VoiceStoreSettings:
        """Where the router finds registered voices and `voice_registry` writes them."""
        return VoiceStoreSettings(model=self.model, data_dir=str(Path(self.data_dir).expanduser().resolve())
                                  if self.data_dir else "")

    def batching(self, model_name: str) -> tuple[int, int] | None:
        """(max_batch_size, max_queue_delay_microseconds) this run sets on a model's dynamic batcher; None: the
        repository's own (every model but the background codec lane)."""
        return (self.codec_max_batch, self.codec_queue_delay_us) if model_name == models.CODEC else None

    def render_config(self, model_name: str, config_text: str) -> str:
        """One model's config.pbtxt with this run's settings: parameters, batching, instance kind."""
        for key, value in self.parameters(model_name).items():
            config_text = set_parameter(config_text, key, value)
        batching = self.batching(model_name)
        if batching is not None:
            config_text = set_batching(config_text, *batching)
        if model_name in LANE_MODELS:
            config_text = set_instance_kind(config_text, self.device, self.gpu_of(model_name))
        return config_text

    def request_limit_parameters(self) -> dict[str, str]:
        """The router's and the LM's shared request limits (`RequestLimits.from_parameters` reads them): protocol's,
        but the two this run sets."""
        return {**RequestLimits().to_parameters(), "text_idle_timeout_s": f"{self.text_idle_timeout_s:g}",
                "max_audio_seconds": f"{self.max_audio_seconds:g}"}

    def parameters(self, model_name: str) -> dict[str, str]:
        """The config.pbtxt parameters this run sets on one model: its typed configs, rendered."""
        text = self.request_limit_parameters()  # RequestLimits reads them in both
        reference = ReferenceLimits().to_parameters()  # the router checks a reference, the encoder lane again
        voices = self.voice_store_settings().to_parameters()
        if model_name == ROUTER_MODEL:
            family = {"takes_input_audio": str(self.family.takes_input_audio).lower(),
                      "refines": str(self.runs_refiner_lanes).lower()}
            return {**self.scheduler_config().to_parameters(), **self.flow.to_parameters(), **text, **reference,
                    **voices, **family}
        if model_name == models.VOICE_REGISTRY:
            keys = self.admin_keys or tuple(k for k in (self.exposure.admin_key,) if k)
            return {**voices, **reference, **({"admin_key_sha256": ",".join(map(key_hash, keys))} if keys else {}),
                    **({CONTROL_KEY_FILE: str(self.control_key_file)} if self.control_key_file else {})}
        params = self.lane_settings(model_name).to_parameters()
        if model_name == models.LM:
            params.update(self.engine_config().to_parameters(), **text)
            if self.codec_lookahead_frames is not None:
                params[LOOKAHEAD_OVERRIDE] = str(self.codec_lookahead_frames)
        if model_name == models.VOICE_ENCODER:
            params.update(reference)
        params = {key: value for key, value in params.items() if key not in KEPT_FROM_REPOSITORY}
        family_seq_len = self.family.max_seq_len if model_name == models.LM else None
        return params if family_seq_len is None else {**params, "max_seq_len": str(family_seq_len)}


def _mode(value) -> ServingMode:
    try:
        return ServingMode(value)
    except ValueError:
        raise ValueError(f"--mode must be one of {', '.join(MODES)}, got {value!r}") from None


# a stop ends the live streams first (Server._drain), waiting this long at most for them before its SIGTERM
# (~1 s as a rule; streams that arrive once the LM is unloaded are refused unopened: StopTimes.live_left says what
# a drain left)
DRAIN_S = 5.0
MODES = tuple(mode.value for mode in ServingMode)  # the --mode choices
MAX_CODEC_BATCH = 32  # the codec runner's largest graph bucket (models/graphs/codec.py)
MAX_CODEC_QUEUE_DELAY_US = 1_000_000
ADMISSION_POLICIES = tuple(policy.value for policy in AdmissionPolicyName)


def set_parameter(config_text: str, key: str, value: str) -> str:
    """Set (or add) one `parameters { key: ... }` entry of a config.pbtxt."""
    entry = f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'
    pattern = re.compile(r'parameters\s*\{\s*key:\s*"' + re.escape(key) + r'"\s*value:\s*\{[^}]*\}\s*\}')
    if pattern.search(config_text):
        return pattern.sub(lambda _: entry, config_text)
    return config_text.rstrip("\n") + "\n" + entry + "\n"


def set_batching(config_text: str, max_batch_size: int, queue_delay_us: int) -> str:
    """Set a config.pbtxt's `max_batch_size` and its dynamic batcher's `max_queue_delay_microseconds`."""
    for pattern, value in ((r"max_batch_size:\s*\d+", f"max_batch_size: {max_batch_size}"),
                           (r"max_queue_delay_microseconds:\s*\d+", f"max_queue_delay_microseconds: {queue_delay_us}")):
        config_text, count = re.subn(pattern, value, config_text, count=1)
        if count != 1:
            raise ValueError(f"the config has no {value.split(':')[0]} to set")
    return config_text


def set_instance_kind(config_text: str, device: str, gpu: int = 0) -> str:
    kind = f"kind: KIND_GPU count: 1 gpus: [ {gpu} ]" if device == "cuda" else "kind: KIND_CPU count: 1"
    return re.sub(r"instance_group\s*\[[^\]]*?\{[^}]*\}\s*\]", f"instance_group [ {{ {kind} }} ]", config_text)


def write_key(folder: Path, key: str) -> Path:
    """`key` in a file of `folder` that only this user may read (never on a command line: `ps` shows those)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "control_key"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as f:
        f.write(key + "\n")
    return path


def render_repository(config: ServeConfig, target: Path, source: Path = REPOSITORY) -> Path:
    """Copy the model repository to `target` with this run's settings written into each config."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    for model_dir in sorted(p for p in target.iterdir() if (p / "config.pbtxt").exists()):
        if model_dir.name in models.REFINER_MODELS and not config.runs_refiner_lanes:
            shutil.rmtree(model_dir)  # a cascade's lanes: no other family loads them
            continue
        path = model_dir / "config.pbtxt"
        path.write_text(config.render_config(model_dir.name, path.read_text()))
    return target


@dataclass(frozen=True)
class StopTimes:
    """How a `Server.stop` went: seconds ending the live streams (at most DRAIN_S), seconds from tritonserver's
    SIGTERM to its exit, and how many streams the router still counted live at the SIGTERM (None where it was
    not read: no drain, or the metrics did not answer)."""

    drain_s: float
    exit_s: float
    live_left: int | None = None

    @property
    def is_drained(self) -> bool:
        """Whether every stream had ended before the SIGTERM."""
        return self.live_left == 0


class Server:
    """A rendered repository plus the `tritonserver` serving it; a context manager.

    A keeper thread starts tritonserver again (same repository, ports and environment, its log appended)
    when it exits on its own: Triton 2.51's Python backend can abort the whole server when a stub dies
    holding a lock it shares with it (upstream server#8882), and the model watch ends a server whose router died (its
    streams could end no other way). `revivals` counts those starts; the gateway's streams on the dead server end
    with 503."""

    def __init__(self, config: ServeConfig, run_dir: Path | None = None, log_path: Path | None = None,
                 shared_mps: MpsDaemon | None = None) -> None:
        """`shared_mps`: a running daemon this server's lanes join (several servers on one GPU, measured one
        at a time); it is left running at stop. None: the server starts and quits its own when it uses MPS."""
        self.config = config
        self.shared_mps = shared_mps
        self._tmp = None if run_dir else tempfile.TemporaryDirectory(prefix="voxlane-run-")
        self.run_dir = Path(run_dir or self._tmp.name)
        self.log_path = log_path
        self.process: TritonProcess | None = None
        self.watch: ModelWatch | None = None  # ends the server when its router dies (model_watch.py)
        self.mps: MpsDaemon | None = None
        self.revivals = 0
        self._control_key: str | None = None  # this start's key of model control (write_key)
        self.last_stop: StopTimes | None = None
        self._launch: dict | None = None  # what a revival starts again
        self._stopping = threading.Event()
        self._reviving = threading.Event()
        self._starting = threading.Lock()  # a stop and a revival's start of tritonserver, one at a time
        self._keeper: threading.Thread | None = None

    def start(self, timeout_s: float = 300.0) -> "Server":
        """Start tritonserver and its keeper; a server stopped before may be started again."""
        if self._tmp is not None and not self.run_dir.exists():  # removed by the last stop
            self._tmp = tempfile.TemporaryDirectory(prefix="voxlane-run-")
            self.run_dir = Path(self._tmp.name)
        self._stopping.clear()
        self._reviving.clear()
        self._control_key = secrets.token_urlsafe(24)  # model control through voice_registry (protocol/admin.py)
        rendered = dataclasses.replace(self.config, control_key_file=write_key(self.run_dir, self._control_key))
        repository = render_repository(rendered, self.run_dir / "model_repository")
        try:
            mps_env = self._start_mps()
            env = {**mps_env, **self.config.server_env(has_mps=bool(mps_env))}
            self._launch = {"repository": repository, "env": env, "timeout_s": timeout_s}
            self._first_start()
            self._keeper = threading.Thread(target=self._keep, name="triton-keeper", daemon=True)
            self._keeper.start()
        except BaseException:  # a failed start (or Ctrl-C) must not leave MPS or triton behind
            self.stop()
            raise
        return self

    def _first_start(self) -> None:
        """Run tritonserver until ready; again where a signal ended it before (START_ATTEMPTS)."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._run_triton(append_log=attempt > 1)
                return
            except RuntimeError:
                code = self.process.process.returncode if self.process is not None else None
                if code is None or code >= 0 or attempt == START_ATTEMPTS or self._stopping.is_set():
                    raise
                log.error("tritonserver died of %s before it was ready: starting it again (attempt %d of %d)",
                          signal.Signals(-code).name, attempt + 1, START_ATTEMPTS)
                self.process.stop()  # ends its orphaned stubs, removes their shared memory

    def _run_triton(self, append_log: bool) -> None:
        launch = self._launch
        with self._starting:
            if self._stopping.is_set():
                raise RuntimeError("the server is stopping")
            self.process = TritonProcess(find_triton(), launch["repository"], self.config.ports, env=launch["env"],
                                         log_path=self.log_path, exposure=self.config.exposure,
                                         append_log=append_log)
        self.process.wait_ready(launch["timeout_s"])  # a stop meanwhile ends it: wait_ready raises
        if self.watch is not None:
            self.watch.stop()  # a watch of this server's last start
        self.watch = ModelWatch(self.http_url, self.process.process.pid, self._end_for_router).start()

    def _end_for_router(self) -> None:
        """The router died (model_watch.py): kill tritonserver, which ends every client's stream on it at once; the
        keeper starts it again."""
        try:
            os.killpg(self.process.process.pid, signal.SIGKILL)
        except ProcessLookupError:  # gone already: the keeper has seen it
            pass

    def _keep(self) -> None:
        failures = 0
        while not self._stopping.wait(REVIVE_PERIOD_S):
            code = self.process.process.poll()
            if code is None:
                continue
            self._reviving.set()
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"code {code}"
            log.error("tritonserver exited with %s: starting it again", how)
            self.process.stop()  # ends its orphaned stubs, removes their shared memory
            try:
                self._run_triton(append_log=True)
            except (RuntimeError, TimeoutError, OSError) as exc:
                if self._stopping.is_set():
                    return
                wait_s = REVIVE_BACKOFF_S[min(failures, len(REVIVE_BACKOFF_S) - 1)]
                failures += 1
                log.error("starting tritonserver again failed (%s); next try in %.0f s", exc, wait_s)
                if self.process.process.poll() is None:
                    self.process.stop()
                self._stopping.wait(wait_s)
                continue
            failures = 0
            self.revivals += 1
            self._reviving.clear()
            log.warning("tritonserver serves again (revival %d)", self.revivals)

    @property
    def control_key(self) -> str | None:
        """This start's key of model control (`voice_registry`'s `load_model` and `unload_model`, beside the admin
        keys); it lives in a file of the run directory only this user reads, never on a command line."""
        return self._control_key

    @property
    def is_reviving(self) -> bool:
        """Its tritonserver exited on its own and the keeper is starting it again."""
        return self._reviving.is_set()

    def is_serving(self) -> bool:
        """Started and not stopped: tritonserver runs, or its keeper starts it again, an exit the keeper has not
        seen yet included (it looks every REVIVE_PERIOD_S; a caller that read the dead process as the end quit)."""
        return self._keeper is not None and self._keeper.is_alive() and not self._stopping.is_set()

    def _start_mps(self) -> dict[str, str]:
        if not self.config.uses_mps:
            return {}
        if self.shared_mps is not None:
            return self.shared_mps.env
        self.mps = MpsDaemon(self.run_dir, ",".join(self.config.gpus) or None)
        self.mps.start()
        return self.mps.env

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM (in-flight streams end with a reason, models unload cleanly), SIGKILL after `grace_s`.
        `grace_s=0`: kill at once, for a throwaway server whose clean unload nobody waits for (a test's)."""
        with self._starting:  # no revival starts a tritonserver after this
            self._stopping.set()
        started, live_left = time.monotonic(), None
        if self.watch is not None:
            self.watch.stop()
            if grace_s > 0 and self.process is not None and self.process.process.poll() is None:
                live_left = self._drain(min(grace_s, DRAIN_S))
        drained = time.monotonic()
        code = self.process.stop(grace_s) if self.process else None  # also one a revival is starting
        self.last_stop = StopTimes(drained - started, time.monotonic() - drained, live_left)
        if self._keeper is not None:
            self._keeper.join(timeout=30)
        if self.mps is not None:
            self.mps.stop()
        if self._tmp:
            self._tmp.cleanup()
        return code

    def _drain(self, timeout_s: float) -> int | None:
        """End the live streams before the SIGTERM: unload the LM lane, whose engine ends each of its streams with
        "the server is shutting down" (Triton finalizes it ~1 s after the request), and wait, at most `timeout_s`,
        until the router has passed every ending on. Those answers then go out while Triton serves as usual. Left
        to the SIGTERM, the router sent them as Triton unloaded everything, and Triton 2.51's gRPC frontend could
        abort (`proto_buffer_writer.h:65`, `!byte_buffer->Valid()`; 2 fault-storm stops in ~13): its clients got a
        closed socket instead of the reason. Unloading the router first aborted it the same way (its `finalize`
        answers raced its own unload). -> the streams still live at its end (0: none; None: the metrics did not say)."""
        deadline = time.monotonic() + timeout_s
        if (live := self._live_requests()) == 0 or not self._unload_lm(timeout_s):
            return live  # 0: nothing to end, the LM unloads with the rest; else the unload was refused
        while (live := self._live_requests()) not in (0, None) and time.monotonic() <= deadline:
            time.sleep(0.05)
        return live

    def _unload_lm(self, timeout_s: float) -> bool:
        """Unload the LM lane through `voice_registry`'s model control (Triton's own API may be closed); whether the
        request went through."""
        try:
            call_registry(self.grpc_url, "unload_model", self._control_key, timeout_s=timeout_s, name=models.LM)
        except RegistryError as exc:
            log.warning("unloading %s failed: %s", models.LM, exc)
            return False
        return True

    def _live_requests(self) -> int | None:
        """The router's `voxlane_live_requests`, or None where the metrics do not answer or lack it."""
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=2) as response:
                return parse_live(response.read().decode())
        except (OSError, urllib.error.URLError):
            return None

    @property
    def grpc_url(self) -> str:
        return f"{self.config.exposure.local_host}:{self.config.ports.grpc}"

    @property
    def http_url(self) -> str:
        return f"http://{self.config.exposure.local_host}:{self.config.ports.http}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.config.exposure.local_host}:{self.config.ports.metrics}/metrics"

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
