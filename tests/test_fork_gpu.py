"""A process forked after autotranspose used the GPU (a DataLoader worker, a `multiprocessing`
fork) gets one clear error, CudaForkError naming the 'spawn' start method, from every call, and
exits cleanly; a child that does not call exits 0; the parent goes on; workers started with
'spawn' work. Each program runs in a subprocess: the pytest process is never forked."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = textwrap.dedent("""
    import json, multiprocessing as mp, os, sys, time
    import numpy as np

    LIB = os.environ["FORK_TEST_LIB"]  # not argv: a spawned worker has its own


    def array(a):
        if LIB == "torch":
            import torch
            return torch.as_tensor(a, device="cuda")
        import cupy
        return cupy.asarray(a)


    def host(y):
        if LIB == "torch":
            return y.cpu().numpy()
        import cupy
        return cupy.asnumpy(y)


    def spawned(seed):
        import autotranspose as at
        a = np.random.default_rng(seed).standard_normal((301, 517)).astype(np.float32)
        return bool(np.array_equal(host(at.transpose(array(a))), a.T))


    def wait(pid):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            time.sleep(0.01)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        return None  # hung


    def fork(child, exit_normally):
        sys.stdout.flush()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                out = child()
            except BaseException as exc:
                out = {"raised": f"{type(exc).__name__}: {exc}"}
            os.write(w, json.dumps(out).encode())
            os.close(w)
            if exit_normally:
                sys.exit(0)  # atexit handlers, collection of the parent's arrays, teardown
            os._exit(0)  # as a multiprocessing fork's worker ends
        os.close(w)
        status = wait(pid)
        with os.fdopen(r) as f:
            text = f.read()
        return {"status": status, "out": json.loads(text) if text else None}


    if __name__ == "__main__":
        import autotranspose as at
        from autotranspose.errors import CudaForkError

        a = np.random.default_rng().standard_normal((301, 517)).astype(np.float32)
        x = array(a)
        for _ in range(2):  # the second call takes the fast path
            assert np.array_equal(host(at.transpose(x)), a.T)

        def call():
            out = {}
            for name, arg in (("gpu", x), ("again", x), ("numpy", a)):
                try:
                    at.transpose(arg)
                    out[name] = None
                except CudaForkError as exc:
                    out[name] = str(exc)
            return out

        report = {
            "called": fork(call, exit_normally=False),
            "called_then_exit": fork(call, exit_normally=True),
            "idle": fork(lambda: {}, exit_normally=True),
        }
        report["parent_after"] = bool(np.array_equal(host(at.transpose(x)), a.T))
        with mp.get_context("spawn").Pool(2) as pool:
            report["spawned"] = pool.map_async(spawned, [1, 2]).get(timeout=240)
        print(json.dumps(report))
""")


@pytest.mark.parametrize("lib", ["torch", "cupy"])
def test_a_forked_child_gets_one_clear_error_and_spawn_works(lib, tmp_path):
    if importlib.util.find_spec(lib) is None:
        pytest.skip(f"{lib} is not installed")
    script = tmp_path / "fork_program.py"  # a file: spawned workers import its functions
    script.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTRANSPOSE_")}
    env.update(
        FORK_TEST_LIB=lib,
        AUTOTRANSPOSE_DB=str(tmp_path / "absent.db"),  # nothing read, nothing written
        AUTOTRANSPOSE_FIRST_CALL="0",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=420,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for name in ("called", "called_then_exit"):
        child = report[name]
        assert child["status"] == 0, (name, child, done.stderr)  # exited, cleanly, no hang
        out = child["out"]
        assert set(out) == {"gpu", "again", "numpy"}, (name, out)  # CudaForkError each time
        for message in out.values():
            assert message and "forked" in message and "'spawn'" in message, (name, out)
            assert "multiprocessing_context='spawn'" in message
    assert report["idle"] == {"status": 0, "out": {}}, report["idle"]
    assert report["parent_after"] is True
    assert report["spawned"] == [True, True]
