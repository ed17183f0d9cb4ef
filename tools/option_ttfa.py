"""Time to first audio and real-time factor of one server with and without the output options, side by side:
`timestamps` "word" and `speed`, interleaved request by request on an idle server (one stream at a time).

    python -m tools.option_ttfa --device cuda --model qwen3-tts-1.7b --rounds 30 --out options.jsonl
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from server.compare import free_ports
from server.serve import ServeConfig, Server
from clients.stream import synthesize
from server.triton_launch import Ports

TEXT = "VoxLane streams speech while the model is still talking."
VARIANTS = {"plain": {}, "timestamps": {"timestamps": "word"}, "speed 1.5": {"speed": 1.5},
            "speed 0.75": {"speed": 0.75}, "speed 1.5 + timestamps": {"speed": 1.5, "timestamps": "word"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--model", default=ServeConfig().model)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=1.6, help="audio per request (ignore_eos)")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS),
                        help="speed needs PyAV in the server's Python")
    parser.add_argument("--out", default=None)
    parser.add_argument("--log", default=str(Path(tempfile.gettempdir()) / "option_ttfa-tritonserver.log"))
    args = parser.parse_args()
    http, grpc, metrics = free_ports(3)
    config = ServeConfig(model=args.model, device=args.device, ports=Ports(http=http, grpc=grpc, metrics=metrics))
    variants = {name: VARIANTS[name] for name in args.variants}
    ttfa = {name: [] for name in variants}
    rtf = {name: [] for name in variants}
    with Server(config, log_path=args.log) as server:
        for params in variants.values():
            synthesize(server.grpc_url, "Warm up.", seed=1, max_audio_seconds=0.5, **params)
        for round_ in range(args.rounds):
            for name, params in variants.items():
                result = synthesize(server.grpc_url, TEXT, seed=round_, max_audio_seconds=args.seconds,
                                    ignore_eos=True, **params)
                ttfa[name].append(result.ttfa_s * 1e3)
                rtf[name].append(result.chunks[-1].arrival_s / result.audio_seconds)
    rows = [{"variant": name, "model": args.model, "device": args.device, "rounds": args.rounds,
             "ttfa_ms_p50": round(statistics.median(ttfa[name]), 2), "ttfa_ms_max": round(max(ttfa[name]), 2),
             "rtf_p50": round(statistics.median(rtf[name]), 4)} for name in variants]
    for row in rows:
        print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as out:
            out.writelines(json.dumps(row) + "\n" for row in rows)


if __name__ == "__main__":
    main()
