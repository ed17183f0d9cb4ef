"""The aten ops and module calls of each family's batched stages, for 1 stream and for 8, on the CPU.

    python3 -m tools.step_ops [--presets qwen3-tts-tiny voxtral-tiny ...]

What `tests/unit/test_step_batching.py` checks (each module called as often for 8 streams as for 1, ops at most
1.5x), printed as a table: one line per family and stage (decode step, codec call, and TontaubeV1's refiners).
Counts, not times: they hold on any machine.
"""
from __future__ import annotations

import argparse

from backend_python.models import registry
from tests.unit.test_step_batching import NUM_STREAMS, PRESETS, codec_work, decode_work, refiner_work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=list(PRESETS))
    args = parser.parse_args()
    print(f"| preset | stage | ops, 1 stream | ops, {NUM_STREAMS} streams | growth | module calls, 1 / "
          f"{NUM_STREAMS} |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for preset in args.presets:
        spec = registry.resolve(preset)
        stages = [("decode step", decode_work), ("codec call", codec_work)]
        if registry.description_of(spec).refines:
            stages.append(("refiners", refiner_work))
        for stage, work in stages:
            one, many = work(spec)
            print(f"| `{preset}` | {stage} | {one.num_ops:,} | {many.num_ops:,} | {many.num_ops / one.num_ops:.2f}× | "
                  f"{sum(one.calls.values()):,} / {sum(many.calls.values()):,} |", flush=True)


if __name__ == "__main__":
    main()
