"""Golden fixture for Qwen3-TTS's prompt options (instructions, non_streaming_mode) from the reference's own
public entry point, on the tiny checkpoint of tests/fixtures/qwen3_tts_tiny/.

The reference builds these prompts in two places, both run here unchanged (qwen-tts 0.1.1):
- qwen_tts/inference/qwen3_tts_model.py, `Qwen3TTSModel.generate_custom_voice`: the instruct text
  (`_build_instruct_text`: `<|im_start|>user\\n{instruct}<|im_end|>\\n`) and its tokenisation;
- qwen_tts/core/models/modeling_qwen3_tts.py, `Qwen3TTSForConditionalGeneration.generate`: the instruct
  embeddings before the role positions, and with `non_streaming_mode` the whole text + tts_eos over codec_pad,
  then tts_pad over codec_bos, in the prefill, leaving only tts_pad to trail.

Run with the reference venv (tools/make_qwen3_tts_fixture.py says how it is built), from the repository root:

    PYTHONPATH=. $QWEN_TTS_VENV/bin/python tools/make_qwen3_tts_options_fixture.py [FIXTURE_DIR]

It rebuilds the tiny model as make_qwen3_tts_fixture.py does, checks it holds exactly the checkpoint's weights,
loads the checkpoint's tokenizer, and writes golden_options.npz / golden_options.json beside it: per case the
reference's text and instruct ids, prefill embeddings, trailing text embeddings, talker logits after prefill
and each frame, and its greedy frames [T, 16]. The codec is not run (a stand-in takes the codes).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

# first: it sets the offline environment and the torchaudio stand-in before qwen_tts is imported
from tools.make_qwen3_tts_fixture import (MAX_NEW_TOKENS, REPETITION_PENALTY, SEED, Qwen3TTSModel,
                                          Qwen3TTSProcessor, build_config, build_model, build_tokenizer,
                                          spy_forward)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import Qwen2TokenizerFast  # noqa: E402

CALM = "Speak slowly and calmly."
CASES = [  # (text, speaker, language, instruct, non_streaming_mode)
    ("Get the trust fund to the bank early.", "tiny", "auto", CALM, False),
    ("Hello world, the quick brown fox.", "tiny_b", "english", None, True),
    ("Get the trust fund to the bank early.", "tiny", "english", CALM, True),
]


class CodesOnly:
    """Stands in for the speech tokenizer: generate_custom_voice hands it the codes; no audio is needed."""

    def decode(self, items: list[dict]):
        return [np.zeros(0, np.float32) for _ in items], 24000


def check_weights(model, fixture: Path) -> None:
    """The rebuilt model must be the checkpoint's: every saved tensor equal (saved in fp16, rebuilt rounded)."""
    saved, state = load_file(str(fixture / "model.safetensors")), model.state_dict()
    for name, tensor in saved.items():
        if not torch.equal(state[name], tensor.float()):
            raise SystemExit(f"{name}: the rebuilt model differs from {fixture}; rebuild both fixtures together")


def spy_generate(model, record: dict):
    """Wrap the model's generate to keep the ids generate_custom_voice built."""
    generate = model.generate

    def spy(*args, **kwargs):
        record["input_ids"] = kwargs["input_ids"][0][0].clone()
        instruct = kwargs["instruct_ids"][0]
        record["instruct_ids"] = torch.zeros(0, dtype=torch.int64) if instruct is None else instruct[0].clone()
        return generate(*args, **kwargs)
    return spy


def run_case(tts: Qwen3TTSModel, text: str, speaker: str, language: str, instruct: str | None,
             non_streaming_mode: bool) -> dict:
    """The reference's public call, greedy, recording what it built and what the talker did."""
    record = {"logits": [], "codes": []}
    tts.model.talker.forward = spy_forward(tts.model.talker, record)
    tts.model.generate = spy_generate(tts.model, record)
    try:
        tts.generate_custom_voice(text, speaker, language=language, instruct=instruct,
                                  non_streaming_mode=non_streaming_mode, do_sample=False,
                                  subtalker_dosample=False, max_new_tokens=MAX_NEW_TOKENS,
                                  repetition_penalty=REPETITION_PENALTY)
    finally:
        del tts.model.talker.forward, tts.model.generate
    record["logits"], record["codes"] = torch.stack(record["logits"]), torch.stack(record["codes"])
    return record


def save(out: Path, cases: list[dict]) -> None:
    arrays, meta = {}, {"seed": SEED, "max_new_tokens": MAX_NEW_TOKENS, "repetition_penalty": REPETITION_PENALTY,
                        "reference": "qwen-tts 0.1.1 generate_custom_voice, transformers 4.57.3", "cases": []}
    for i, ((text, speaker, language, instruct, non_streaming_mode), case) in enumerate(zip(CASES, cases)):
        for key in ("input_ids", "instruct_ids", "prefill_embeds", "trailing", "logits", "codes"):
            arrays[f"{key}_{i}"] = case[key].numpy()
        meta["cases"].append({"text": text, "voice": speaker, "language": language, "instructions": instruct,
                              "non_streaming_mode": non_streaming_mode, "num_frames": int(case["codes"].shape[0])})
    np.savez_compressed(out / "golden_options.npz", **arrays)
    (out / "golden_options.json").write_text(json.dumps(meta, indent=2) + "\n")


def main() -> None:
    torch.set_num_threads(1)
    root = Path(__file__).resolve().parents[1]
    fixture = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "tests/fixtures/qwen3_tts_tiny"
    model = build_model(build_config(build_tokenizer()))
    check_weights(model, fixture)
    model.speech_tokenizer = CodesOnly()
    tok = Qwen2TokenizerFast.from_pretrained(str(fixture))
    tts = Qwen3TTSModel(model=model, processor=Qwen3TTSProcessor(tokenizer=tok), generate_defaults={})
    cases = [run_case(tts, *case) for case in CASES]
    save(fixture, cases)
    for case_args, case in zip(CASES, cases):
        print(case_args, f"prefill {tuple(case['prefill_embeds'].shape)}, trailing {tuple(case['trailing'].shape)}, "
              f"code0 {case['codes'][:, 0].tolist()}")


if __name__ == "__main__":
    main()
