"""What the tuner measures through and what it hands back: the Objective (its one plug-in point:
a GPU worker, or a synthetic one in tests), a TrialReport per finished trial, a TuneResult per
case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ...kernels.config import KernelConfig
from ...kernels.shapes import Layout, ShapeClass
from ...store.measurement import Measurement


class Objective(Protocol):
    """Measures configs: one Measurement per config, in order. Failures are Measurements too."""

    def __call__(self, configs: Sequence[KernelConfig], /) -> list[Measurement]: ...


@dataclass(frozen=True)
class TrialReport:
    """One finished trial, for a progress display."""

    number: int  # the Optuna trial number
    config: KernelConfig
    measurement: Measurement
    reused: bool  # answered from the store, not measured
    done: int  # finished trials of this shape in the study
    total: int  # the number of trials asked for
    best_gbps: float  # best so far for this shape (0 when nothing ran correctly yet)


@dataclass(frozen=True)
class TuneResult:
    """What a tuning run found: the best config of this shape's study and what the run did."""

    study_name: str
    dtype: str
    shape: tuple[int, int, int]
    shape_class: ShapeClass
    config: KernelConfig
    measurement: Measurement
    trials: int  # trials this call finished (measured + reused, failed ones included)
    measured: int  # configs this call measured on the device
    reused: int  # trials answered from the store
    failed: int  # trials that ended FAIL: did not compile/launch, or gave wrong output
    elapsed_s: float
    stopped_by: str  # "trials", "timeout", "patience" or "exhausted" (every config tried)
    layout: Layout | None = None  # the strides measured on (a permute's pass); None: contiguous
