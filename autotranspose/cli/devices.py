"""`autotranspose devices`: the local GPUs (needs pycuda), and a local GPU by its index."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from .output import UsageError, table


def local_device(index: int) -> Any:
    """Local GPU `index` (a `DeviceInfo`); a usage error when this machine has no such GPU."""
    from ..runtime.compiler import list_devices

    devices = list_devices()
    if not 0 <= index < len(devices):
        raise UsageError(f"--device {index}: this machine has {len(devices)} GPU(s)")
    return devices[index]


def cmd_devices(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ..runtime.compiler import list_devices

    devices = list_devices()
    if args.json:
        json.dump([{**d.to_dict(), "slug": d.slug, "arch": d.arch} for d in devices], out, indent=2)
        out.write("\n")
        return 0
    rows = [
        [i, d.name, d.arch, d.multiprocessors, f"{d.peak_bandwidth_gbps:.0f}", d.slug]
        for i, d in enumerate(devices)
    ]
    print(table(["#", "name", "arch", "SMs", "peak GB/s", "slug"], rows), file=out)
    return 0
