"""What hardware can do: the range every number of an imported tuning file must lie in, and
every number read back from the database (a row is as untrusted as a file).

A tuning file is untrusted input whose numbers compete with measured ones: a bandwidth no GPU
reaches would become a best that no real run ever beats, and a nonsense device field would
overwrite the device's row. So each number is bounded by what GPUs do, with room for several
generations to come (a file from a future GPU must still import), and always within the range of
the database column it goes to. Bounds live here, in one place, with the reason for each.
"""

from __future__ import annotations

import math
from typing import Any

from ..runtime.device import DeviceInfo

# Bandwidths count bytes read plus bytes written (see Measurement). The fastest memory today,
# B200/B300's HBM3e, moves 8 TB/s: 100 TB/s leaves room for a dozen times that.
MAX_GBPS = 100_000.0

# A transpose moves exactly the bytes of the copy it is compared with, so it cannot beat that
# copy by much: measured at most 1.12x (small shapes on H100, BENCHMARKS.md). 4x is no kernel.
MAX_RATIO = 4.0

# Export writes GB/s with 3 decimals and ratios with 4 (so that files diff cleanly); the ratio
# of a file must equal gbps / copy_gbps up to that rounding, plus float noise.
GBPS_DECIMALS = 3
RATIO_DECIMALS = 4
RATIO_REL_TOLERANCE = 1e-3

# One matrix no GPU could hold: B300 carries 288 GB, and a transpose needs input and output.
# 4 TiB is 15 times that.
MAX_MATRIX_BYTES = 1 << 42

# Device fields: (least, most). 0 is "unknown" for the fields a GPU need not report (rows made
# before a field existed read 0). Every bound is inside the column (Integer: int32; l2_bytes:
# BigInteger).
DEVICE_FIELDS: dict[str, tuple[int, int]] = {
    "multiprocessors": (0, 4096),  # B200: 148 SMs
    "memory_clock_khz": (0, 100_000_000),  # GDDR7 reports 14 GHz, HBM3e 3.2 GHz
    "bus_width_bits": (0, 65_536),  # B200: 8192 bits of HBM
    "l2_bytes": (0, 1 << 34),  # B200: 126 MiB; 16 GiB is a hundred times that
    "driver_version": (0, 999_999),  # CUDA encodes 13.0 as 13000
    "cuda_version": (0, 999_999),
    "max_threads_per_block": (32, 8192),  # 1024 on every GPU since 2010; a warp at least
    "max_shared_per_block": (1024, 1 << 24),  # 48 KiB today (227 KiB opt-in)
}


def check_device(device: DeviceInfo) -> None:
    """Raise ValueError naming the first device field outside what a GPU has."""
    for name, (least, most) in DEVICE_FIELDS.items():
        value = getattr(device, name)
        if type(value) is not int or not least <= value <= most:
            raise ValueError(f"{name} {value!r:.40} is outside {least}..{most}, what any GPU has")


def check_bandwidth(name: str, value: Any) -> float:
    """A bandwidth in GB/s, 0 to MAX_GBPS (0: not measured, as a Measurement says it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    x = float(value)
    if not (0 <= x <= MAX_GBPS):  # also refuses NaN
        raise ValueError(
            f"{name} {value!r:.40} is outside what any GPU moves (0 to {MAX_GBPS:.0f} GB/s)"
        )
    return x


def check_ratio(value: Any, gbps: float, copy_gbps: float) -> float:
    """The ratio of a result: gbps / copy_gbps as exported (rounded; 0 without a copy), at
    most MAX_RATIO."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"ratio must be a number, got {type(value).__name__}")
    x = float(value)
    if not (0 <= x <= MAX_RATIO):
        raise ValueError(
            f"ratio {value!r:.40} is outside what a transpose does (0 to {MAX_RATIO:g} times "
            "its copy)"
        )
    if copy_gbps == 0:
        if x != 0:
            raise ValueError(f"ratio {value!r:.40} must be 0 when copy_gbps is 0 (not measured)")
        return x
    # gbps and copy_gbps were rounded on export: the true ratio lies in this interval
    half = 0.5 * 10.0**-GBPS_DECIMALS
    lo = max(gbps - half, 0.0) / (copy_gbps + half)
    hi = (gbps + half) / (copy_gbps - half) if copy_gbps > half else math.inf
    slack = 0.5 * 10.0**-RATIO_DECIMALS + RATIO_REL_TOLERANCE * x
    if not lo - slack <= x <= hi + slack:
        raise ValueError(
            f"ratio {value!r:.40} is not gbps / copy_gbps ({gbps!r} / {copy_gbps!r} = "
            f"{gbps / copy_gbps:.4f})"
        )
    return x


def check_shape(shape: tuple[int, int, int], elem_bytes: int) -> None:
    """A measured shape whose matrix fits some GPU's memory."""
    size = shape[0] * shape[1] * shape[2] * elem_bytes
    if size > MAX_MATRIX_BYTES:
        raise ValueError(
            f"shape {list(shape)} of {elem_bytes}-byte elements is {size / 2**40:.3g} TiB, more "
            f"than any GPU holds (at most {MAX_MATRIX_BYTES >> 40} TiB)"
        )
