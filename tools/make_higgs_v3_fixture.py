"""Build tests/fixtures/higgs_v3_golden.pt from a checkout of Boson AI's higgs-audio (the reference).

    python tools/make_higgs_v3_fixture.py /path/to/higgs-audio [--out tests/fixtures/higgs_v3_golden.pt]

The reference is not a package our venv can import (its package `__init__`s pull in Whisper, librosa,
torchaudio and old transformers internals), so this tool loads the modules it needs by file under stub
parent packages, and stubs the optional imports they name but these pieces never run (`audiotools`, `tqdm`,
`omegaconf` where absent). Methods of `HiggsAudioModel` are taken from its source file (`ast`) and run on a small holder
object, so the model class itself is never built. Everything runs on the CPU at a tiny size with a fixed seed:

- delay pattern: `build_delay_pattern_mask` on stream-framed codes (as the collator frames them) and
  `revert_delay_pattern`;
- LM pieces: `_embed_audio_ids` (the fused codebook embedding) and `HiggsAudioDecoderProjector`'s audio head;
- the end-of-stream countdown: `_sample_audio_tokens` (greedy) over a fixed sequence of audio logits in which
  codebook 0 picks end-of-stream at one step;
- codec: `ResidualVectorQuantizer.decode` -> `fc_post2` -> `dac2.Decoder` (weight norm on), as
  `HiggsAudioTokenizer.decode` chains them;
- the tokenizer's encoder: its own `_xcodec_encode` on audio (a `dac2.Encoder`, the semantic `Encoder`,
  `fc_prior`, the same RVQ), with HuBERT's averaged hidden states given as random features.

Saved: the tiny shapes, every input and output, and the pieces' state dicts under the official names.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import sys
import types
from pathlib import Path

import torch
from torch import nn

SEED = 0
K, CODEBOOK = 8, 30  # codebooks, codes per codebook (+ begin 30, end 31)
HIDDEN = 16
CODEC = dict(D=8, semantic_dim=4, codebook_dim=4, decoder_dim=32, encoder_dim=1, ratios=[8, 5, 4, 2, 3], frames=4)
COUNTDOWN_STEPS, COUNTDOWN_END = 20, 9  # steps of logits; codebook 0 picks end-of-stream at this step


def stub_packages(root: Path) -> None:
    """Parent packages as empty modules (their `__init__`s are not run), and stubs of absent optional imports."""
    for name, sub in [("boson_multimodal", ""), ("boson_multimodal.model", "model"),
                      ("boson_multimodal.model.higgs_audio", "model/higgs_audio"),
                      ("boson_multimodal.audio_processing", "audio_processing"),
                      ("boson_multimodal.audio_processing.quantization", "audio_processing/quantization")]:
        module = types.ModuleType(name)
        module.__path__ = [str(root / "boson_multimodal" / sub)]
        sys.modules[name] = module
    sys.path.insert(0, str(root / "boson_multimodal" / "audio_processing" / "descriptaudiocodec"))
    if importlib.util.find_spec("audiotools") is None:
        for name in ("audiotools", "audiotools.ml"):
            stub = types.ModuleType(name)
            stub.AudioSignal, stub.BaseModel = object, nn.Module
            sys.modules[name] = stub
    for name, attribute in (("tqdm", "tqdm"), ("omegaconf", "OmegaConf")):
        if importlib.util.find_spec(name) is None:
            sys.modules[name] = types.ModuleType(name)
            setattr(sys.modules[name], attribute, object)


def model_method(root: Path, name: str):
    """A method of `HiggsAudioModel`, compiled from the reference's source file."""
    source = (root / "boson_multimodal/model/higgs_audio/modeling_higgs_audio.py").read_text()
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "HiggsAudioModel")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)
    fn.decorator_list = []
    namespace = {"torch": torch, "nn": nn, **{k: getattr(__import__("typing"), k) for k in ("Optional", "Tuple")},
                 "LogitsProcessorList": list, "GenerationConfig": object}
    exec(compile(ast.Module([fn], type_ignores=[]), "modeling_higgs_audio.py", "exec"), namespace)
    return namespace[name]


