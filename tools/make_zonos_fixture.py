"""Regenerate tests/fixtures/zonos_golden.pt (tests/unit/test_zonos_lm.py) and zonos_speaker_golden.pt
(tests/unit/test_zonos_speaker.py) from Zyphra's reference Zonos code.

    python tools/make_zonos_fixture.py /path/to/Zonos [--out tests/fixtures/zonos_golden.pt]

The path is a checkout of github.com/Zyphra/Zonos (its `zonos/` package is imported from there). Its optional
imports that this environment lacks (torchaudio, eSpeak's phonemizer, inflect, kanjize, sudachipy) are stubbed
here, in this tool only: nothing the transformer path runs comes from a stub. Its DAC autoencoder (downloaded in
its constructor) is replaced by a stand-in with 9 codebooks; the codec is not part of this fixture.

What it builds: the reference `Zonos` with `TorchZonosBackbone` at a tiny config (d_model 32, 2 layers, 4/2 heads,
MLP 64, the official conditioners), weights drawn by `draw_weights` (a fixed recipe from a seed, so the fixture
stores the recipe, not the tables: the test draws the same weights into our model by the same state-dict names),
and one override: codebook 0's eos row of the heads, scaled until greedy decoding ends the speech a few steps in.
eSpeak is replaced by the characters themselves (lowercased), which is our front end (models/zonos/prompt.py).
It runs `prepare_conditioning` and `generate` greedily (cfg_scale 2.0) with the repetition penalty off and at the
reference's 3.0, in float32 on the CPU, and saves the prefixes, the first steps' guided logits and every delayed
row each run fed back.

The speaker fixture: the reference's `ResNet293_based` (all 97 SimAM blocks, at 2 planes) with an LDA to 128, weights
drawn by `draw_speaker_weights`, on one second of a fixed signal. Its torchaudio log-mel front end (`logFbankCal`)
cannot run here: the tool gives it ours (models/zonos/speaker.py `log_fbank`), so this fixture checks the network
and the pooling; the front end is checked against transformers' spectrogram code in the test instead.
"""
from __future__ import annotations

import argparse
import functools
import sys
import types
import unicodedata
from pathlib import Path

import torch

SEED = 1234
TEXT = "Hello, world!"
MAX_NEW_TOKENS = 40
LOGIT_STEPS = 2  # guided logits saved for the first steps only (the fixture stays small)
PENALTIES = (1.0, 3.0)
TINY_CONFIG = {
    "backbone": {"d_model": 32, "d_intermediate": 0, "attn_mlp_d_intermediate": 64, "n_layer": 2, "ssm_cfg": {},
                 "attn_layer_idx": [0, 1], "attn_cfg": {"causal": True, "num_heads": 4, "num_heads_kv": 2,
                                                         "rotary_emb_dim": 8, "qkv_proj_bias": False,
                                                         "out_proj_bias": False},
                 "rms_norm": False, "residual_in_fp32": False, "norm_epsilon": 1e-5},
    "prefix_conditioner": {"conditioners": [
        {"type": "EspeakPhonemeConditioner", "name": "espeak"},
        {"cond_dim": 128, "uncond_type": "learned", "projection": "linear", "type": "PassthroughConditioner",
         "name": "speaker"},
        {"input_dim": 8, "uncond_type": "learned", "type": "FourierConditioner", "name": "emotion"},
        {"min_val": 0, "max_val": 24000, "uncond_type": "learned", "type": "FourierConditioner", "name": "fmax"},
        {"min_val": 0, "max_val": 400, "uncond_type": "learned", "type": "FourierConditioner", "name": "pitch_std"},
        {"min_val": 0, "max_val": 40, "uncond_type": "learned", "type": "FourierConditioner",
         "name": "speaking_rate"},
        {"min_val": -1, "max_val": 126, "uncond_type": "learned", "type": "IntegerConditioner",
         "name": "language_id"}], "projection": "linear"},
    "eos_token_id": 1024, "masked_token_id": 1025,
}
EOS_ROW = "heads.0.weight"


