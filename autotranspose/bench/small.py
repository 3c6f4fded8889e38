"""`autotranspose bench --small N --seed S`: what a small call costs, as eager code sees it.

The permutes and transposes of an ML model's eager code are mostly small (kilobytes to
megabytes), where a call's time is the host's (checks, lookup, allocation, launch) as much
as the GPU's. The GB/s of `bench --random` cannot show that. Here each random case is timed
as K calls back to back and one synchronize, wall clock, host included: ours against
PyTorch's and CuPy's own on the same arrays, into a preallocated `out` and into a new array.
Each result is checked once against the peer's, byte for byte, before anything is timed.
The summary gives, per peer, the median and least speedup (peer us / ours us) and how many
calls ours was slower in.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..plans.dtypes import element_type
from .cases import SmallCase, small_cases

SMALL_CALLS = 300  # calls timed back to back, then one synchronize
SMALL_REPEATS = 5  # timed runs of SMALL_CALLS; the median is kept
SMALL_WARMUP = 20  # calls before the timing: first-call measurement and compilation are out
SMALL_PEERS = ("torch", "cupy")
FORMS = ("out", "new")
SLOWER = 1.0  # a speedup under this: ours slower
SLOWER_2PCT = 0.98  # under this: ours more than 2% slower


# --- the rows and their summary ------------------------------------------------------------------
@dataclass(frozen=True)
class SmallRow:
    """One case in one form against one peer: ours and the peer's us per call, each on the
    peer's own arrays (None where not timed, `note` says why)."""

    case: int
    op: str
    shape: tuple[int, ...]
    axes: tuple[int, ...]
    dtype: str
    form: str  # "out": into a preallocated array; "new": the call allocates its result
    nbytes: int
    peer: str
    ours_us: float | None
    peer_us: float | None
    note: str = ""

    @property
    def speedup(self) -> float | None:
        """peer us / ours us: above 1, ours is faster."""
        if self.ours_us and self.peer_us:
            return self.peer_us / self.ours_us
        return None

    def text(self) -> str:
        return SmallCase(self.op, self.shape, self.axes, self.dtype).text()


def speedup_stats(pairs: Sequence[tuple[float, str]]) -> dict[str, Any]:
    """Of (speedup, label) pairs: how many, their median and least (and the label of the
    least), and how many are under 1.0 (ours slower) and under 0.98 (more than 2% slower)."""
    out: dict[str, Any] = {"measured": len(pairs)}
    if not pairs:
        return out
    values = [v for v, _ in pairs]
    least = min(pairs, key=lambda p: p[0])
    out.update(
        median=float(np.median(values)),
        min=float(least[0]),
        worst=least[1],
        slower=sum(v < SLOWER for v in values),
        slower_2pct=sum(v < SLOWER_2PCT for v in values),
    )
    return out


def summarize_small(rows: Sequence[SmallRow]) -> dict[str, Any]:
    """Per peer, and per peer and form: speedup_stats over the calls both sides timed; a
    peer with none carries the note of why ("skipped"); `ours_failed` counts calls where
    ours raised or gave a wrong result (never timed)."""
    out: dict[str, Any] = {"cases": len({r.case for r in rows}), "peers": {}, "forms": {}}
    for peer in _peer_order(rows):
        mine = [r for r in rows if r.peer == peer]
        stats = speedup_stats(_pairs(mine))
        stats["ours_failed"] = sum(r.note.startswith("ours") for r in mine)
        if not stats["measured"]:
            stats["skipped"] = next((r.note for r in mine if r.note), "not timed")
        out["peers"][peer] = stats
        for form in FORMS:
            of_form = [r for r in mine if r.form == form]
            if of_form:
                out["forms"][f"{peer}/{form}"] = speedup_stats(_pairs(of_form))
    return out


def _pairs(rows: Sequence[SmallRow]) -> list[tuple[float, str]]:
    return [(s, f"{r.text()} {r.dtype} {r.form}") for r in rows if (s := r.speedup) is not None]


