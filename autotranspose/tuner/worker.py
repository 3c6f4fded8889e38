"""The GPU objective: configs measured in a worker process that is restarted when it dies.

A candidate kernel can corrupt its CUDA context (an illegal address, say); after that every
CUDA call in the process fails. Measuring in a separate process keeps the tuner alive: the
crashing config is recorded as a failure, a fresh worker takes the rest.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import AutotransposeError, CudaUnavailableError, DeviceError, TuningError
from ..kernels.config import KernelConfig
from ..kernels.shapes import Layout, check_layout
from ..plans.dtypes import element_type
from ..runtime.device import DeviceInfo
from ..store.measurement import Measurement

_CTX = mp.get_context("spawn")
# The exit status of a measuring process that found itself re-running the caller's script.
_UNGUARDED_EXIT = 78
_GUARD = 'put the call under `if __name__ == "__main__":`'


def refuse_unguarded_main() -> None:
    """Stop a process multiprocessing is still starting: spawn re-imports the parent's
    script, and a script that tunes at its top level would start measuring processes without
    end (Python stops that with a long RuntimeError). Say it in one line instead; the parent
    sees the exit status and names the fix."""
    if getattr(mp.current_process(), "_inheriting", False):  # as multiprocessing's own check
        print(
            "autotranspose: the measuring process re-ran a script that tunes at its top level; "
            f"{_GUARD}",
            file=sys.stderr,
        )
        raise SystemExit(_UNGUARDED_EXIT)


def _worker_main(
    conn: Any,
    dtype: str,
    shape: tuple[int, int, int],
    device_index: int,
    layout: Layout | None = None,
    cast: tuple[str, bool] | None = None,
    inplace: bool = False,
) -> None:
    from ..runtime.compiler import activate
    from .measure import context_is_dead

    try:
        state = activate(device_index)
        if cast is not None:
            measure: Any = _CastMeasure(state, shape, *cast)
        elif inplace:
            measure = _InplaceMeasure(state, element_type(dtype).size, shape)
        else:
            measure = _Measure.transpose(state, element_type(dtype).size, shape, layout)
    except Exception as exc:
        conn.send(("error", _startup_error(exc)))
        return
    conn.send(("ready", state.info.to_dict()))
    while True:
        try:
            kind, payload = conn.recv()
        except EOFError:
            return
        if kind == "close":
            return
        configs = [KernelConfig.from_dict(d) for d in payload]
        failed = measure.precompile(configs)
        if kind == "compile":
            conn.send(("compiled", {c.key: str(e)[:2000] for c, e in failed.items()}))
            continue
        copy_gbps = measure.copy_gbps()
        for cfg in configs:
            if cfg in failed:
                m = Measurement("fail", copy_gbps=copy_gbps, error=str(failed[cfg])[:2000])
            else:
                m = measure(cfg, copy_gbps)
            dead = m.status == "fail" and context_is_dead(state)
            conn.send(("result", cfg.key, m.to_dict(), dead))
            if dead:  # the context is gone: let the parent start a fresh worker
                conn.close()
                os._exit(3)


_DEVICE_ERRORS = {cls.__name__: cls for cls in (DeviceError, CudaUnavailableError)}


def _startup_error(exc: Exception) -> tuple[str, str]:
    """What a worker that could not start tells its parent: the class's name where the parent
    raises the same (what this machine lacks: pycuda, a driver, a GPU), and the message. Our
    own messages travel without their class's name, another library's with it (it says which
    kind of failure it is)."""
    if type(exc).__name__ in _DEVICE_ERRORS:
        return type(exc).__name__, str(exc)
    if isinstance(exc, AutotransposeError):
        return "", str(exc)
    return "", f"{type(exc).__name__}: {exc}"


def _startup_failure(payload: tuple[str, str]) -> AutotransposeError:
    name, message = payload
    if name in _DEVICE_ERRORS:
        return _DEVICE_ERRORS[name](message)  # as when measuring in this process
    return TuningError(f"the measuring process could not start: {message}")


class _Measure:
    """A transpose case's measuring (`measure.Bench`, on a layout's strides where given):
    each config one launch, its kernel compiled by codegen's precompile. The cases below
    measure other configs on benches of their own, each with a copy ceiling of its bytes."""

    def __init__(self, state: Any, bench: Any) -> None:
        self.state, self.bench = state, bench

    @classmethod
    def transpose(
        cls, state: Any, elem_bytes: int, shape: tuple[int, int, int], layout: Layout | None
    ) -> _Measure:
        from .measure import Bench

        return cls(state, Bench(state, elem_bytes, shape, layout))

    def precompile(self, configs: Sequence[KernelConfig]) -> dict[KernelConfig, Exception]:
        """The configs whose kernels failed to compile, with their errors (the rest loaded)."""
        from ..runtime.compiler import precompile

        return precompile(self.state, configs)

    def copy_gbps(self) -> float:
        return self.bench.gbps(self.bench.copy_time())

    def __call__(self, cfg: KernelConfig, copy_gbps: float) -> Measurement:
        from .measure import measure_one

        return measure_one(self.bench, cfg, copy_gbps)


class _CastMeasure(_Measure):
    """A cast-transpose case's measuring (`castmeasure`): its bench and the pair's default
    config, the reference every candidate's bytes must equal."""

    def __init__(self, state: Any, shape: tuple[int, int, int], code: str, both: bool) -> None:
        from ..kinds import cast as cast_kind
        from .castmeasure import CastBench

        super().__init__(state, CastBench(state, code, shape, both))
        src, dst = cast_kind.PAIRS[code]
        self.reference = cast_kind.default(KernelConfig, src, dst)

    def __call__(self, cfg: KernelConfig, copy_gbps: float) -> Measurement:
        from .castmeasure import measure_cast

        return measure_cast(self.bench, cfg, self.reference, copy_gbps)


