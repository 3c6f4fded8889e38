"""What the store hands out: the best entries it serves (`TunedEntry`), the rows it could not
(`RowProblem`, `BadRowWarning`), and where a result came from (`SOURCES`).

Plain data, shared by the store's reads, its imports and the text form (`textio`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..kernels.config import KernelConfig
from ..kernels.shapes import ShapeClass
from ..runtime.device import DeviceInfo

# Where a result came from: a tuning run (or an import of one), or a first call's portfolio
# (`autotranspose.dispatch.winners`). A tuned result always outranks a measured one (`writes.replaces`).
SOURCES = ("tuned", "measured")


class BadRowWarning(UserWarning):
    """A database row failed validation and was skipped (see :meth:`Store.problems`)."""


@dataclass(frozen=True)
class TunedEntry:
    """The best known config of one (device, element size, shape class, problem), as lookup
    serves it. `problem` is "" for a transpose, else a cast-transpose's
    (`kinds.cast.problem`: its pair, and whether the same-order output is written).

    `stale` is true when the entry was measured with another template version than the running
    code's: it describes kernels that no longer exist and is listed but never served. `source`
    is "tuned" (a tuning run) or "measured" (a first call's portfolio, see SOURCES).
    """

    device: str
    elem_bytes: int
    shape_class: ShapeClass
    config: KernelConfig
    gbps: float
    copy_gbps: float
    ratio: float
    template_version: str
    stale: bool
    updated_at: datetime
    shape: tuple[int, int, int] | None = None  # the shape it was measured on
    dtype: str | None = None
    measured_at: datetime | None = None
    source: str = "tuned"
    problem: str = ""

    @property
    def key(self) -> tuple[int, str, str]:
        """What makes an entry one of a kind in a file or a device's bests."""
        return (self.elem_bytes, str(self.shape_class), self.problem)


ImportedFile = tuple[DeviceInfo, Sequence[TunedEntry], str]  # device, entries, file name


@dataclass(frozen=True)
class RowProblem:
    """A row that failed validation: which table, which id, and why."""

    table: str
    row_id: int
    reason: str

    def __str__(self) -> str:
        return f"{self.table} row {self.row_id}: {self.reason}"

    @property
    def fix(self) -> str:
        """What the user can do about the row: a bad row is never served, and stays in the
        database until they act (nothing tuned is deleted behind their back)."""
        if self.table == "at_best":
            return (
                "tune its class again with more --trials (any valid result replaces it) or "
                f"delete the row (DELETE FROM at_best WHERE id = {self.row_id})"
            )
        if self.table == "at_devices":
            return "tune on that GPU or import its tuning file (either rewrites the row)"
        return f"delete the row (DELETE FROM {self.table} WHERE id = {self.row_id})"
