"""A stream's tempo changed chunk by chunk, its pitch kept: FFmpeg's `atempo` filter (WSOLA) through PyAV.

`atempo` takes factors of 0.5 to 100 per instance, so a speed under 0.5 is a chain (0.25 = 0.5 × 0.5). The
filter holds back a window of audio (tens of ms) that it needs to overlap the next; `is_last` drains it at the
stream's end. It also gives out an output frame only once it has filled one the size of the input frame over
the speed, so a chunk pushed whole would come out only with the next chunk: the chunk goes in as frames of
`PIECE_S`, and what is ready goes out with it. Time-stretching by resampling would shift the pitch; this does not.
"""
from __future__ import annotations

import numpy as np

MIN_FACTOR = 0.5  # atempo's smallest factor per instance
PIECE_S = 0.02  # the frames a chunk is pushed in (tools/tempo_cost.py measures what this holds back)


def atempo_chain(speed: float) -> list[float]:
    """The atempo factors whose product is `speed`."""
    factors = []
    while speed < MIN_FACTOR:
        factors.append(MIN_FACTOR)
        speed /= MIN_FACTOR
    return [*factors, speed]


class TempoStream:
    """float32 mono at `rate`, played `speed` times as fast, in pieces."""

    def __init__(self, rate: int, speed: float) -> None:
        from av.filter import Graph

        self._rate, self._pts = rate, 0
        self._graph = Graph()
        node = self._graph.add_abuffer(format="flt", sample_rate=rate, layout="mono")
        for factor in atempo_chain(speed):
            stage = self._graph.add("atempo", f"{factor:.6f}")
            node.link_to(stage)
            node = stage
        sink = self._graph.add("abuffersink")
        node.link_to(sink)
        self._graph.configure()

    def process(self, audio: np.ndarray, is_last: bool = False) -> np.ndarray:
        """The stretched samples ready after `audio` ([n] float32); `is_last` drains the filter too."""
        import av

        audio, step, pieces = np.ascontiguousarray(audio, np.float32), max(1, int(self._rate * PIECE_S)), []
        for start in range(0, audio.size, step):
            piece = audio[start:start + step]
            frame = av.AudioFrame.from_ndarray(piece.reshape(1, -1), format="flt", layout="mono")
            frame.sample_rate, frame.pts = self._rate, self._pts
            self._pts += piece.size
            self._graph.push(frame)
            pieces.append(self._pull())
        if is_last:
            self._graph.push(None)
            pieces.append(self._pull())
        return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)

    def _pull(self) -> np.ndarray:
        import av

        pieces = []
        while True:
            try:
                pieces.append(self._graph.pull().to_ndarray().reshape(-1))
            except (av.BlockingIOError, av.EOFError):
                break
        return np.concatenate(pieces).astype(np.float32, copy=False) if pieces else np.zeros(0, np.float32)