def format_small_summary(summary: dict[str, Any]) -> str:
    lines = [f"{summary['cases']} cases; speedup = peer us / ours us (above 1: ours faster)"]
    for peer, s in summary["peers"].items():
        if not s["measured"]:
            lines.append(f"  {peer:>6}: not measured ({s.get('skipped', '')})")
            continue
        lines.append(f"  {peer:>6}: {_stats_text(s)}")
        for form in FORMS:
            f = summary["forms"].get(f"{peer}/{form}")
            if f and f["measured"]:
                lines.append(f"  {'':>6}  {form:>3}: {_stats_text(f)}")
        if s["ours_failed"]:
            lines.append(f"  {'':>6}  ours failed (not timed) in {s['ours_failed']}")
    return "\n".join(lines)


def _stats_text(s: dict[str, Any]) -> str:
    return (
        f"{s['measured']} calls, speedup median {s['median']:.2f}x, min {s['min']:.2f}x "
        f"({s['worst']}); ours slower in {s['slower']}, more than 2% slower in {s['slower_2pct']}"
    )


def _by_call(rows: Sequence[SmallRow]) -> dict[tuple[int, str], dict[str, SmallRow]]:
    """(case, form) -> peer -> row, in the rows' order."""
    calls: dict[tuple[int, str], dict[str, SmallRow]] = {}
    for r in rows:
        calls.setdefault((r.case, r.form), {})[r.peer] = r
    return calls


def _peer_order(rows: Sequence[SmallRow]) -> list[str]:
    named = dict.fromkeys(r.peer for r in rows)
    return [*(p for p in SMALL_PEERS if p in named), *(p for p in named if p not in SMALL_PEERS)]


def _bytes_text(n: int) -> str:
    return f"{n / (1 << 20):.1f} MB" if n >= 1 << 20 else f"{n / 1024:.1f} KB"


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def format_small_table(rows: Sequence[SmallRow], header: bool = True) -> str:
    """One line per case and form: ours and each peer's us per call, and the speedup."""
    peers = _peer_order(rows)
    head = f"{'#':>3} {'case':<38} {'dtype':>10} {'form':>4} {'bytes':>9}"
    for p in peers:
        head += f" {'ours/' + p:>10} {p + ' us':>9} {'x' + p:>7}"
    lines = [head + "  note"] if header else []
    for (case, form), by_peer in _by_call(rows).items():
        r0 = next(iter(by_peer.values()))
        line = f"{case:>3} {r0.text():<38} {r0.dtype:>10} {form:>4} {_bytes_text(r0.nbytes):>9}"
        notes = []
        for p in peers:
            r = by_peer.get(p)
            if r is None:
                line += f" {'-':>10} {'-':>9} {'-':>7}"
                continue
            line += f" {_us(r.ours_us):>10} {_us(r.peer_us):>9} {_x(r.speedup):>7}"
            if r.note:
                notes.append(f"{p}: {r.note}")
        lines.append((line + "  " + "; ".join(notes)).rstrip())
    return "\n".join(lines)


