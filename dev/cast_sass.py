"""Static SASS instruction counts of cast kernels (nvcc and cuobjdump only, no GPU): per
config, the instructions of the compiled kernel, per phase (between barriers), and that count
times the block's threads over the bytes a full tile moves (read + written): the static
instructions a byte (docs/perf-notes.md, "Methods"; edge paths are counted too, so it is an
upper bound on what an interior tile executes).

    python3 dev/cast_sass.py [f32_e4m3 bf16_e4m3 ...] [--both] [--arch sm_90]
        [--cuobjdump PATH]

Configs: each named pair's defaults (`--set`: with fields replaced). `--hot` counts instead the path an interior tile takes
on aligned rows: the copy compiled here (only) has the tile's extent as constants, every row's
offset 0, y's rows aligned and z not written (`--both`: written), so the edge and realignment
branches fold away; `--hot odd` keeps the rows' offsets and takes the store's funnel path for
y's rows (its count still holds the realignment branches an interior tile may skip).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sass_count import kernels, phases

from autotranspose.kernels.codegen import render_many
from autotranspose.kernels.config import KernelConfig
from autotranspose.kinds import cast
from autotranspose.runtime.compiler import NVCC_OPTIONS


def configs(codes: list[str], fields: dict[str, int]) -> list[KernelConfig]:
    """Each pair's default, with `fields` replaced (--set)."""
    out = []
    for code in codes:
        src, dst = cast.PAIRS[code]
        c = cast.default(KernelConfig, src, dst).replace(**fields)
        if c.smem_bytes > 48 * 1024:
            print(f"{c.key}: {c.smem_bytes} bytes of shared memory, past 48 KiB", file=sys.stderr)
        elif c not in out:
            out.append(c)
    return out


def specialise(text: str, hot: str, both: bool) -> str:
    """The source made into an interior tile's hot path (see the module's doc): the copy
    compiled here has the tile's extent as constants, and for `aligned` every row's offset 0,
    y's rows aligned and z written or not (`both`); `odd` keeps the offsets and takes y's
    funnel-shifted store path."""
    subs = [
        (r"const int rows = \(int\)min\(\(i64\)(\d+), a\.M - m0\);", r"const int rows = \1;"),
        (r"const int cols = \(int\)min\(\(i64\)(\d+), a\.N - n0\);", r"const int cols = \1;"),
        (r"unsigned char\* const z = a\.z \?", "unsigned char* const z = %s ?" % (
            "a.z" if both else "false")),
        # an interior tile: z's words whole in the matrix, none cut by its first or last column
        (r"const int zend = \(int\)min\(\(i64\)(\d+), a\.N - n0\);", r"const int zend = \1;"),
        (r"if \(zd && \(n0 == 0 \|\| zend < \d+\)\)", "if (false)"),
    ]  # fmt: skip
    # the kernel's own test for an interior tile of word-aligned rows (the `_whole` function)
    whole = r"if \(a\.M - m0 >= \d+ && a\.N - n0 >= \d+\n\s*&& .*?\) == 0\)"
    y_aligned = r"if \(\(\(u32\)\(u64\)y & 15u\) == 0 && \(\(u32\)ld_y & 15u\) == 0\)"
    if hot == "aligned":  # the template's own path for such a tile, inlined, y's rows aligned
        subs += [
            (whole, "if (true)"),
            (r"__device__ __noinline__ void", "__device__ __forceinline__ void"),
            (y_aligned, "if (true)"),
        ]  # fmt: skip
    else:  # the general path with the rows' offsets at run time, y's funnel path
        subs += [(whole, "if (false)"), (y_aligned, "if (false)")]
    for pattern, repl in subs:
        text, n = re.subn(pattern, repl, text)
        assert n, f"the template changed: {pattern} not found"
    return text


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("codes", nargs="*", default=["f32_e4m3", "bf16_e4m3", "f32_bf16"])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--hot", nargs="?", const="aligned", choices=["aligned", "odd"])
    ap.add_argument("--both", action="store_true", help="with --hot: z written too")
    ap.add_argument("--set", default="", help="fields to replace, e.g. tile_n=128,per_thread=8")
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump"))
    args = ap.parse_args()
    if not args.cuobjdump:
        print("cuobjdump not found (see dev/sass_count.py)", file=sys.stderr)
        return 2
    fields = {k: int(v) for k, v in (f.split("=") for f in args.set.split(",") if f)}
    cfgs = configs(args.codes, fields)
    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = Path(tmp) / "k.cu", Path(tmp) / "k.cubin"
        text = render_many(cfgs)
        if args.hot:
            text = specialise(text, args.hot, args.both)
        src.write_text(text)
        subprocess.run(
            ["nvcc", "-cubin", f"-arch={args.arch}", *NVCC_OPTIONS, "-Xptxas", "-v", str(src),
             "-o", str(cubin)],
            check=True,
        )  # fmt: skip
        sass = subprocess.run(
            [args.cuobjdump, "-sass", str(cubin)], check=True, capture_output=True, text=True
        ).stdout
    per_kernel = kernels(sass)
    for c in cfgs:
        s, d = cast.PAIRS[c.params.pair]
        ph = phases(per_kernel[c.kernel_name])
        total = sum(int(p["instructions"]) for p in ph)  # type: ignore[call-overload]
        elems = c.tile_m * c.tile_n
        for both in (False, True):
            traffic = elems * (s.size + d.size * (2 if both else 1))
            print(
                f"{c.key}: {total} instructions x {c.threads} threads / {traffic} bytes"
                f"{' (both)' if both else ''} = {total * c.threads / traffic:.2f} a byte"
            )
        for i, p in enumerate(ph):
            mem = " ".join(f"{k} {v}" for k, v in sorted(p["memory"].items()))  # type: ignore[union-attr]
            print(f"  phase {i}: {p['instructions']:5d}{' (loop)' if p['loop'] else ''}  {mem}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
