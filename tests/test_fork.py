"""A process forked after autotranspose used the GPU gets CudaForkError, naming 'spawn', from
its first call, and exits cleanly; one forked before any GPU use is left alone. Without a GPU:
the driver's "initialised" mark is set as `_driver.lib` sets it after cuInit, the fork is
real, in a subprocess (never the pytest process, where JAX may be loaded). The GPU check is
tests/test_fork_gpu.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    import autotranspose as at
    from autotranspose.runtime import compiler as _compiler, driver as _driver
    from autotranspose.dispatch.picker import caches
    from autotranspose.errors import CudaForkError, DeviceError

    used = sys.argv[1] == "used"
    if used:  # what a call on the GPU leaves: the driver initialised, a device's state, a hit
        _driver._INITIALISED.append(True)  # as `lib()` marks it once cuInit succeeded
        _compiler._states[0] = "the parent's device state"
        caches.hits[("a signature",)] = "the parent's prepared launch"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one call, its outcome down the pipe, then a normal exit
        os.close(read)
        out = {"forked": _driver.forked(), "states": len(_compiler._states),
               "hits": len(caches.hits)}
        try:
            at.transpose(np.ones((3, 5), np.float32))
            out["error"] = None
        except CudaForkError as exc:
            out["error"], out["message"] = "CudaForkError", str(exc)
        except DeviceError as exc:  # no GPU here: what a fresh process would get
            out["error"], out["message"] = "DeviceError", str(exc)
        try:
            _driver.device_count()
        except CudaForkError:
            out["count"] = "CudaForkError"
        except DeviceError:
            out["count"] = "DeviceError"
        os.write(write, json.dumps(out).encode())
        os.close(write)
        sys.exit(0)  # atexit handlers and all
    os.close(write)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    if not done:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        child = json.loads(f.read() or "null")
    print(json.dumps({"exited": bool(done), "status": status if done else None,
                      "child": child, "parent_forked": _driver.forked()}))
""")


def _run(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTRANSPOSE_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["AUTOTRANSPOSE_FIRST_CALL_STORE"] = "0"
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_child_forked_after_gpu_use_gets_one_clear_error_and_exits_cleanly():
    got = _run("used")
    assert got["exited"] and got["status"] == 0, got  # no hang, no crash
    assert not got["parent_forked"]  # the parent goes on as before
    child = got["child"]
    assert child["forked"] and child["states"] == 0 and child["hits"] == 0, child
    assert child["error"] == "CudaForkError", child
    message = child["message"]
    assert "forked" in message and "CUDA cannot be used in a forked child" in message
    for fix in (
        "'spawn'",
        "multiprocessing.set_start_method('spawn')",
        "torch.multiprocessing",
        "multiprocessing_context='spawn'",
    ):
        assert fix in message, message
    assert child["count"] == "CudaForkError"  # every entry into the driver says the same


def test_a_child_forked_before_any_gpu_use_is_left_alone():
    got = _run("unused")
    assert got["exited"] and got["status"] == 0, got
    child = got["child"]
    assert not child["forked"], child
    # here (no GPU) what any fresh process gets, not the fork's error
    assert child["error"] in (None, "DeviceError") and child.get("count") != "CudaForkError"


EXPORT_IN_CHILD = textwrap.dedent("""
    import ctypes, gc, json, os, sys, time
    from autotranspose.runtime import dlpack as D, driver as _driver

    lib = D.helpers()
    if lib is None:
        print(json.dumps({"skip": "no C compiler"}))
        os._exit(0)
    ABORT = ctypes.cast(ctypes.CDLL(None).abort, ctypes.c_void_p).value

    class Owner:  # an exported result (`_dlpack.Exported`) a consumer holds
        _managed = True
        keep = None

    _driver._INITIALISED.append(True)  # the parent used the GPU
    # the parent's export: releasing it runs cuMemFree there; here a release that aborts
    capsule = D.export_capsule(lib, Owner(), 4096, (4,), (2, 32), (2, 0),
                               dict(mem_free=ABORT, ptr=4096))
    pid = os.fork()
    if pid == 0:  # the child lets go of it (a consumer's collection, or the exit)
        del capsule
        gc.collect()
        sys.exit(0)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    print(json.dumps({"exited": bool(done), "status": status}), flush=True)
    os._exit(0)  # the parent's own export is left alone: its release would abort
""")


def test_an_export_released_in_a_forked_child_makes_no_driver_call():
    """JAX may hold our exported results in a forked child; releasing them there (collected,
    or at exit) must not call the driver with the parent's context: the C release is handed
    no entry points after the fork."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", EXPORT_IN_CHILD],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in got:
        pytest.skip(got["skip"])
    assert got == {"exited": True, "status": 0}, got
