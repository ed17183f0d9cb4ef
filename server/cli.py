"""The `voxlane` command line: serve, say, demo, doctor, gateway, voices, drain, perf-analyzer."""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from backend_python.engine.config import KVLayout
from clients.bench.cli import add_bench_flags, bench_config
from clients.cli import add_client_commands, report
from scheduler import FlowConfig
from server.drain import add_drain_command
from server.fleet import LAYOUTS, Fleet, FleetConfig
from server.gateway.cli import (add_client_flags, add_gateway_command, add_key_flags, admin_keys, client_caps,
                                gateway_keys)
from server.microbench.cli import add_command as add_microbench
from server.mps import MpsError
from server.serve import ADMISSION_POLICIES, FROM_MODEL, MODES, ServeConfig, Server
from server.triton_launch import Exposure, Ports, find_triton

DEMO_TEXT = "VoxLane streams speech while the model is still talking."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="voxlane", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_serve(commands.add_parser("serve", help="run tritonserver with the VoxLane model repository"))
    client_handlers = add_client_commands(commands)  # say, bench, plot, voices
    demo = commands.add_parser("demo", help="start a server, speak one sentence to a WAV file, stop")
    _add_server_flags(demo)
    demo.add_argument("-o", "--output", default="demo.wav")
    demo.add_argument("--text", default=DEMO_TEXT)
    commands.add_parser("doctor", help="check the Triton install, its Python backend stub and perf_analyzer")
    commands.add_parser("perf-analyzer", add_help=False,
                        help="run the tritonclient wheel's perf_analyzer with its libraries found (ARGS pass through)")
    add_microbench(commands)
    _add_compare(commands.add_parser("compare", help="start the server in each mode, bench it, print capacity ratios"))
    handlers = {"serve": _serve, "demo": _demo, "doctor": _doctor, "microbench": _microbench, "compare": _compare,
                **client_handlers, **add_gateway_command(commands), **add_drain_command(commands)}
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["perf-analyzer"]:  # every later argument is perf_analyzer's own, even -h
        from clients.perf_analyzer.runtime import exec_perf_analyzer
        return exec_perf_analyzer(argv[1:])
    args = parser.parse_args(argv)
    try:
        return handlers[args.command](args)
    except (ValueError, OSError, MpsError) as exc:  # OSError: a key file that cannot be read
        print(f"voxlane: error: {exc}", file=sys.stderr)
        return 2