def markdown_small_table(rows: Sequence[SmallRow], summary: dict[str, Any] | None = None) -> str:
    """The table as Markdown (speedups under 1.0 in bold), then the summary's lines."""
    peers = _peer_order(rows)
    head = ["#", "case", "dtype", "form", "bytes"]
    for p in peers:
        head += [f"ours us ({p})", f"{p} us", f"speedup vs {p}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (case, form), by_peer in _by_call(rows).items():
        r0 = next(iter(by_peer.values()))
        cols = [str(case), f"`{r0.text()}`", r0.dtype, form, _bytes_text(r0.nbytes)]
        for p in peers:
            r = by_peer.get(p)
            if r is None:
                cols += ["-", "-", "-"]
                continue
            sp = r.speedup
            cell = _x(sp) if sp is None or sp >= SLOWER else f"**{_x(sp)}**"
            cols += [_us(r.ours_us), _us(r.peer_us), cell if sp is not None else (r.note or "-")]
        lines.append("| " + " | ".join(cols) + " |")
    if summary is not None:
        lines += ["", *(f"    {ln}" for ln in format_small_summary(summary).splitlines())]
    return "\n".join(lines)


def small_rows_from_json(doc: Any) -> list[SmallRow]:
    """The rows of a `bench --small --json` file."""
    keys = set(SmallRow.__dataclass_fields__)
    return [
        SmallRow(
            **{
                **{k: v for k, v in r.items() if k in keys},
                "shape": tuple(r["shape"]),
                "axes": tuple(r["axes"]),
            }
        )
        for r in doc["rows"]
    ]


# --- timing (on the device) ----------------------------------------------------------------------
def per_call_us(fn: Callable[[], Any], sync: Callable[[], Any], calls: int) -> float:
    """Wall-clock us per call of `calls` calls back to back and one synchronize: what an eager
    loop sees, host and GPU together."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t0) / calls * 1e6


def host_data(case: SmallCase, seed: int | Sequence[int]) -> np.ndarray:
    """The case's input on the host, valid values of its type (finite normal floats, small
    integers, bools 0 or 1: peers that move values need not keep other bit patterns);
    bfloat16 as float32, converted on the device."""
    rng = np.random.default_rng(seed)
    name = element_type(case.dtype).name
    if name == "bool":
        return rng.random(case.shape) < 0.5
    if name.startswith("complex"):
        return (rng.standard_normal(case.shape) + 1j * rng.standard_normal(case.shape)).astype(name)
    if name.startswith(("float", "bfloat")):
        return rng.standard_normal(case.shape).astype("float32" if name == "bfloat16" else name)
    info = np.iinfo(name)
    lo, hi = max(int(info.min), -1000), min(int(info.max), 1000)
    return rng.integers(lo, hi, case.shape, dtype=name, endpoint=True)


@dataclass
class _Peer:
    """One library's arrays of a case and its calls, ours and its own: calls[(who, form)]
    with who "ours" or "peer"; `ptr` gives an array's device address."""

    name: str
    x: Any
    out: Any
    sync: Callable[[], Any]
    ptr: Callable[[Any], int]
    calls: dict[tuple[str, str], Callable[[], Any]]


def _torch_peer(torch: Any, case: SmallCase, data: np.ndarray, device: int) -> _Peer:
    from .._api import permute, transpose  # what users call

    dev = f"cuda:{device}"
    x = torch.from_numpy(np.ascontiguousarray(data)).to(dev)
    if case.dtype == "bfloat16":
        x = x.to(torch.bfloat16)
    out = torch.empty(case.out_shape, dtype=x.dtype, device=dev)
    axes = case.axes
    if case.op == "transpose":
        calls = {
            ("ours", "out"): lambda: transpose(x, out),
            ("ours", "new"): lambda: transpose(x),
            ("peer", "out"): lambda: out.copy_(x.transpose(-1, -2)),
            ("peer", "new"): lambda: x.transpose(-1, -2).contiguous(),
        }
    else:
        calls = {
            ("ours", "out"): lambda: permute(x, axes, out),
            ("ours", "new"): lambda: permute(x, axes),
            ("peer", "out"): lambda: out.copy_(x.permute(axes)),
            ("peer", "new"): lambda: x.permute(axes).contiguous(),
        }
    sync = lambda: torch.cuda.synchronize(dev)  # noqa: E731
    return _Peer("torch", x, out, sync, lambda t: int(t.data_ptr()), calls)


def _cupy_peer(
    cupy: Any, case: SmallCase, data: np.ndarray, device: int, shared: _Peer | None
) -> _Peer:
    """CuPy's arrays: views of the PyTorch peer's tensors where there is one (the same
    buffers), else its own copy of `data`."""
    from .._api import permute, transpose  # what users call

    with cupy.cuda.Device(device):
        if shared is not None:
            x, out = cupy.asarray(shared.x), cupy.asarray(shared.out)
        else:
            x = cupy.asarray(data)
            out = cupy.empty(case.out_shape, dtype=x.dtype)
    axes = case.axes
    if case.op == "transpose":
        calls = {
            ("ours", "out"): lambda: transpose(x, out),
            ("ours", "new"): lambda: transpose(x),
            ("peer", "out"): lambda: cupy.copyto(out, x.swapaxes(-1, -2)),
            ("peer", "new"): lambda: cupy.ascontiguousarray(x.swapaxes(-1, -2)),
        }
    else:
        calls = {
            ("ours", "out"): lambda: permute(x, axes, out),
            ("ours", "new"): lambda: permute(x, axes),
            ("peer", "out"): lambda: cupy.copyto(out, x.transpose(axes)),
            ("peer", "new"): lambda: cupy.ascontiguousarray(x.transpose(axes)),
        }
    dev = cupy.cuda.Device(device)
    return _Peer("cupy", x, out, dev.synchronize, lambda a: int(a.data.ptr), calls)


