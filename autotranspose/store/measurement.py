"""The Measurement record: what measuring a config produced, as plain data.

It lives apart from `measure` (the GPU timing code) because three layers share it: `measure`
and the worker produce it, the tuner decides on it, and the store keeps it. The store runs on
machines without a GPU, so this module imports nothing beyond the standard library.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

STATUSES = ("ok", "fail", "wrong")


@dataclass(frozen=True)
class Measurement:
    """One config measured on one (device, element size, shape).

    `status` is "ok" (correct, timed), "wrong" (its output differed from the reference: never
    recorded as fast) or "fail" (did not compile or launch; `error` says why). Bandwidths count
    bytes read plus bytes written; `copy_gbps` is a device-to-device copy of the same bytes,
    timed in the same process, so `ratio` = gbps / copy_gbps is comparable across runs.
    """

    status: str
    gbps: float = 0.0
    copy_gbps: float = 0.0
    time_us: float = math.inf
    error: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        for name in ("gbps", "copy_gbps"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def ratio(self) -> float:
        return self.gbps / self.copy_gbps if self.copy_gbps > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
