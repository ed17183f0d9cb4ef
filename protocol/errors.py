"""A client's error, as every part of the server reports it: the message is sent back verbatim, with the input
(`param`) it names and a stable `code` where one applies; on the wire it is an `Ended` of reason
`REFUSED_BAD_INPUT` (protocol/reasons.py)."""
from __future__ import annotations

from protocol.reasons import Ended, EndReason


class RequestError(ValueError):
    """A client error; the message is sent back verbatim, with the input it names (if one)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.code = param, code

    @property
    def ended(self) -> Ended:
        return Ended(EndReason.REFUSED_BAD_INPUT, str(self), self.param, self.code)
