"""Lanes a chunk can take and the serving modes that decide which lanes exist."""
from __future__ import annotations

from enum import Enum


class Lane(str, Enum):
    """Where a chunk's codec decode runs. Values are sent to clients in `lane`."""

    URGENT = "urgent"  # codec_urgent: whole GPU, small batches, no queue delay
    BACKGROUND = "background"  # codec: small SM partition, dynamic batching
    INLINE = "inline"  # decoded in the LM's own loop (timeshare baseline)


class ServingMode(str, Enum):
    """The ablation of the paper: same code, one flag."""

    TIMESHARE = "timeshare"  # LM and codec serialised on the whole GPU
    COLOCATE = "colocate"  # separate processes, no SM partition, no urgent lane
    PARTITION = "partition"  # MPS partition, every chunk to the background lane
    VOXLANE = "voxlane"  # partition plus the urgent lane

    @property
    def lanes(self) -> tuple[Lane, ...]:
        """Lanes a chunk may be routed to in this mode."""
        return _MODE_LANES[self]

    @property
    def is_partitioned(self) -> bool:
        """Whether the LM and the codec run under an MPS SM partition."""
        return self in (ServingMode.PARTITION, ServingMode.VOXLANE)


_MODE_LANES: dict[ServingMode, tuple[Lane, ...]] = {
    ServingMode.TIMESHARE: (Lane.INLINE,),
    ServingMode.COLOCATE: (Lane.BACKGROUND,),
    ServingMode.PARTITION: (Lane.BACKGROUND,),
    ServingMode.VOXLANE: (Lane.URGENT, Lane.BACKGROUND),
}