class _InplaceMeasure(_Measure):
    """An in-place transpose case's measuring (`inplacemeasure`): each config a program of
    passes whose kernels the bench compiles (codegen renders no in-place config), its result
    checked against NumPy's transpose of the input."""

    def __init__(self, state: Any, elem_bytes: int, shape: tuple[int, int, int]) -> None:
        from .inplacemeasure import InplaceBench

        super().__init__(state, InplaceBench(state, elem_bytes, shape))

    def precompile(self, configs: Sequence[KernelConfig]) -> dict[KernelConfig, Exception]:
        return self.bench.precompile(configs)

    def __call__(self, cfg: KernelConfig, copy_gbps: float) -> Measurement:
        from .inplacemeasure import measure_inplace

        return measure_inplace(self.bench, cfg, copy_gbps)


class GpuObjective:
    """`objective(configs) -> [Measurement]` on a real GPU, for the tuner.

    Each call checks every config on fresh random data into a poisoned output, then times it
    with CUDA events against a device-to-device copy of the same bytes (see measure.Bench).
    With a `layout` (ld_in, ld_out, bs_in, bs_out in elements; None: contiguous) it measures
    one launch with those strides, in buffers as large as their extent: a permute's strided
    transpose pass as permute() runs it. A bad layout is a LayoutError before any process
    starts. With `cast` (a pair's code and whether the same-order output is written) it
    measures cast-transposes of a contiguous (batch, m, n) input instead (`castmeasure`):
    each config's bytes against the pair's default config's, then its time. With `inplace`
    it measures in-place transposes of a contiguous (batch, m, n) matrix (`inplacemeasure`):
    each in-place config's program of passes (what transpose_() runs with its parameters),
    its result against NumPy's transpose of the matrix, then its time.
    """

    def __init__(
        self,
        dtype: str,
        shape: tuple[int, int, int],
        device_index: int = 0,
        *,
        conjugate: bool = False,
        timeout_s: float = 120.0,
        layout: Layout | tuple[int, int, int, int] | None = None,
        cast: tuple[str, bool] | None = None,
        inplace: bool = False,
    ) -> None:
        if inplace and (cast is not None or layout is not None):
            raise TuningError(
                "inplace=True measures in-place transposes of a contiguous matrix: give "
                "neither cast nor layout with it"
            )
        self.dtype, self.shape, self.device_index = dtype, tuple(shape), device_index
        self.cast, self.inplace = cast, inplace
        self.layout = check_layout(self.shape, layout)  # type: ignore[arg-type]
        self.conjugate = conjugate
        self.timeout_s = timeout_s
        self.restarts = 0
        self._proc: Any = None
        self._conn: Any = None
        refuse_unguarded_main()
        self.device: DeviceInfo = self._start()

    def _start(self) -> DeviceInfo:
        parent, child = _CTX.Pipe()
        proc = _CTX.Process(
            target=_worker_main,
            args=(
                child,
                self.dtype,
                self.shape,
                self.device_index,
                self.layout,
                self.cast,
                self.inplace,
            ),
            daemon=True,
        )
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        try:
            kind, payload = self._recv()
        except (EOFError, OSError):  # it died before a word: say why, if we know
            proc.join(10)
            code = proc.exitcode
            self.close()
            if code == _UNGUARDED_EXIT:
                raise TuningError(
                    "the measuring process could not start: this script tunes at its top level, "
                    "and the process, started with multiprocessing's spawn method, imports the "
                    f"script again; {_GUARD}"
                ) from None
            raise TuningError(
                f"the measuring process exited before it was ready (exit status {code}); its "
                "error is printed above"
            ) from None
        if kind != "ready":
            self.close()
            raise _startup_failure(payload)
        return DeviceInfo.from_dict(payload)

    def _recv(self) -> tuple[str, Any]:
        if not self._conn.poll(self.timeout_s):
            raise TimeoutError(f"no answer from the measuring process in {self.timeout_s:.0f} s")
        return self._conn.recv()

    def _restart(self) -> None:
        self.close()
        self.restarts += 1
        self._start()

    def _send(self, message: tuple[str, Any]) -> None:
        """Send to the worker; one that died since its last answer (killed, or gone with its
        context) is restarted and sent to once more."""
        try:
            self._conn.send(message)
        except OSError:  # BrokenPipeError: nobody reads the other end any more
            self._restart()
            self._conn.send(message)

    def precompile(self, configs: Sequence[KernelConfig]) -> None:
        """Compile ahead of measuring (several kernels per nvcc call, calls in parallel)."""
        self._send(("compile", [c.to_dict() for c in configs]))
        self._recv()

    def __call__(self, configs: Sequence[KernelConfig]) -> list[Measurement]:
        results: dict[str, Measurement] = {}
        todo = list(configs)
        while todo:
            self._send(("measure", [c.to_dict() for c in todo]))
            for cfg in list(todo):
                try:
                    _, key, m, dead = self._recv()
                except (EOFError, OSError, TimeoutError) as exc:
                    reason = (
                        "the measuring process died (the kernel corrupted its CUDA context?)"
                        if not isinstance(exc, TimeoutError)
                        else f"timed out ({exc})"
                    )
                    results[cfg.key] = Measurement("fail", error=f"{cfg.key}: {reason}")
                    todo.remove(cfg)
                    self._restart()
                    break
                results[key] = Measurement(**m)
                todo.remove(cfg)
                if dead:  # the worker exits after this answer
                    self._proc.join(10)
                    self._restart()
                    break
        return [results[c.key] for c in configs]

    def close(self) -> None:
        if self._proc is None:
            return
        try:
            self._conn.send(("close", None))
        except (OSError, EOFError):
            pass
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._conn.close()
        self._proc = self._conn = None

    def __enter__(self) -> GpuObjective:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
