"""A deterministic stand-in for the GPU objective: GB/s is a pure function of the config.

The landscape has one clear optimum (64x64 tiles, the widest vector, 4 micro-blocks per
thread, swizzled shared memory, column raster, streaming stores, 2 persistent blocks); per_thread=32 "fails to
launch" and swizzled 16-row tiles give "wrong" output that would otherwise be the fastest.
Every measured config is appended to `log_path` (one key per line, with the process id), so
tests can count measurements across processes, including killed ones.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from autotranspose.kernels.config import KernelConfig
from autotranspose.runtime.device import DeviceInfo
from autotranspose.store.measurement import Measurement

DEVICE = DeviceInfo("Synthetic GPU 9000", (9, 0), multiprocessors=132)
COPY_GBPS = 3300.0


def score(c: KernelConfig) -> Measurement:
    """The synthetic measurement of a config."""
    if c.per_thread == 32:
        return Measurement("fail", error=f"launch failed for {c.key}: too many resources requested")
    if c.layout == "swizzle" and c.tile_m == 16:
        return Measurement(
            "wrong",
            gbps=9000.0,
            copy_gbps=COPY_GBPS,
            time_us=1.0,
            error="output differs from the reference at [0, 1]",
        )
    # Each field costs bandwidth by its distance from the optimum (one clearly best region).
    penalty = 150 * abs(math.log2(c.tile_m) - 6) + 150 * abs(math.log2(c.tile_n) - 6)
    penalty += 150 * abs(math.log2(c.per_thread) - 2) + 100 * (4 - math.log2(c.word_bytes))
    penalty += {"swizzle": 0, "pad": 100 if c.pad else 250}[c.layout]
    penalty += (c.raster != "col") * 100 + (c.cache != "stream") * 100
    penalty += 60 * abs(math.log2(c.persistent + 1) - math.log2(3))
    gbps = max(3000.0 - penalty, 50.0)
    return Measurement("ok", gbps=gbps, copy_gbps=COPY_GBPS, time_us=1e6 / gbps)


def optimum(elem_bytes: int, vec: int) -> KernelConfig:
    return KernelConfig(elem_bytes, 64, 64, vec, 4, 0, "swizzle", "col", "stream", persistent=2)


class SyntheticObjective:
    """Callable like the GPU objective; records what it was asked to compile and measure."""

    def __init__(
        self,
        device: DeviceInfo = DEVICE,
        *,
        log_path: str | os.PathLike[str] | None = None,
        delay: float = 0.0,
        space: Sequence[KernelConfig] | None = None,
        fail: Mapping[str, str] | None = None,
        wrong: Collection[str] = (),
        gbps: Mapping[str, float] | None = None,
    ) -> None:
        """`fail`, `wrong`, `gbps`: outcomes forced for given config keys (the rest: score())."""
        self.device = device
        self.log_path = Path(log_path) if log_path is not None else None
        self.delay = delay
        self.space = set(space) if space is not None else None
        self.calls: list[KernelConfig] = []
        self.batches: list[list[KernelConfig]] = []
        self.precompiled: list[list[KernelConfig]] = []
        self.closed = False
        self.fail = fail if fail is not None else {}
        self.wrong = set(wrong)
        self.gbps = dict(gbps or {})

    def precompile(self, configs: Sequence[KernelConfig]) -> None:
        self.precompiled.append(list(configs))

    def __call__(self, configs: Sequence[KernelConfig]) -> list[Measurement]:
        self.batches.append(list(configs))
        out = []
        for c in configs:
            if self.space is not None:
                assert c in self.space, f"an invalid config reached the objective: {c.key}"
            if self.delay:
                time.sleep(self.delay)
            self.calls.append(c)
            if self.log_path is not None:
                with open(self.log_path, "a") as f:
                    f.write(f"{os.getpid()} {c.key}\n")
                    f.flush()
                    os.fsync(f.fileno())
            out.append(self.measure(c))
        return out

    def measure(self, c: KernelConfig) -> Measurement:
        if c.key in self.fail:
            return Measurement("fail", error=self.fail[c.key])
        if c.key in self.wrong:
            return Measurement("wrong", 9000.0, COPY_GBPS, 1.0, error="output differs at [3, 0]")
        if c.key in self.gbps:
            return Measurement("ok", self.gbps[c.key], COPY_GBPS, 1e6 / self.gbps[c.key])
        return score(c)

    def close(self) -> None:
        self.closed = True


def make_objective(
    dtype: str, shape: tuple[int, int, int], device: int, conjugate: bool, layout=None
):
    """The CLI's objective factory, synthetic (the layout of a permute's pass is kept on it)."""
    objective = SyntheticObjective(log_path=os.environ.get("AUTOTRANSPOSE_TEST_MEASURE_LOG"))
    objective.layout = layout
    return objective


OTHER_DEVICE = DeviceInfo("Synthetic GPU 8000", (8, 0), multiprocessors=108)


class _Everything(dict):
    """Fails every config (a dict that holds every key)."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> str:
        return "launch failed: too many resources requested"