def draw_weights(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    """One tensor per name, in sorted name order from one generator: matrices N(0, 1/fan_in), LayerNorm weights
    1 + N(0, 0.1²), biases N(0, 0.1²), everything else (embeddings, Fourier features, unconditional vectors) N(0, 1).
    The test draws the same (tests/unit/test_zonos_lm.py imports this function)."""
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for name in sorted(shapes):
        x = torch.randn(shapes[name], generator=generator)
        is_norm = ".norm" in name or name.endswith(("norm_f.weight", "norm2.weight", "norm.weight"))
        if name.endswith(".bias"):
            x = 0.1 * x
        elif is_norm and name.endswith(".weight") and len(shapes[name]) == 1:
            x = 1.0 + 0.1 * x
        elif len(shapes[name]) == 2 and not _is_table(name):
            x = x * shapes[name][1] ** -0.5
        weights[name] = x
    return weights


def _is_table(name: str) -> bool:
    return name.startswith("embeddings.") or "embedder" in name or name.endswith("conditioners.2.weight") or (
        ".conditioners." in name and name.endswith(".weight") and "project" not in name)


def _stub_optional_imports() -> None:
    """Modules the reference imports at load time for paths this fixture does not run (transformers first: it
    probes for torchaudio by its import spec, which a stub lacks)."""
    import transformers.models.dac  # noqa: F401

    def module(name: str, **attrs) -> None:
        stub = types.ModuleType(name)
        stub.__dict__.update(attrs)
        sys.modules[name] = stub

    module("torchaudio")
    module("inflect", engine=lambda: types.SimpleNamespace(number_to_words=str))
    module("kanjize", number2kanji=str)
    module("phonemizer")
    module("phonemizer.backend", EspeakBackend=object)
    module("sudachipy", Dictionary=lambda **_: types.SimpleNamespace(create=lambda: None), SplitMode=None)


class StandInAutoencoder:
    """The reference's `DACAutoencoder` downloads DAC in its constructor; the LM needs only its codebook count."""

    num_codebooks, codebook_size, sampling_rate = 9, 1024, 44_100


def build_reference(checkout: Path):
    sys.path.insert(0, str(checkout))
    _stub_optional_imports()
    import zonos.conditioning as conditioning
    import zonos.model as model_module
    from zonos.backbone._torch import TorchZonosBackbone
    from zonos.config import ZonosConfig

    model_module.DACAutoencoder = StandInAutoencoder
    conditioning.phonemize = lambda texts, languages: [unicodedata.normalize("NFKC", t).lower().strip()
                                                       for t in texts]
    # float32 throughout (its cache defaults to bfloat16, which float32 attention cannot read)
    model_module.Zonos.setup_cache = functools.partialmethod(model_module.Zonos.setup_cache, dtype=torch.float32)
    config = ZonosConfig.from_dict(TINY_CONFIG)
    return lambda: model_module.Zonos(config, backbone_cls=TorchZonosBackbone).float().eval(), conditioning


def load(make, weights: dict[str, torch.Tensor]):
    """A fresh reference model with `weights`: loading runs its own post-load hook, which pads the heads as on a
    real load (so a model is loaded once)."""
    model = make()
    model.load_state_dict({k: v.clone() for k, v in weights.items()})
    return model


def run(model, conditioning, speaker: torch.Tensor, penalty: float) -> dict:
    """prepare_conditioning + greedy generate -> the prefixes, the first guided logits, the delayed rows."""
    logits, rows = [], []
    compute = model._compute_logits

    def recording(*args, **kwargs):
        out = compute(*args, **kwargs)
        logits.append(out[0, :, :1025].clone())
        return out

    model._compute_logits = recording
    cond = conditioning.make_cond_dict(text=TEXT, language="en-us", speaker=speaker, device="cpu")
    prefix = model.prepare_conditioning(cond)  # [2, P, d]: conditional, unconditional
    codes = model.generate(prefix, max_new_tokens=MAX_NEW_TOKENS, cfg_scale=2.0, batch_size=1,
                           sampling_params=dict(temperature=0.0, repetition_penalty=penalty), progress_bar=False,
                           disable_torch_compile=True,
                           callback=lambda frame, step, max_steps: rows.extend(frame[0].T.clone()) or True)
    del model._compute_logits
    return {"prefix": prefix.detach(), "logits": torch.stack(logits[:LOGIT_STEPS]),
            "rows": torch.stack(rows), "codes": codes[0].T.contiguous()}


def end_of_speech_step(result: dict) -> int | None:
    ends = (result["rows"][:, 0] == 1024).nonzero()
    return int(ends[0]) + 1 if len(ends) else None  # rows[i] is the row of step i + 1 (step 0 is the prefill's)


def steer_eos(make, conditioning, weights: dict, speaker: torch.Tensor) -> torch.Tensor:
    """Scale codebook 0's eos head row until greedy decoding (penalty off and on) ends between steps 6 and 30."""
    base = weights[EOS_ROW][1024].clone()
    for scale in torch.linspace(1.0, 12.0, 45):
        weights[EOS_ROW][1024] = base * scale
        ends = [end_of_speech_step(run(load(make, weights), conditioning, speaker, p)) for p in PENALTIES]
        if all(e is not None and 6 <= e <= 30 for e in ends):
            return weights[EOS_ROW][1024].clone()
    raise RuntimeError("no eos scale ends both runs between steps 6 and 30: try another SEED")


SPEAKER_PLANES = 2


def draw_speaker_weights(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    """One tensor per name in sorted order from one generator: conv and linear weights N(0, 1/fan_in), BatchNorm
    weights 0.5 (1 + N(0, 0.1²)), biases and running means N(0, 0.1²), running variances U(0.5, 1.5), counters 0.

    The BatchNorm weights are halved so that 97 residual blocks keep the activations near 1: at 1 + N(0, 0.1²) they
    grew to 1e5, the pooling's attention turned one-hot over time, and the statistics' std half
    (sqrt(E[x²] - E[x]²)) was float32 rounding noise, different on each CPU, so a fixture made on one machine
    failed on another."""
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if name.endswith("num_batches_tracked"):
            weights[name] = torch.zeros(shape, dtype=torch.int64)
        elif name.endswith("running_var"):
            weights[name] = 0.5 + torch.rand(shape, generator=generator)
        elif name.endswith(("bias", "running_mean")):
            weights[name] = 0.1 * torch.randn(shape, generator=generator)
        elif len(shape) == 1:
            weights[name] = 0.5 * (1.0 + 0.1 * torch.randn(shape, generator=generator))
        else:
            fan_in = int(torch.tensor(shape[1:]).prod())
            weights[name] = torch.randn(shape, generator=generator) * fan_in ** -0.5
    return weights


def speaker_audio() -> torch.Tensor:
    """One second at 16 kHz: two tones and noise, fixed."""
    t = torch.arange(16_000) / 16_000
    noise = torch.randn(16_000, generator=torch.Generator().manual_seed(SEED + 2))
    return (0.3 * torch.sin(2 * torch.pi * 220 * t) + 0.2 * torch.sin(2 * torch.pi * 1375 * t) + 0.05 * noise).float()


def speaker_fixture() -> dict:
    """The reference speaker network on `speaker_audio`, its mel front end ours (see the module docstring)."""
    from zonos.speaker_cloning import ResNet293_based

    from backend_python.models.zonos.speaker import log_fbank

    class OurFbank(torch.nn.Module):
        def forward(self, wav: torch.Tensor) -> torch.Tensor:  # [1, N] -> [1, 80, T]
            return log_fbank(wav[0])[None]

    model = ResNet293_based(in_planes=SPEAKER_PLANES, featCal=OurFbank()).eval()
    lda = torch.nn.Linear(256, 128)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    shapes.update({f"lda.{k}": tuple(v.shape) for k, v in lda.state_dict().items()})
    weights = draw_speaker_weights(shapes, SEED)
    model.load_state_dict({k: v for k, v in weights.items() if not k.startswith("lda.")})
    lda.load_state_dict({k[4:]: v for k, v in weights.items() if k.startswith("lda.")})
    audio = speaker_audio()
    with torch.no_grad():
        embedding = model(audio[None])
        return {"seed": SEED, "in_planes": SPEAKER_PLANES, "shapes": shapes, "embedding": embedding[0],
                "speaker": lda(embedding)[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a checkout of github.com/Zyphra/Zonos")
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/zonos_golden.pt"))
    parser.add_argument("--speaker-only", action="store_true", help="write zonos_speaker_golden.pt only")
    args = parser.parse_args()
    make, conditioning = build_reference(args.checkout)
    if args.speaker_only:
        speaker_out = args.out.with_name("zonos_speaker_golden.pt")
        torch.save(speaker_fixture(), speaker_out)
        print(f"wrote {speaker_out} ({speaker_out.stat().st_size} bytes)")
        return
    shapes = {k: tuple(v.shape) for k, v in make().state_dict().items()}
    weights = draw_weights(shapes, SEED)
    speaker = torch.randn(128, generator=torch.Generator().manual_seed(SEED + 1))
    eos_row = steer_eos(make, conditioning, weights, speaker)
    runs = {str(p): run(load(make, weights), conditioning, speaker, p) for p in PENALTIES}
    fixture = {"config": TINY_CONFIG, "seed": SEED, "shapes": shapes, "eos_row": eos_row, "text": TEXT,
               "speaker": speaker, "max_new_tokens": MAX_NEW_TOKENS, "runs": runs}
    torch.save(fixture, args.out)
    speaker_out = args.out.with_name("zonos_speaker_golden.pt")
    torch.save(speaker_fixture(), speaker_out)
    print(f"wrote {speaker_out} ({speaker_out.stat().st_size} bytes)")
    for p, r in runs.items():
        print(f"penalty {p}: prefix {tuple(r['prefix'].shape)}, {len(r['rows'])} rows, "
              f"end of speech at step {end_of_speech_step(r)}, {len(r['codes'])} frames")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
