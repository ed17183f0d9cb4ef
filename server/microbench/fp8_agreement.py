"""How far float8 projection weights move a frame: greedy tokens and logits against bf16, over a workload's texts.

    python3 -m server.microbench.fp8_agreement --model qwen3-tts-1.7b --workload WORKLOAD.tsv --texts 32 --frames 24

The same model (random weights unless --model is a checkpoint) decodes each text greedily (ignore EOS) twice on the
fused frame: bf16 weights, then float8 copies of the four projections of every layer (`--fp8-weights`). Reported:
the cosine of each prompt's codebook-0 logits after prefill, the share of frames whose codebook-0 token (and whose
whole frame) agrees up to each stream's first disagreement and over all frames, and the mean frames until a stream's
first disagreement (greedy decoding compounds one flip into different audio from there on). Random weights give
near-flat logits where a rounding flips a greedy choice more easily than a trained model's would.
"""
from __future__ import annotations

import argparse
import csv
import json

import torch

from backend_python.models.base import DecodeBatch, SamplingParams
from backend_python.models.qwen3_tts import Qwen3TTSLM, preset_config

GREEDY = SamplingParams(temperature=0.0, top_k=0, top_p=1.0, repetition_penalty=1.0)


def texts_of(path: str, count: int) -> list[str]:
    with open(path, newline="") as f:
        rows = [row for row in csv.reader(f, delimiter="\t") if len(row) >= 3]
    return [row[2] for row in rows[1:count + 1]] if rows and not rows[0][1].replace(".", "").isdigit() else \
        [row[2] for row in rows[:count]]


def decode(lm: Qwen3TTSLM, texts: list[str], frames: int, fp8: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (prefill logits [S, V] float32, codes [S, frames, K]) with fp8 on or off."""
    lm.use_fp8_weights = fp8
    lm.allocate_slots(len(texts), 512)
    for slot, text in enumerate(texts):
        lm.prefill(slot, lm.encode_prompt(text, None))
    logits = lm._memory.logits[:len(texts)].float().cpu().clone()  # the decode below overwrites the memory
    batch = DecodeBatch(slots=list(range(len(texts))), sampling=[GREEDY] * len(texts),
                        generators=[torch.Generator(device=lm.device).manual_seed(i) for i in range(len(texts))],
                        ignore_eos=[True] * len(texts))
    codes = torch.stack([lm.decode(batch)[0].cpu() for _ in range(frames)], dim=1)
    return logits, codes


def agreement(bf16: torch.Tensor, fp8: torch.Tensor) -> dict:
    """codes [S, F, K] each -> the shares of agreeing frames and the frames until each stream's first disagreement."""
    same0, same_all = bf16[..., 0] == fp8[..., 0], (bf16 == fp8).all(dim=-1)  # [S, F]
    first = torch.where(same_all.all(dim=1), same_all.shape[1], (~same_all).float().argmax(dim=1))
    before = torch.arange(same_all.shape[1])[None, :] < first[:, None]
    return {"codebook0_all_frames": same0.float().mean().item(), "frame_all_frames": same_all.float().mean().item(),
            "codebook0_first_frame": same0[:, 0].float().mean().item(), "codebooks_first_frame":
            (bf16[:, 0] == fp8[:, 0]).float().mean().item(), "frames_to_first_disagreement": first.float().mean().item(),
            "frames_agreeing_before_it": int(before.sum())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-tts-1.7b")
    parser.add_argument("--workload", required=True, help="TSV (utterance_id, duration_s, text)")
    parser.add_argument("--texts", type=int, default=32)
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    lm = Qwen3TTSLM.from_config(preset_config(args.model), device=device, dtype=torch.bfloat16, seed=0)
    lm.use_fused_frame = True  # float8 weights are the fused frame's
    texts = texts_of(args.workload, args.texts)
    bf16_logits, bf16 = decode(lm, texts, args.frames, fp8=False)
    fp8_logits, fp8 = decode(lm, texts, args.frames, fp8=True)
    cosine = torch.nn.functional.cosine_similarity(bf16_logits, fp8_logits, dim=1)
    result = {"model": args.model, "texts": len(texts), "frames": args.frames,
              "prefill_logits_cosine_min": cosine.min().item(), "prefill_logits_cosine_mean": cosine.mean().item(),
              "prefill_top1_agreement": (bf16_logits.argmax(1) == fp8_logits.argmax(1)).float().mean().item(),
              **agreement(bf16, fp8)}
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    with torch.no_grad():
        main()