class _Crashing(SyntheticObjective):
    def __call__(self, configs: Sequence[KernelConfig]) -> list[Measurement]:
        os._exit(3)  # as if the GPU's whole process died


def device_objective(
    dtype: str,
    shape: tuple[int, int, int],
    device: int,
    conjugate: bool,
    *,
    models: Sequence[str] = (),
    delay: float = 0.0,
    fail_dtypes: Collection[str] = (),
) -> SyntheticObjective:
    """The objective factory of the multi-GPU tests (bind the keywords with functools.partial:
    it must pickle). `models[device]` says what local GPU `device` is: "same" (DEVICE, the
    default), "other" (OTHER_DEVICE, another model), "broken" (its worker cannot start) or
    "crash" (its process dies at the first measurement). Every measurement is logged to
    $AUTOTRANSPOSE_TEST_MEASURE_LOG, if set."""
    from autotranspose.errors import TuningError

    model = models[device] if device < len(models) else "same"
    if model == "broken":
        raise TuningError(f"the measuring process could not start: CUDA_ERROR_NO_DEVICE ({device})")
    kind = _Crashing if model == "crash" else SyntheticObjective
    return kind(
        OTHER_DEVICE if model == "other" else DEVICE,
        log_path=os.environ.get("AUTOTRANSPOSE_TEST_MEASURE_LOG"),
        delay=delay,
        fail=_Everything() if dtype in fail_dtypes else None,
    )


def best_in(space: Sequence[KernelConfig]) -> KernelConfig:
    """The config of `space` the synthetic objective scores highest (among correct ones)."""
    ok = [c for c in space if score(c).ok]
    return max(ok, key=lambda c: (score(c).gbps, c.key))


def tune_process(
    url: str,
    log_path: str,
    shape: tuple[int, int, int] = (1, 2048, 2048),
    trials: int = 40,
    delay: float = 0.0,
    seed: int | None = None,
    batch: int = 4,
    grace_period: int = 2,
) -> None:
    """Run one tuning process (the entry point of the multi-process and kill tests)."""
    import optuna

    from autotranspose.store import Store
    from autotranspose.tuner.study import tune

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with Store.open(url) as store:
        tune(
            "float32",
            shape,
            objective=SyntheticObjective(log_path=log_path, delay=delay),
            store=store,
            device=DEVICE,
            trials=trials,
            seed=seed,
            batch=batch,
            heartbeat_interval=1,
            grace_period=grace_period,
        )


def logged(log_path: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """(pid, config key) of every measurement in a log written by SyntheticObjective."""
    path = Path(log_path)
    if not path.exists():
        return []
    return [
        (int(pid), key)
        for pid, key in (line.split() for line in path.read_text().splitlines() if line.strip())
    ]


if __name__ == "__main__":  # python _synthetic.py URL LOG TRIALS DELAY: the kill test's victim
    import sys

    tune_process(sys.argv[1], sys.argv[2], trials=int(sys.argv[3]), delay=float(sys.argv[4]))


def ctrl_c_tune_process(url: str, at: int) -> None:
    """Tune with a sampler that sends this process a Ctrl-C at its `at`-th sampled parameter
    (Optuna's ask has made the trial's row, RUNNING, and not returned the trial yet); print
    whether the KeyboardInterrupt came out of `tune` and how often the sampler ran. Run in a
    process of its own: a signal sent to the test process may be handled in whatever Python
    code runs there next (a garbage-collection callback of JAX's, say), not in the tune."""
    import json
    import signal

    import optuna

    from autotranspose.store import Store
    from autotranspose.tuner.study import study, tune

    class CtrlCSampler(optuna.samplers.RandomSampler):
        def __init__(self) -> None:
            super().__init__(seed=0)
            self.calls = 0

        def sample_independent(self, study, trial, param_name, param_distribution):
            self.calls += 1
            if self.calls == at:
                os.kill(os.getpid(), signal.SIGINT)
            return super().sample_independent(study, trial, param_name, param_distribution)

    # Python's own Ctrl-C handler, as in a terminal: a runner started in the background
    # (`cmd &` in a script) hands its children SIGINT ignored, and then no KeyboardInterrupt
    signal.signal(signal.SIGINT, signal.default_int_handler)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = CtrlCSampler()
    study.make_sampler = lambda name, seed=None: sampler
    raised = False
    with Store.open(url) as store:
        try:
            tune(
                "float32",
                (1, 2048, 2048),
                objective=SyntheticObjective(),
                store=store,
                device=DEVICE,
                trials=40,
                batch=2,
                seed=0,
            )
        except KeyboardInterrupt:
            raised = True
    print(json.dumps({"raised": raised, "calls": sampler.calls}))