def _add_server_flags(parser: argparse.ArgumentParser) -> None:
    defaults = ServeConfig()  # every default below is ServeConfig's, which takes them from the typed configs
    parser.add_argument("--model", default=defaults.model, help="preset name, checkpoint dir or Hugging Face id")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=defaults.device)
    parser.add_argument("--mode", choices=MODES, default=defaults.mode.value)
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=defaults.dtype)
    parser.add_argument("--grpc-port", type=int, default=defaults.ports.grpc)
    parser.add_argument("--http-port", type=int, default=defaults.ports.http)
    parser.add_argument("--metrics-port", type=int, default=defaults.ports.metrics)
    parser.add_argument("--max-slots", type=int, default=defaults.max_slots,
                        help="live streams the LM lane holds (playing or paused on their listener)")
    parser.add_argument("--max-batch", type=int, default=defaults.max_batch,
                        help="rows of one LM decode step: the streams that need frames most (CUDA graph buckets)")
    parser.add_argument("--kv-layout", choices=[layout.value for layout in KVLayout], default=defaults.kv_layout.value,
                        help="pooled: one KV pool, each stream sized to its need; static: a max_seq_len row per slot")
    parser.add_argument("--kv-cache-gb", type=float, default=defaults.kv_cache_gb,
                        help="the LM's KV pool (0: auto, 35%% of the GPU's memory; 128 MiB on the CPU)")
    parser.add_argument("--max-queued", type=int, default=defaults.max_queued,
                        help="requests waiting for a slot or KV memory; beyond it new requests get 'overloaded' (503)")
    parser.add_argument("--overlap-min-rows", type=int, default=defaults.overlap_min_rows,
                        help="on CUDA an LM step of at least this many rows overlaps the next one's launch; a smaller "
                             "one is read at once, so a request arriving at low load is prefilled a step sooner "
                             "(1: every step overlapped)")
    parser.add_argument("--first-chunk-frames", type=int, default=defaults.first_chunk_frames,
                        help="frames in a stream's first chunk (default: the model family's plan, mostly 2)")
    parser.add_argument("--chunk-frames", type=int, default=defaults.chunk_frames,
                        help="frames in a full chunk (default: the model family's plan, mostly 10)")
    parser.add_argument("--first-chunk-frames-idle", type=int, default=defaults.first_chunk_frames_idle,
                        help="the first chunk of a request that starts alone, or beside others while the LM has room "
                             "(--first-chunk-room) (default: 1 on cuda for a family on the engine's ramp, else "
                             "--first-chunk-frames; 0: off)")
    parser.add_argument("--first-chunk-room", type=float, default=defaults.first_chunk_room,
                        help="the idle first chunk goes to a request beside running streams while its audio lasts "
                             "this many times making the next chunk at the measured LM step (default 2; 0: only to a "
                             "request that starts alone)")
    parser.add_argument("--first-chunk-frames-busy", type=int, default=defaults.first_chunk_frames_busy,
                        help="the first chunk of a request that starts beside --busy-streams running ones "
                             "(default: --first-chunk-frames)")
    parser.add_argument("--busy-streams", type=int, default=defaults.busy_streams,
                        help="running streams from which the LM counts as busy (default 16)")
    parser.add_argument("--chunk-frames-busy", type=int, default=defaults.chunk_frames_busy,
                        help="frames in a full chunk of a stream admitted beside --busy-streams running ones: fewer "
                             "codec windows under load (default: --chunk-frames)")
    parser.add_argument("--chunk-growth", type=_chunk_growth, default=defaults.chunk_growth,
                        help="chunk sizes grow by this factor up to --chunk-frames (2, 4, 8, 10, …); 'none': no "
                             "ramp (default: the model family's plan, mostly 2)")
    parser.add_argument("--codec-lookahead-frames", type=int, default=defaults.codec_lookahead_frames,
                        help="frames a chunk waits for after its own as a non-causal codec's right context (Higgs v3, "
                             "Zonos; default: the family's, the decoder's whole receptive field); fewer: a first "
                             "chunk sooner, each chunk's last samples approximate")
    parser.add_argument("--partition", choices=("mps", "none"), default=defaults.partition,
                        help="SM partition of the lanes on cuda (default: mps on cuda)")
    parser.add_argument("--lm-sm-pct", type=int, default=None,
                        help="MPS active-thread %% of the LM lane (default: the model family's, mostly 60)")
    parser.add_argument("--codec-sm-pct", type=int, default=None,
                        help="MPS active-thread %% of the background codec lane (default: the model family's, "
                             "mostly 40; CosyVoice 3: 60)")
    parser.add_argument("--codec-max-batch", type=int, default=defaults.codec_max_batch,
                        help="the most chunks the background codec lane decodes in one call (1-32)")
    parser.add_argument("--codec-queue-delay-us", type=int, default=defaults.codec_queue_delay_us,
                        help="how long the background codec lane's batcher waits for more chunks when the lane "
                             "is free (Triton's max_queue_delay_microseconds)")
    parser.add_argument("--codec-compile", action=argparse.BooleanOptionalAction, default=defaults.codec_compile,
                        help="compile a flow-matching codec's DiT blocks with Inductor before capturing its graphs "
                             "(CosyVoice 3, FlashTTS; CUDA; on by default, --no-codec-compile: plain blocks)")
    parser.add_argument("--fused-predictor", action=argparse.BooleanOptionalAction, default=defaults.fused_predictor,
                        help="run the code predictor's attention (q/k norms, RoPE, cache writes, attention over its 16 "
                             "positions) as one Triton kernel per layer (Qwen3-TTS; CUDA; on by default, "
                             "--no-fused-predictor: PyTorch's kernels)")
    parser.add_argument("--fused-frame", action=argparse.BooleanOptionalAction, default=defaults.fused_frame,
                        help="run the LM's decode frame on fused Triton kernels: projections with their norms, "
                             "SwiGLU and residual adds, the talker's q/k norm + RoPE + KV write, one sampling kernel "
                             "per codebook drawing its noise inside the frame's graph (Qwen3-TTS; CUDA; off by default: "
                             "the compiled PyTorch frame)")
    parser.add_argument("--fp8-weights", action=argparse.BooleanOptionalAction, default=defaults.fp8_weights,
                        help="the fused frame's projections read float8 e4m3 weights with a scale per output row, "
                             "quantised at load: half the bytes a step reads, the model's numbers rounded (Qwen3-TTS; "
                             "CUDA; off by default)")
    parser.add_argument("--prompt-cache-mib", type=int, default=defaults.prompt_cache_mib,
                        help="MiB of the LM's cached voice prompt prefixes: a request whose voice's prefix is cached "
                             "prefills only its own positions (Qwen3-TTS; 0: no cache)")
    parser.add_argument("--codec-steps", type=int, default=defaults.codec_steps,
                        help="a flow-matching codec's function evaluations per window (CosyVoice 3: Euler steps; "
                             "FlashTTS: 1 or 2); 0: the model's own")
    parser.add_argument("--encoder-sm-pct", type=int, default=defaults.encoder_sm_pct,
                        help="MPS active-thread %% of the voice encoder lane (reference audio of cloning requests)")
    parser.add_argument("--refiner-sm-pct", type=int, default=defaults.refiner_sm_pct,
                        help="MPS active-thread %% of a cascade's background refinement lane (TontaubeV1's refiners)")
    parser.add_argument("--admission", choices=ADMISSION_POLICIES, default=defaults.admission,
                        help="how new requests join the LM's running batch")
    parser.add_argument("--max-unread-audio-s", type=float, default=defaults.flow.max_unread_audio_s,
                        help="backpressure: seconds of audio a stream may run ahead of what its client took (0: off)")
    parser.add_argument("--stall-timeout-s", type=float, default=defaults.flow.stall_timeout_s,
                        help="cancel an acking stream whose client takes nothing this long (0: never)")
    parser.add_argument("--text-idle-timeout", type=float, default=defaults.text_idle_timeout_s,
                        help="seconds a streaming-text session may wait for its next piece before it ends")
    parser.add_argument("--max-audio-seconds", type=float, default=defaults.max_audio_seconds,
                        help="the longest audio one request may ask for; a text that names no cap is cut there "
                             "(bounds how long a stream lasts, and so a drain)")
    parser.add_argument("--codec-mps-priority", type=int, choices=(0, 1), default=defaults.codec_mps_priority,
                        help="MPS client priority of the background codec lane in voxlane mode (1: below the LM and the urgent lane)")
    parser.add_argument("--urgent-budget", type=int, default=defaults.urgent_budget,
                        help="urgent-lane calls in flight (codec_urgent's and a cascade's refiner_urgent's) beyond "
                             "which a low-slack chunk goes background (0: no limit)")
    parser.add_argument("--margin-quantile", type=_growth, default=defaults.margin_quantile,
                        help="routing margin from this quantile of the background lane's latency ('none': the mean)")
    parser.add_argument("--data-dir", default=defaults.data_dir or None,
                        help="where registered voices are kept (default: $VOXLANE_CACHE/data); servers given the "
                             "same directory share them")
    parser.add_argument("--triton-host", default=defaults.exposure.host,
                        help="address tritonserver's gRPC, HTTP and metrics ports listen on (default: this machine "
                             "only; 0.0.0.0 exposes them, and then its repository API needs the admin key)")
    parser.add_argument("--log-file", type=Path, default=None, help="tritonserver log (default: the terminal)")


