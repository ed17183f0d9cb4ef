"""Higgs Audio v3's prompt: ChatML turns (Qwen3's template) around Higgs's audio tokens.

    <|im_start|>system\\nGenerate audio following instruction.<|im_end|>\\n
    [<|im_start|>user\\n{ref_text}<|im_end|>\\n<|im_start|>assistant\\n<|audio_out_bos|>{ref rows}
     <|audio_eos|><|im_end|>\\n]  (a cloned voice; then the segment spoken before, alike, in a streamed text)
    <|im_start|>user\\n{text}<|im_end|>\\n<|im_start|>assistant\\n<|audio_out_bos|>{begin row}

A voice to clone is an earlier assistant turn that spoke the reference, as the reference's
`examples/generation.py` lays a voice prompt out: its codes framed by a begin-of-stream and an end-of-stream
frame and delayed (`build_delay_pattern_mask`), one `<|AUDIO_OUT|>` position per delayed row, each embedded
as the sum of its codebooks' embeddings. The answer starts at the begin-of-stream row the reference feeds
after `<|audio_out_bos|>` (its AUDIO_INIT step), so the prefill's last logits give the first delayed row.

`Prompt.tensors`: "ids" [L] int64, the text ids with AUDIO where an audio row goes; "rows" [A, K] int64, the
audio rows in order (A = the AUDIO positions).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from protocol.quoting import quoted

from ..base import Prompt, VoiceReference
from ..delay_pattern import DelayPattern

AUDIO = -1  # an audio row's position among the text ids
REF_CODES = "ref_codes"  # a cloned voice's `VoiceReference.tensors`: its audio tokenizer codes [T, K]
SYSTEM = "<|im_start|>system\nGenerate audio following instruction.<|im_end|>\n"


@dataclass(frozen=True)
class PromptFormat:
    """What laying out a prompt needs besides the text: the tokenizer, the audio special tokens' text and the
    audio stream's ids."""

    tokenizer: object
    audio_out_bos_token: str
    audio_eos_token: str
    pattern: DelayPattern
    codebook_size: int
    stream_bos: int
    stream_eos: int

    def turn(self, text: str) -> str:
        return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n{self.audio_out_bos_token}"

    def stream_rows(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [T, K] -> the delayed rows of the stream begin, codes, end: [T + 2 + D, K] int64."""
        num_codebooks = codes.shape[1]
        frames = torch.cat((torch.full((1, num_codebooks), self.stream_bos), codes,
                            torch.full((1, num_codebooks), self.stream_eos)))
        return self.pattern.delay(frames, self.stream_bos, self.stream_eos)

    def build(self, text: str, turns: list[tuple[str, torch.Tensor]] = ()) -> Prompt:
        """The prompt for `text`, after earlier spoken turns, each (transcript, codes [T, K]): a cloned voice's
        reference, then the segment spoken before (as the reference's long-form `generation.py` keeps it)."""
        if not text.strip():
            raise ValueError("text must not be empty")
        ids: list[int] = []
        rows: list[torch.Tensor] = []
        self._add_text(ids, SYSTEM)
        for transcript, codes in turns:
            self._add_text(ids, self.turn(transcript))
            self._add_rows(ids, rows, self.stream_rows(codes))
            self._add_text(ids, f"{self.audio_eos_token}<|im_end|>\n")
        self._add_text(ids, self.turn(text))
        self._add_rows(ids, rows, torch.full((1, self.pattern.num_codebooks), self.stream_bos))
        return Prompt(num_tokens=len(ids), tensors={"ids": torch.tensor(ids, dtype=torch.int64),
                                                    "rows": torch.cat(rows).to(torch.int64)})

    def _add_text(self, ids: list[int], text: str) -> None:
        ids.extend(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @staticmethod
    def _add_rows(ids: list[int], rows: list[torch.Tensor], new: torch.Tensor) -> None:
        ids.extend([AUDIO] * new.shape[0])
        rows.append(new)


def resolve_voice(voices: dict[str, torch.Tensor], voice: str | None) -> str | None:
    if voice is not None and voice not in voices:
        raise ValueError(f"unknown voice {quoted(voice)}; known voices: {list(voices)}")
    return voice


def reference_of(reference: VoiceReference, num_codebooks: int, codebook_size: int) -> tuple[str, torch.Tensor]:
    """(transcript, codes [T, K] int64 on the CPU) of a voice to clone; a ValueError names what is wrong."""
    if reference.text is None or not reference.text.strip():
        raise ValueError("Higgs Audio clones a voice in context: the reference audio needs its transcript (ref_text)")
    codes = reference.tensors.get(REF_CODES)
    if codes is None:
        raise ValueError(f"the reference has no {quoted(REF_CODES)}: Higgs clones from the reference's codes")
    if codes.dim() != 2 or codes.shape[0] < 1 or codes.shape[1] != num_codebooks or codes.is_floating_point():
        raise ValueError(f"{quoted(REF_CODES)} must be integer [T >= 1, {num_codebooks}], got {codes.dtype} "
                         f"{tuple(codes.shape)}")
    if codes.min() < 0 or codes.max() >= codebook_size:
        raise ValueError(f"{quoted(REF_CODES)} must lie in [0, {codebook_size}), got [{codes.min()}, {codes.max()}]")
    return reference.text, codes.to("cpu", torch.int64)