def _start(device: int) -> dict[str, Any]:
    """Make `device`'s primary context current, and `device` each library's current device
    (the peers' own new arrays are made there), then peer -> its module, or a string saying
    why it is skipped."""
    from ..runtime.compiler import activate

    activate(device)
    found: dict[str, Any] = {}
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.set_device(device)
            found["torch"] = torch
        else:
            found["torch"] = "PyTorch sees no CUDA GPU"
    except Exception as exc:  # not installed, or its CUDA libraries do not load
        found["torch"] = f"PyTorch not importable ({type(exc).__name__}: {str(exc)[:80]})"
    try:
        import cupy

        cupy.cuda.Device(device).use()
        found["cupy"] = cupy
    except Exception as exc:
        found["cupy"] = f"CuPy not usable ({type(exc).__name__}: {str(exc)[:80]})"
    return found


POISON = 0xA5


def _device_bytes(ptr: int, nbytes: int) -> np.ndarray:
    from ..runtime import driver as _driver

    got = np.empty(nbytes, np.uint8)
    _driver.memcpy_dtoh(got.ctypes.data, ptr, nbytes)
    return got


def _check(peer: _Peer, case: SmallCase, form: str) -> str | None:
    """Ours in `form` against the peer's new array, byte for byte (into a poisoned `out` for
    the out form); None when equal, else what is wrong."""
    from ..runtime import driver as _driver

    nbytes = case.nbytes
    want = peer.calls[("peer", "new")]()
    peer.sync()
    ref = _device_bytes(peer.ptr(want), nbytes)
    if form == "out":
        _driver.memset_d8(peer.ptr(peer.out), POISON, nbytes)
        peer.sync()
        peer.calls[("ours", "out")]()
        peer.sync()
        got = _device_bytes(peer.ptr(peer.out), nbytes)
    else:
        result = peer.calls[("ours", "new")]()
        peer.sync()
        if type(result) is not type(want) or tuple(result.shape) != case.out_shape:
            return f"ours returned {type(result).__name__} {tuple(result.shape)}"
        if str(result.dtype) != str(want.dtype):
            return f"ours returned {result.dtype}, the peer {want.dtype}"
        got = _device_bytes(peer.ptr(result), nbytes)
    bad = int(np.count_nonzero(got != ref))
    return f"wrong result: {bad} of {nbytes} bytes differ from the peer's" if bad else None


def _problem(exc: Exception) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:160]


