"""CUDA graphs for one two-stage decode frame, per batch-size bucket (Qwen3-TTS, CSM, Higgs Audio, Voxtral-TTS).

The stages are named for Qwen3-TTS: the *predictor* (CSM: the depth decoder; Higgs Audio: the fused audio
head; Voxtral-TTS: the flow head, an ODE rather than sampled steps) and the *talker* (the backbone); each
family passes its own `predict` and `talk` functions. Orpheus's one-stage frame
is `graphs/step.py`.

Per bucket two graphs share one memory pool: the *predictor* graph (codebook-0 sampling with
repetition penalty and EOS blocking, then the whole 15-step code-predictor loop with sampling) and
the *talker* graph (one talker token per row, writing the next logits and hidden state). A batch
of n rows runs in the smallest bucket >= n; rows n.. are padding that read and write the scratch
slot of `SlotMemory`, so they never touch a live request. Inputs are static buffers filled before
replay: two small host-to-device copies (per-row columns), one noise draw per sampled row from its
own generator (`sampling.draw_noise`), and one stack of the rows' text embeddings. The only
device-to-host copy is the caller's (`codes.cpu()` in the engine). With `graphed=False` the same
functions run eagerly on the same padded buffers, which gives the graph path's exact twin.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..base import DecodeBatch, SamplingParams
from .buffers import FrameBuffers, batch_buckets
from .capture import capture_steps
from ..layers.sampling import BatchSampling, draw_noise, host_columns, host_flags


@dataclass
class FrameInputs:
    """Device inputs of one decode frame; row b of every field is batch row b."""

    rows: torch.Tensor  # [B] int64, cache row (the slot; the scratch row for padding)
    positions: torch.Tensor  # [B] int64, the talker position this frame's token is written to
    is_eos_blocked: torch.Tensor  # [B] bool, EOS may not be sampled (too early, or ignore_eos)
    sampling: BatchSampling
    noise: torch.Tensor  # [B, talker_vocab + (G-1) * codebook_size] float32 Exp(1): codebook 0, then each step
    text_embed: torch.Tensor  # [B, hidden], trailing text embedding added to the next talker input
    # [B, 2] int64 (seed, frame counter) where the frame's samplers draw their own noise (`kernels/sampler.py`);
    # `noise` is then unused
    noise_keys: torch.Tensor | None = None

    @classmethod
    def from_columns(cls, floats: torch.Tensor, ints: torch.Tensor, noise: torch.Tensor, text_embed: torch.Tensor,
                     noise_keys: torch.Tensor | None = None, **flags: bool) -> "FrameInputs":
        """floats: [B, 3] float32, ints: [B, 5] int64 (row, position, is_eos_blocked, top_k, is_greedy)."""
        return cls(rows=ints[:, 0], positions=ints[:, 1], is_eos_blocked=ints[:, 2] != 0,
                   sampling=BatchSampling.from_columns(floats, ints[:, 3:], **flags), noise=noise,
                   text_embed=text_embed, noise_keys=noise_keys)


PredictFn = Callable[[FrameInputs], tuple[torch.Tensor, torch.Tensor]]  # -> codes [B, G], frame_embed [B, H]
TalkFn = Callable[[FrameInputs, torch.Tensor], None]  # (inputs, frame_embed [B, H]) -> writes slot memory


def eager_frame(predict: PredictFn, talk: TalkFn, noise_width: int, batch: DecodeBatch, floats: torch.Tensor,
                ints: torch.Tensor, text_embeds: list[torch.Tensor], device: torch.device,
                noise_every_row: bool = False) -> torch.Tensor:
    """The unpadded, ungraphed frame (CPU): skips the sampling work no row needs. floats [n, 3], ints [n, 5]
    host columns; text_embeds: n device tensors [H] -> codes [n, G] int64. `noise_every_row`: greedy rows
    draw noise too (see `FrameGraphs.noise_every_row`)."""
    noise = torch.ones(len(text_embeds), noise_width, device=device)
    draw_noise(noise, batch.sampling, batch.generators, noise_every_row)
    inputs = FrameInputs.from_columns(floats.to(device, non_blocking=True), ints.to(device, non_blocking=True),
                                      noise, torch.stack(text_embeds), **host_flags(batch.sampling))
    codes, frame_embed = predict(inputs)
    talk(inputs, frame_embed)
    return codes


class FrameGraphs(FrameBuffers):
    """Static frame buffers sized to the largest bucket, and the two graphs of each bucket."""

    def __init__(self, predict: PredictFn, talk: TalkFn, buckets: tuple[int, ...], scratch_row: int,
                 noise_width: int, hidden_size: int, num_codebooks: int, device: torch.device,
                 dtype: torch.dtype) -> None:
        super().__init__(buckets, scratch_row, noise_width, num_codebooks, device)
        self.predict, self.talk = predict, talk
        # True: every row draws its noise, greedy ones too (a flow head starts each frame from noise whatever
        # the sampling); False: greedy rows keep stale noise, which their argmax never reads
        self.noise_every_row = False
        # True: the samplers draw their own noise from each row's (seed, frame counter) in `noise_keys`, inside the
        # graphs (the fused frame); False: one noise draw per row from its generator before the replay
        self.uses_noise_keys = False
        size = buckets[-1]
        self.text_embed = torch.zeros(size, hidden_size, device=device, dtype=dtype)
        self.frame_embed = torch.zeros(size, hidden_size, device=device, dtype=dtype)
        self.noise_keys = torch.zeros(size, 2, device=device, dtype=torch.int64)

    # ---- one frame -------------------------------------------------------------------------------
    def run(self, floats: torch.Tensor, ints: torch.Tensor, text_embeds: list[torch.Tensor],
            params: list[SamplingParams], generators: list[torch.Generator], graphed: bool,
            noise_keys: torch.Tensor | None = None) -> torch.Tensor:
        """floats [n, 3], ints [n, 5] host columns; text_embeds: n device tensors [H]; noise_keys [n, 2] int64 on
        the host where `uses_noise_keys` -> codes [n, G] int64."""
        n = len(text_embeds)
        bucket = self.bucket_for(n)
        if graphed:
            self._graph(bucket)  # a lazy capture resets the buffers: before the fill, not after
        self.fill(floats, ints, text_embeds, params, generators, bucket, noise_keys)
        self.run_predictor(bucket, graphed)
        self.run_talker(bucket, graphed)
        return self.codes[:n].clone()  # the static buffer is overwritten by the next frame

    def fill(self, floats: torch.Tensor, ints: torch.Tensor, text_embeds: list[torch.Tensor],
             params: list[SamplingParams], generators: list[torch.Generator], bucket: int,
             noise_keys: torch.Tensor | None = None) -> None:
        """Write one frame's inputs into the static buffers, padding rows n..bucket-1."""
        self.fill_columns(floats, ints, bucket)
        if self.uses_noise_keys:
            self.noise_keys[:noise_keys.shape[0]].copy_(noise_keys, non_blocking=True)
        else:
            draw_noise(self.noise, params, generators, self.noise_every_row)
        torch.stack(text_embeds, out=self.text_embed[:len(text_embeds)])

    def run_predictor(self, bucket: int, graphed: bool) -> None:
        self._graph(bucket)[0].replay() if graphed else self._predict(bucket)

    def run_talker(self, bucket: int, graphed: bool) -> None:
        self._graph(bucket)[1].replay() if graphed else self._talk(bucket)

    def _inputs(self, bucket: int) -> FrameInputs:
        return FrameInputs.from_columns(self.floats[:bucket], self.ints[:bucket], self.noise[:bucket],
                                        self.text_embed[:bucket],
                                        self.noise_keys[:bucket] if self.uses_noise_keys else None)

    def _predict(self, bucket: int) -> None:
        codes, frame_embed = self.predict(self._inputs(bucket))
        self.codes[:bucket].copy_(codes)
        self.frame_embed[:bucket].copy_(frame_embed)

    def _talk(self, bucket: int) -> None:
        self.talk(self._inputs(bucket), self.frame_embed[:bucket])

    def _capture_steps(self, bucket: int) -> tuple[torch.cuda.CUDAGraph, torch.cuda.CUDAGraph]:
        """The predictor and talker graphs; on padding rows they touch nothing but the scratch slot and the
        predictor's per-frame cache (never a live request)."""
        (predictor, _), (talker, _) = capture_steps((lambda: self._predict(bucket), lambda: self._talk(bucket)),
                                                    self._pool)
        return predictor, talker