def _serve_config(args: argparse.Namespace) -> ServeConfig:
    keys = admin_keys(args) if "admin_key" in args else ()  # the key files, read once
    return ServeConfig(model=args.model, device=args.device, mode=args.mode, dtype=args.dtype,
                       ports=Ports(http=args.http_port, grpc=args.grpc_port, metrics=args.metrics_port),
                       max_slots=args.max_slots, max_batch=args.max_batch, kv_layout=KVLayout(args.kv_layout),
                       kv_cache_gb=args.kv_cache_gb, max_queued=args.max_queued, first_chunk_frames=args.first_chunk_frames,
                       overlap_min_rows=args.overlap_min_rows,
                       chunk_frames=args.chunk_frames, chunk_growth=args.chunk_growth, partition=args.partition,
                       first_chunk_frames_idle=args.first_chunk_frames_idle,
                       first_chunk_frames_busy=args.first_chunk_frames_busy, busy_streams=args.busy_streams,
                       first_chunk_room=args.first_chunk_room, chunk_frames_busy=args.chunk_frames_busy,
                       codec_lookahead_frames=args.codec_lookahead_frames, lm_sm_pct=args.lm_sm_pct,
                       codec_sm_pct=args.codec_sm_pct, encoder_sm_pct=args.encoder_sm_pct,
                       refiner_sm_pct=args.refiner_sm_pct, codec_steps=args.codec_steps,
                       codec_max_batch=args.codec_max_batch, codec_queue_delay_us=args.codec_queue_delay_us,
                       codec_compile=args.codec_compile, fused_predictor=args.fused_predictor,
                       fused_frame=args.fused_frame, fp8_weights=args.fp8_weights,
                       prompt_cache_mib=args.prompt_cache_mib,
                       admission=args.admission,
                       codec_mps_priority=args.codec_mps_priority, urgent_budget=args.urgent_budget,
                       margin_quantile=args.margin_quantile, flow=FlowConfig(args.max_unread_audio_s, args.stall_timeout_s),
                       text_idle_timeout_s=args.text_idle_timeout,
                       max_audio_seconds=args.max_audio_seconds, data_dir=args.data_dir or "",
                       exposure=Exposure(args.triton_host, _first(keys)), admin_keys=keys)


