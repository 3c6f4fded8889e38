"""Static SASS instruction counts of kernel configs, per phase (nvcc and cuobjdump only, no
GPU): what a kernel change does to the instructions a thread executes, before spending device
time on it (docs/perf-notes.md, "Methods": the static count times the threads per tile bytes
matched Nsight Compute's executed count within 1% for the byte-permute kernel).

    python3 dev/sass_count.py s1_m64_n128_v4_t2_pad0_col_default_pm [KEY ...] [--arch sm_90]

A phase is the code between two barriers (BAR.SYNC; the first is the tile loop's, so phase 0
is the kernel's prologue); a phase with a backward branch holds a loop whose body runs once per
trip, so multiply by the trips the config's layout gives (the last phase also holds the tile
loop's back edge). cuobjdump
is not in every CUDA install: `pip download nvidia-cuda-cuobjdump` and unzip the wheel gives
one (put its bin/ on PATH or pass --cuobjdump).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_INSTR = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
_TARGET = re.compile(r"BRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))")


def phases(sass: str) -> list[dict[str, object]]:
    """Split one kernel's SASS at its barriers: per phase, the instruction count, the counts of
    memory instructions (LDG, STG, LDS, STS) and whether it has a backward branch (a loop)."""
    out: list[dict[str, object]] = []
    cur: dict[str, object] = {"instructions": 0, "loop": False, "memory": {}}
    for line in sass.splitlines():
        m = _INSTR.match(line)
        if not m:
            continue
        addr, op = int(m.group(1), 16), m.group(3)
        if op.startswith("BAR"):
            out.append(cur)
            cur = {"instructions": 0, "loop": False, "memory": {}}
            continue
        cur["instructions"] = int(cur["instructions"]) + 1  # type: ignore[call-overload]
        base = op.split(".")[0]
        if base in ("LDG", "STG", "LDS", "STS"):
            mem = cur["memory"]
            assert isinstance(mem, dict)
            mem[base] = mem.get(base, 0) + 1
        t = _TARGET.search(line)
        if op.startswith("BRA") and t and t.group(1) and int(t.group(1), 16) < addr:
            cur["loop"] = True
    out.append(cur)
    return out


def kernels(sass: str) -> dict[str, str]:
    """cuobjdump -sass output split per kernel (Function : name)."""
    found: dict[str, str] = {}
    name = None
    for line in sass.splitlines():
        m = re.match(r"\s+Function : (\S+)", line)
        if m:
            name = m.group(1)
            found[name] = ""
        elif name is not None:
            found[name] += line + "\n"
    return found


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("keys", nargs="+", help="config keys, as `autotranspose lookup` prints them")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump"))
    args = ap.parse_args()
    if not args.cuobjdump:
        print(
            "cuobjdump not found: pip download nvidia-cuda-cuobjdump, unzip the wheel and pass "
            "--cuobjdump PATH/nvidia/cu13/bin/cuobjdump",
            file=sys.stderr,
        )
        return 2

    from _sweep import config_by_key

    from autotranspose.kernels.codegen import render_many
    from autotranspose.runtime.compiler import NVCC_OPTIONS

    sizes = {"1": "uint8", "2": "uint16", "4": "uint32", "8": "uint64", "16": "complex128"}
    configs = [config_by_key(k, sizes[k[1:].split("_")[0]]) for k in args.keys]
    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = Path(tmp) / "k.cu", Path(tmp) / "k.cubin"
        src.write_text(render_many(configs))
        subprocess.run(
            ["nvcc", "-cubin", f"-arch={args.arch}", *NVCC_OPTIONS, str(src), "-o", str(cubin)],
            check=True,
        )
        sass = subprocess.run(
            [args.cuobjdump, "-sass", str(cubin)], check=True, capture_output=True, text=True
        ).stdout
    per_kernel = kernels(sass)
    for c in configs:
        body = per_kernel.get(c.kernel_name)
        if body is None:
            print(f"{c.key}: not in the cubin", file=sys.stderr)
            return 1
        ph = phases(body)
        total = sum(int(p["instructions"]) for p in ph)  # type: ignore[call-overload]
        print(f"{c.key}: {total} instructions, {c.threads} threads, {len(ph)} phases")
        for i, p in enumerate(ph):
            mem = " ".join(f"{k} {v}" for k, v in sorted(p["memory"].items()))  # type: ignore[union-attr]
            print(f"  phase {i}: {p['instructions']:5d}{' (loop)' if p['loop'] else ''}  {mem}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
