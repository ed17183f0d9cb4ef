"""Running estimates of the LM lane's step and prefill times, for admission."""
from __future__ import annotations


class StepTiming:
    """Running estimates of a decode step and of prefill per prompt token (EWMA, seconds)."""

    def __init__(self, alpha: float = 0.1) -> None:
        self._alpha = alpha
        self.step_s = 0.0
        self._prefill_per_token_s = 0.0

    def observe_step(self, seconds: float) -> None:
        self.step_s += self._alpha * (seconds - self.step_s) if self.step_s else seconds

    def observe_prefill(self, num_tokens: int, seconds: float) -> None:
        per_token = seconds / max(1, num_tokens)
        old = self._prefill_per_token_s
        self._prefill_per_token_s = old + self._alpha * (per_token - old) if old else per_token

    def prefill_s(self, num_tokens: int) -> float:
        return self._prefill_per_token_s * num_tokens