def _first(keys: tuple[str, ...]) -> str | None:
    return keys[0] if keys else None


def _growth(value: str) -> float | None:
    return None if value.lower() == "none" else float(value)


def _chunk_growth(value: str) -> float | None | str:
    """A growth factor, 'none' (no ramp), or 'model' (the model family's plan)."""
    return FROM_MODEL if value == FROM_MODEL else _growth(value)


def _add_serve(parser: argparse.ArgumentParser) -> None:
    _add_server_flags(parser)
    parser.add_argument("--gpus", type=_gpu_list, default=(),
                        help="GPUs to serve on, e.g. 0,1 (one server per GPU, or see --layout)")
    parser.add_argument("--layout", choices=LAYOUTS, default="replicate",
                        help="replicate: one whole VoxLane per GPU; disaggregate: LM lane on the first GPU, "
                             "codec lanes on the second (one server)")
    parser.add_argument("--replicas", type=int, default=1, help="servers on cpu (ports step by 10)")
    parser.add_argument("--gateway-port", type=int, default=None,
                        help="also run the OpenAI-compatible gateway on this port in front of the servers")
    parser.add_argument("--gateway-host", default="127.0.0.1")
    add_key_flags(parser)  # the gateway's; the server's registry takes the admin keys too (model control)
    add_client_flags(parser)  # the gateway's
    parser.add_argument("--served-model-name", action="append", default=[], metavar="NAME",
                        help="another id the gateway answers as the model (repeat for several)")


