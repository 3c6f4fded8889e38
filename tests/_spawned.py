"""Spawned processes that each put one answer on a queue (the concurrency tests' writers and
racers): the parent collects the answers, and a process that dies is reported at once, with
its exit code, instead of after the whole wait."""

from __future__ import annotations

import queue
import time
from collections.abc import Sequence
from typing import Any

import pytest

POLL_S = 0.5


def answers(procs: Sequence[Any], out: Any, what: str, timeout_s: float = 120) -> list[Any]:
    """One answer from each of the started `procs` (multiprocessing processes) through `out`
    (their queue), then every process joined; fails the test naming `what` ("a writer
    process") when one dies without answering, answers nothing in `timeout_s`, or exits
    non-zero."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < len(procs):
            try:
                got.append(out.get(timeout=POLL_S))
                continue
            except queue.Empty:
                pass
            died = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if died:  # its traceback is in the captured stderr
                pytest.fail(f"{what} died (exit codes {died}): its stderr above says why")
            if time.monotonic() > deadline:
                pytest.fail(f"{what} gave no answer within {timeout_s:.0f} s")
    finally:
        for p in procs:
            p.join(timeout=30)
    assert [p.exitcode for p in procs] == [0] * len(procs)
    return got
