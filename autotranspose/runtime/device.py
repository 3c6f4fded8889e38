"""DeviceInfo: which GPU a result belongs to. Querying a live device needs pycuda; the record
itself does not, so `show --device "NVIDIA H100 80GB HBM3"` works on any machine."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import DeviceError
from ..kernels.config import STATIC_SHARED_MAX, DeviceLimits, shared_optin


@dataclass(frozen=True)
class DeviceInfo:
    """A GPU as the tuning database records it. `name` is the model name the driver reports."""

    name: str
    compute_capability: tuple[int, int]
    multiprocessors: int = 0
    memory_clock_khz: int = 0
    bus_width_bits: int = 0
    l2_bytes: int = 0
    driver_version: int = 0
    cuda_version: int = 0
    max_threads_per_block: int = 1024
    max_shared_per_block: int = 48 * 1024

    def __post_init__(self) -> None:
        check_name(self.name)
        cc = tuple(self.compute_capability)
        if len(cc) != 2 or not all(type(x) is int and 0 <= x < 100 for x in cc):
            raise DeviceError(f"compute capability must be (major, minor), got {cc!r}")
        object.__setattr__(self, "compute_capability", cc)

    @property
    def arch(self) -> str:
        """nvcc's name for the architecture, e.g. sm_90."""
        return "sm_{}{}".format(*self.compute_capability)

    @property
    def slug(self) -> str:
        """File-name form of the model name: NVIDIA_H100_80GB_HBM3."""
        return re.sub(r"[^A-Za-z0-9]+", "_", self.name).strip("_")

    @property
    def peak_bandwidth_gbps(self) -> float:
        """Datasheet-style DRAM bandwidth (double data rate), a lead only: we measure copy."""
        return 2 * self.memory_clock_khz * 1e3 * self.bus_width_bits / 8 / 1e9

    @property
    def limits(self) -> DeviceLimits:
        return DeviceLimits(
            self.max_threads_per_block,
            min(self.max_shared_per_block, STATIC_SHARED_MAX),
            self.name,
            self.compute_capability,
            shared_optin(self.compute_capability),
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["compute_capability"] = list(self.compute_capability)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceInfo:
        """From untrusted data (a database row, an imported file): unknown keys are rejected."""
        fields = set(cls.__dataclass_fields__)
        unknown = set(data) - fields
        if unknown:
            raise DeviceError(f"unknown device field(s) {sorted(unknown)}; known: {sorted(fields)}")
        kwargs = dict(data)
        for k, v in kwargs.items():
            if k not in ("name", "compute_capability") and type(v) is not int:
                raise DeviceError(f"device field {k!r} must be an int, got {v!r:.40}")
        if "compute_capability" in kwargs:
            kwargs["compute_capability"] = tuple(kwargs["compute_capability"])
        return cls(**kwargs)


_NAME = re.compile(r"[A-Za-z0-9 _\-.()]{1,100}")


def check_name(name: Any) -> str:
    """`name` if it can be a GPU model name; the one rule for names from the command line,
    the database and imported files. The error shows the name escaped (ascii()), so control
    characters in it never reach a terminal."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise DeviceError(
            f"device name {ascii(name)[:80]} is not a GPU model name (letters, digits, spaces "
            "and -_.() only, at most 100 characters); give the name as `autotranspose devices` "
            "or `autotranspose show` prints it, e.g. 'NVIDIA H100 80GB HBM3'"
        )
    return name


def query_device(device: Any) -> DeviceInfo:
    """DeviceInfo of a pycuda Device."""
    import pycuda.driver as drv

    a = drv.device_attribute
    get = device.get_attribute
    return DeviceInfo(
        name=device.name(),
        compute_capability=device.compute_capability(),
        multiprocessors=get(a.MULTIPROCESSOR_COUNT),
        memory_clock_khz=get(a.MEMORY_CLOCK_RATE),
        bus_width_bits=get(a.GLOBAL_MEMORY_BUS_WIDTH),
        l2_bytes=get(a.L2_CACHE_SIZE),
        driver_version=drv.get_driver_version(),
        cuda_version=drv.get_version()[0] * 1000 + drv.get_version()[1] * 10,
        max_threads_per_block=get(a.MAX_THREADS_PER_BLOCK),
        max_shared_per_block=get(a.MAX_SHARED_MEMORY_PER_BLOCK),
    )