def delay_fixture(utils) -> dict:
    codes = torch.randint(0, CODEBOOK, (K, 5))
    framed = torch.cat([torch.full((K, 1), CODEBOOK), codes, torch.full((K, 1), CODEBOOK + 1)], dim=1)
    delayed, with_mask = utils.build_delay_pattern_mask(framed[None], bos_token_id=CODEBOOK, pad_token_id=CODEBOOK + 1)
    revert_in = torch.randint(0, CODEBOOK, (K, 7 + K - 1))
    return {"delay_codes": codes, "delay_rows": delayed[0], "delay_gen_mask": with_mask[0],
            "revert_in": revert_in, "revert_out": utils.revert_delay_pattern(revert_in)}


def holder(config) -> types.SimpleNamespace:
    """What `HiggsAudioModel`'s audio methods read off `self`."""
    embeddings = nn.Embedding(K * (CODEBOOK + 2), HIDDEN)
    return types.SimpleNamespace(config=config, audio_codebook_size=CODEBOOK + 2, audio_num_codebooks=K,
                                 audio_codebook_embeddings=embeddings, use_audio_out_embed_projector=False,
                                 use_delay_pattern=True)


def lm_fixture(root: Path, config) -> dict:
    from boson_multimodal.model.higgs_audio.audio_head import HiggsAudioDecoderProjector

    model = holder(config)
    model.audio_codebook_embeddings.weight.data.normal_()
    ids = torch.randint(0, CODEBOOK + 2, (K, 5))
    embeds = model_method(root, "_embed_audio_ids")(model, ids)
    head = HiggsAudioDecoderProjector(config)
    hidden = torch.randn(4, HIDDEN)
    _, audio_logits, *_ = head(hidden[None], torch.ones(1, 4, dtype=torch.bool))
    return {"embed_ids": ids, "embeds": embeds, "hidden": hidden, "audio_logits": audio_logits.view(4, K, -1),
            "state": {"audio_codebook_embeddings.weight": model.audio_codebook_embeddings.weight.detach(),
                      "audio_decoder_proj.audio_lm_head.weight": head.audio_lm_head.weight.detach()}}


def countdown_fixture(root: Path, config) -> dict:
    """Greedy rows of the reference's `_sample_audio_tokens` until it ends the audio (the text token turns
    `<|audio_eos|>`), from logits that never favour begin/end of stream except codebook 0's end at one step."""
    sample_audio = model_method(root, "_sample_audio_tokens")
    model = holder(config)
    logits = torch.randn(COUNTDOWN_STEPS, K, CODEBOOK + 2)
    logits[:, :, CODEBOOK:] = -10.0
    logits[COUNTDOWN_END, 0, CODEBOOK + 1] = 10.0
    generation = types.SimpleNamespace(generation_kwargs={"audio_eos_token_id": -7})
    rows, num_delay, remaining = [], 0, None
    for step in range(COUNTDOWN_STEPS):
        text, row, _, _, num_delay, remaining = sample_audio(
            model, None, logits[step][None], torch.zeros(K, 0, dtype=torch.long), False, lambda _, x: x,
            torch.device("cpu"), None, generation, num_delay, remaining)
        rows.append(row.clone())
        if int(text[0]) == -7:
            break
    return {"countdown_logits": logits, "countdown_rows": torch.stack(rows)}


def tokenizer_method(root: Path, name: str):
    """A method of `HiggsAudioTokenizer`, compiled from the reference's source file."""
    source = (root / "boson_multimodal/audio_processing/higgs_audio_tokenizer.py").read_text()
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "HiggsAudioTokenizer")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace = {"torch": torch, "F": nn.functional, "Optional": __import__("typing").Optional,
                 "EncodedResult": lambda audio_codes: types.SimpleNamespace(audio_codes=audio_codes)}
    exec(compile(ast.Module([fn], type_ignores=[]), "higgs_audio_tokenizer.py", "exec"), namespace)
    return lambda holder, *args: namespace[name](holder, *args)