class TwoStageFrameLM:
    """The two-stage frame's glue for a `SlotSpeechLM` with `_predict` and `_talk` (CSM, Higgs Audio, Voxtral-TTS,
    tse): its graphs over the slot memory, and one frame run through them on CUDA or eagerly on the CPU."""

    frame_noise_every_row = False  # FrameGraphs.noise_every_row: greedy rows draw noise too (a flow head)

    def _two_stage_graphs(self, layout, hidden_size: int, dtype: torch.dtype) -> FrameGraphs:
        mem = self._require_memory()
        graphs = FrameGraphs(self._predict, self._talk, batch_buckets(self.graph_batch_sizes, layout.batch),
                             mem.scratch_row, self.noise_width, hidden_size, self.num_codebooks, self.device, dtype)
        graphs.noise_every_row = self.frame_noise_every_row
        return self._capture_graphs(graphs)

    def _two_stage_frame(self, batch: DecodeBatch, frame_ints: list[list[int]],
                         text_embeds: list[torch.Tensor]) -> torch.Tensor:
        """frame_ints: per row [cache row, position, is_eos_blocked] -> codes [n, G] int64."""
        floats, sampling_ints = host_columns(batch.sampling)
        ints = torch.cat((torch.tensor(frame_ints, dtype=torch.int64).reshape(-1, 3), sampling_ints), dim=1)
        if self._graphs is not None:
            return self._graphs.run(floats, ints, text_embeds, batch.sampling, batch.generators, self.use_cuda_graphs)
        return eager_frame(self._predict, self._talk, self.noise_width, batch, floats, ints, text_embeds, self.device,
                           self.frame_noise_every_row)