def time_small_case(
    index: int,
    case: SmallCase,
    libs: dict[str, Any],
    *,
    device: int = 0,
    seed: int | Sequence[int] = 0,
    calls: int = SMALL_CALLS,
    repeats: int = SMALL_REPEATS,
    warmup: int = SMALL_WARMUP,
) -> list[SmallRow]:
    """One row per peer and form: each call checked, warmed up, then timed `repeats` times
    (ours and the peers' interleaved, run by run), the median kept."""
    data = host_data(case, seed)
    peers: dict[str, _Peer | str] = {}
    for name in SMALL_PEERS:
        lib = libs.get(name, f"{name}: unknown peer")
        if isinstance(lib, str):
            peers[name] = lib
            continue
        if name == "cupy" and case.dtype == "bfloat16":
            peers[name] = "CuPy has no bfloat16"
            continue
        try:
            if name == "torch":
                peers[name] = _torch_peer(lib, case, data, device)
            else:
                shared = peers.get("torch")
                shared = shared if isinstance(shared, _Peer) else None
                peers[name] = _cupy_peer(lib, case, data, device, shared)
        except Exception as exc:  # a type the library lacks, say
            peers[name] = f"{name} could not hold the case: {_problem(exc)}"
    notes: dict[tuple[str, str], str] = {}
    timers: dict[tuple[str, str, str], tuple[Callable[[], Any], Callable[[], Any]]] = {}
    for name, peer in peers.items():
        if isinstance(peer, str):
            continue
        for form in FORMS:
            try:  # the peer's own call first: it is the reference
                peer.calls[("peer", form)]()
                peer.sync()
            except Exception as exc:
                notes[(name, form)] = f"{name}: {_problem(exc)}"
                continue
            timers[(name, form, "peer")] = (peer.calls[("peer", form)], peer.sync)
            try:
                problem = _check(peer, case, form)
            except Exception as exc:
                problem = _problem(exc)
            if problem:
                notes[(name, form)] = f"ours: {problem}"
                continue
            timers[(name, form, "ours")] = (peer.calls[("ours", form)], peer.sync)

    def failed(key: tuple[str, str, str], exc: Exception) -> None:
        """A call that passed its check and raised later: dropped, with a note."""
        del timers[key]
        who = "ours" if key[2] == "ours" else key[0]
        notes[(key[0], key[1])] = f"{who}: {_problem(exc)}"

    for key, (fn, sync) in list(timers.items()):
        try:
            for _ in range(warmup):
                fn()
            sync()
        except Exception as exc:
            failed(key, exc)
    gc.collect()
    samples: dict[tuple[str, str, str], list[float]] = {key: [] for key in timers}
    for _ in range(repeats):
        for key, (fn, sync) in list(timers.items()):
            try:
                samples[key].append(per_call_us(fn, sync, calls))
            except Exception as exc:
                failed(key, exc)
                del samples[key]
    rows = []
    for name in SMALL_PEERS:
        for form in FORMS:
            peer = peers[name]
            note = peer if isinstance(peer, str) else notes.get((name, form), "")
            us = {
                who: float(np.median(samples[(name, form, who)]))
                if (name, form, who) in samples
                else None
                for who in ("ours", "peer")
            }
            rows.append(
                SmallRow(
                    index,
                    case.op,
                    case.shape,
                    case.axes,
                    case.dtype,
                    form,
                    case.nbytes,
                    name,
                    us["ours"],
                    us["peer"],
                    note,
                )
            )
    return rows


def run_small(args: Any) -> int:
    """`bench --small N --seed S [--dtypes ...] [--repeat R]`: every case timed and printed
    as it finishes, then the whole table and the summary; --json and --markdown written."""
    dtypes = getattr(args, "dtypes", None)
    seed = int(getattr(args, "seed", 0) or 0)
    device = int(getattr(args, "device", 0) or 0)
    repeats = getattr(args, "repeat", None) or SMALL_REPEATS
    cases = small_cases(args.small, seed, dtypes)
    libs = _start(device)
    of = "" if dtypes is None else f", dtypes {' '.join(dtypes)}"
    print(
        f"{len(cases)} small cases, seed {seed}{of}: host-included us per call, "
        f"{SMALL_CALLS} calls then one synchronize, median of {repeats} runs",
        flush=True,
    )
    for name, lib in libs.items():
        if isinstance(lib, str):
            print(f"  {name} skipped: {lib}", flush=True)
    rows: list[SmallRow] = []
    for i, case in enumerate(cases):
        case_rows = time_small_case(i, case, libs, device=device, seed=[seed, i], repeats=repeats)
        rows.extend(case_rows)
        print(format_small_table(case_rows, header=i == 0), flush=True)
    summary = summarize_small(rows)
    print()
    print(format_small_table(rows))
    print()
    print(format_small_summary(summary))
    versions = {
        n: getattr(lib, "__version__", "?") if not isinstance(lib, str) else lib
        for n, lib in libs.items()
    }
    if getattr(args, "json", None):
        doc = {
            "rows": [{**asdict(r), "speedup": r.speedup} for r in rows],
            "summary": summary,
            "small": args.small,
            "seed": seed,
            "dtypes": dtypes,
            "calls": SMALL_CALLS,
            "repeats": repeats,
            "peers": versions,
        }
        Path(args.json).write_text(json.dumps(doc, indent=1))
    if getattr(args, "markdown", None):
        Path(args.markdown).write_text(markdown_small_table(rows, summary) + "\n")
    return 0