def _gpu_list(value: str) -> tuple[str, ...]:
    return tuple(g.strip() for g in value.split(",") if g.strip())


def _fleet_config(args: argparse.Namespace) -> FleetConfig:
    return FleetConfig(server=_serve_config(args), gpus=args.gpus, layout=args.layout, replicas=args.replicas,
                       gateway_port=args.gateway_port, gateway_host=args.gateway_host, gateway_keys=gateway_keys(args),
                       served_model_names=tuple(args.served_model_name), gateway_caps=client_caps(args),
                       gateway_read_timeout_s=args.read_timeout_s)


def _serve(args: argparse.Namespace) -> int:
    fleet = Fleet(_fleet_config(args), log_path=args.log_file)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        fleet.start()
    except (RuntimeError, TimeoutError) as exc:  # a model that cannot load, a port taken: said in one line
        print(f"voxlane: the server did not start: {exc}", file=sys.stderr)
        return 1
    for server in fleet.servers:
        gpus = f", gpus {','.join(server.config.gpus)}" if server.config.gpus else ""
        print(f"voxlane: ready (grpc {server.grpc_url}, http {server.http_url.removeprefix('http://')}, "
              f"model {args.model}, mode {args.mode}, device {args.device}{gpus})", flush=True)
    if fleet.gateway is not None:
        print(f"voxlane: gateway ready ({fleet.gateway.url}/v1/audio/speech)", flush=True)
    while not stop.wait(0.5):
        if not fleet.is_running():
            print("voxlane: the gateway exited", file=sys.stderr)  # a server that exits is started again
            fleet.stop()
            return 1
    fleet.stop()
    print("voxlane: stopped", flush=True)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from clients.stream import synthesize
    log_file = args.log_file or Path("tritonserver-demo.log")
    print(f"voxlane: starting tritonserver (log: {log_file})", flush=True)
    with Server(_serve_config(args), log_path=log_file) as server:
        print("voxlane: server ready", flush=True)
        synthesize(server.grpc_url, "Warm up.", seed=1, max_audio_seconds=0.5)
        result = synthesize(server.grpc_url, args.text, seed=0, max_audio_seconds=4.0, ignore_eos=True)
        report(result, args.output)
    return 0


def _add_compare(parser: argparse.ArgumentParser) -> None:
    # unset flags keep CompareConfig's defaults (timeshare and voxlane, the default model, cpu)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None)
    parser.add_argument("--codec-sm-pcts", nargs="+", type=int, default=[], metavar="PCT",
                        help="run partition/voxlane once per codec MPS share, the LM lane at 100-PCT")
    add_bench_flags(parser)


def _compare(args: argparse.Namespace) -> int:
    from server.compare import CompareConfig, run_compare
    given = {"modes": tuple(args.modes) if args.modes else None, "model": args.model, "device": args.device}
    config = CompareConfig(bench=bench_config(args, "unused:0"), codec_sm_pcts=tuple(args.codec_sm_pcts),
                           **{key: value for key, value in given.items() if value is not None})
    run_compare(config)
    return 0


def _microbench(args: argparse.Namespace) -> int:
    from server.microbench.cli import run
    return run(args)


def _doctor(args: argparse.Namespace) -> int:
    from clients.perf_analyzer.runtime import PerfAnalyzerError, install_wrapper, version
    install = find_triton()
    print(f"tritonserver: {install.binary}\npython backend stub: installed for Python "
          f"{sys.version_info.major}.{sys.version_info.minor}")
    try:
        print(f"perf_analyzer: {install_wrapper()} ({version()}; runs as installed, or as `voxlane perf-analyzer`)")
    except PerfAnalyzerError as exc:
        print(f"voxlane: doctor: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
