"""What one engine step did, in the terms both schedulers share."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(slots=True)
class StepRecord:
    step: int
    scheduled: dict[str, int] = field(default_factory=dict)  # request id -> tokens computed this step
    preempted: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)  # requests refused on arrival this step
    admitted: dict[str, int] = field(default_factory=dict)  # newly admitted/resumed id -> computed tokens
    num_free_blocks: int = 0

    def compared(self) -> dict:
        """The fields compared between the two sides (all but the step number)."""
        d = asdict(self)
        del d["step"]
        return d