def encoder_fixture(root: Path, tokenizer: nn.Module, audio: torch.Tensor) -> dict:
    """`HiggsAudioTokenizer._xcodec_encode` of `audio` ([1, 1, N], the codec fixture's output) on the codec fixture's
    quantizer with a DAC encoder, the semantic encoder and `fc_prior`; HuBERT's features (`get_regress_target`)
    are given, not computed."""
    from boson_multimodal.audio_processing.semantic_module import Encoder as SemanticEncoder
    from dac.model import dac as dac2

    c = CODEC
    holder = types.SimpleNamespace(
        encoder=dac2.Encoder(c["encoder_dim"], c["ratios"], c["D"]), fc_prior=nn.Linear(c["D"] + c["semantic_dim"],
                                                                                       c["D"] + c["semantic_dim"]),
        encoder_semantic=SemanticEncoder(input_channels=c["semantic_dim"], encode_channels=c["semantic_dim"]),
        quantizer=tokenizer.quantizer, quantizer_type="RVQ", frame_rate=25, semantic_downsample_factor=2)
    for layer in tokenizer.quantizer.vq.layers:  # a loaded tokenizer's codebooks are initialised (no k-means)
        layer._codebook.inited.fill_(1.0)
    tokenizer.quantizer.eval()
    semantic = torch.randn(1, c["frames"], c["semantic_dim"])
    holder.get_regress_target = lambda x: semantic
    with torch.no_grad():
        codes = tokenizer_method(root, "_xcodec_encode")(holder, audio).audio_codes  # [n_q, 1, T] -> permuted
    modules = {"encoder": holder.encoder, "fc_prior": holder.fc_prior, "encoder_semantic": holder.encoder_semantic}
    state = {f"{name}.{k}": v.detach().clone() for name, m in modules.items() for k, v in m.state_dict().items()}
    return {"encoder_semantic_features": semantic[0], "encoder_codes": codes[0].T,
            "encoder_state": state}


def codec_fixture(root: Path) -> dict:
    from boson_multimodal.audio_processing.quantization.vq import ResidualVectorQuantizer
    from dac.model import dac as dac2

    c = CODEC
    qdim = c["D"] + c["semantic_dim"]
    tokenizer = nn.Module()
    tokenizer.quantizer = ResidualVectorQuantizer(dimension=qdim, codebook_dim=c["codebook_dim"], n_q=K, bins=CODEBOOK)
    tokenizer.fc_post2 = nn.Linear(qdim, c["D"])
    tokenizer.decoder_2 = dac2.Decoder(c["D"], c["decoder_dim"], c["ratios"])
    for layer in tokenizer.quantizer.vq.layers:
        layer._codebook.embed.normal_()
    codes = torch.randint(0, CODEBOOK, (1, K, c["frames"]))
    with torch.no_grad():  # as `HiggsAudioTokenizer.decode` (RVQ branch)
        quantized = tokenizer.quantizer.decode(codes.permute(1, 0, 2)).transpose(1, 2)
        audio = tokenizer.decoder_2(tokenizer.fc_post2(quantized).transpose(1, 2))
    fixture = encoder_fixture(root, tokenizer, audio)
    kept = ("embed", "weight", "weight_g", "weight_v", "bias", "alpha")  # not the RVQ's training statistics
    return {"codec_codes": codes[0].transpose(0, 1), "codec_audio": audio[0, 0], **fixture,
            "codec_state": {k: v.detach().clone() for k, v in tokenizer.state_dict().items()
                            if k.rsplit(".", 1)[-1] in kept}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reference", type=Path, help="a checkout of boson-ai/higgs-audio")
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/higgs_v3_golden.pt"))
    args = parser.parse_args()
    stub_packages(args.reference)
    torch.manual_seed(SEED)
    utils = importlib.import_module("boson_multimodal.model.higgs_audio.utils")
    from boson_multimodal.model.higgs_audio.configuration_higgs_audio import HiggsAudioConfig

    config = HiggsAudioConfig(text_config={"model_type": "qwen3", "hidden_size": HIDDEN, "vocab_size": 64},
                              audio_num_codebooks=K, audio_codebook_size=CODEBOOK, audio_stream_bos_id=CODEBOOK,
                              audio_stream_eos_id=CODEBOOK + 1, use_delay_pattern=True, skip_audio_tower=True)
    fixture = {"shape": {"num_codebooks": K, "codebook_size": CODEBOOK, "hidden": HIDDEN, **CODEC},
               **delay_fixture(utils), **lm_fixture(args.reference, config),
               **countdown_fixture(args.reference, config),
               **codec_fixture(args.reference)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(fixture, args.out, _use_new_zipfile_serialization=False)  # the zip format's records cost ~40 %
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
