"""transpose_()'s first call of a class nobody tuned (autotranspose.dispatch.inplace.choose):
its portfolio timed on x itself as round trips that leave x as it was (guard bytes and the
result checked bit for bit), the winner served to later calls of the class and kept in the
tuning database; no measurement when switched off or under CUDA graph capture (a later call
measures), and under torch.compile the op measures as an eager call does."""

from __future__ import annotations

import numpy as np
import pytest
from test_inplace_gpu import guarded, guards_intact, random_array, same_bits

import autotranspose as at
from autotranspose.calls import inplace as call
from autotranspose.dispatch import firstcall, inplace as programs, lookup, policy
from autotranspose.runtime.compiler import device_state
from autotranspose.store import Store

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("nothing_tuned")]


@pytest.fixture(scope="module")
def cupy():
    return pytest.importorskip("cupy")


def _split(shape):
    return (1, *shape) if len(shape) == 2 else shape


def _choice(shape, elem_bytes):
    b, m, n = _split(shape)
    return lookup.inplace_choice(device_state(0).info, elem_bytes, b, m, n)


def _check(cupy, rng, shape, dtype, conjugate=False):
    """One guarded call on fresh random bytes: the transpose (conjugated) and the guards."""
    host = random_array(rng, shape, dtype)
    shift = int(rng.integers(0, 4)) * host.itemsize  # x on a 16-byte line or off it
    buf, x = guarded(cupy, host, shift)
    y = at.transpose_(x, conjugate=conjugate)
    want = np.swapaxes(host, -1, -2)
    assert same_bits(cupy.asnumpy(y), np.conj(want) if conjugate else want)
    assert guards_intact(cupy, buf, shift)


@pytest.mark.parametrize(
    "shape, dtype, conjugate",
    [
        ((1001, 1001), "uint8", False),  # a square in lines: its own program undoes it
        ((257, 1031), "float16", False),  # a rectangle: undone by the n x m view's program
        ((2, 300, 140), "float32", False),  # batched, gcd 20: every pass, PERMUTE's table
        ((97, 61), "complex128", True),  # conjugated twice a round trip
    ],
)
def test_a_first_call_races_on_x_then_the_class_is_served_its_winner(
    cupy, rng, shape, dtype, conjugate
):
    e = np.dtype(dtype).itemsize
    b, m, n = _split(shape)
    assert _choice(shape, e).source == "default"
    _check(cupy, rng, shape, dtype, conjugate)
    assert len(programs.history) == 1
    _, problem, cls, outcome = programs.history[0]
    assert (problem, cls) == (policy.inplace_problem(m, n), policy.inplace_class(b, m, n))
    timed = [s for s in outcome.seconds.values() if s]
    assert len(timed) >= 2 and outcome.seconds.get(outcome.best)
    choice = _choice(shape, e)
    assert (choice.source, choice.config) == ("measured", outcome.best)
    _check(cupy, rng, shape, dtype, conjugate)  # a second array of the class: not raced
    assert len(programs.history) == 1


def test_the_winner_is_kept_in_the_database_and_served_from_it(cupy, rng, tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'user.db'}"
    Store.open(url).close()
    monkeypatch.setenv("AUTOTRANSPOSE_DB", url)
    at.clear_caches()
    shape = (613, 1201)
    _check(cupy, rng, shape, "uint8")
    assert len(programs.history) == 1
    best = programs.history[0][3].best
    cls, problem = policy.inplace_class(1, *shape), policy.inplace_problem(*shape)
    with Store.open(url, readonly=True) as s:
        e = s.best(device_state(0).info.name, 1, cls, problem)
        assert (e.source, e.config, e.shape) == ("measured", best, (1, *shape))
    at.clear_caches()  # as a new process would: the database's row, no race
    programs.history.clear()
    _check(cupy, rng, shape, "uint8")
    assert not programs.history and _choice(shape, 1).source == "measured"


def test_switched_off_the_first_call_serves_the_default(cupy, rng):
    firstcall.set_enabled(False)
    _check(cupy, rng, (333, 517), "int16")
    assert not programs.history and _choice((333, 517), 2).source == "default"


def test_no_race_under_graph_capture_and_a_later_call_races(torch):
    shape = (1003, 1003)  # a square: no table to upload before capture
    guess = _choice(shape, 1).config.params
    warm = torch.randint(0, 255, shape, dtype=torch.uint8, device="cuda")
    call.transpose_(warm, params=guess)  # compiles the guess's kernels, measures nothing
    static = torch.empty(shape, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = at.transpose_(static)
    assert not programs.history  # timing synchronises: not under capture
    fresh = torch.randint(0, 255, shape, dtype=torch.uint8, device="cuda")
    static.copy_(fresh)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, fresh.t())
    x = torch.randint(0, 255, shape, dtype=torch.uint8, device="cuda")
    want = x.t().clone()
    assert torch.equal(at.transpose_(x), want)  # outside capture the class is measured
    assert len(programs.history) == 1


def test_torch_compile_runs_the_first_call_in_the_op(torch):
    torch._dynamo.reset()

    def f(x):
        return at.transpose_(x) + 1

    x = torch.randn(211, 347, device="cuda")
    want = x.t().clone()
    got = torch.compile(f, fullgraph=True)(x)
    assert torch.equal(got, want + 1) and torch.equal(x.view(347, 211), want)
    assert len(programs.history) == 1


def test_a_shipped_result_of_even_rows_is_raced_by_odd_rows_of_its_class(
    cupy, rng, tmp_path, monkeypatch
):
    """A class holds odd and even sides, whose passes are other kernels: a result shipped
    for rows of whole 16-byte words serves them as it is, and an odd call of the class races
    it on its first call (`policy.inplace_raced`)."""
    from store_data import ok

    from autotranspose.kinds import inplace as inplace_kind
    from autotranspose.store import textio

    info = device_state(0).info
    even, odd = (1024, 1024), (1001, 1001)
    cls, problem = policy.inplace_class(1, *even), policy.inplace_problem(*even)
    assert policy.inplace_class(1, *odd) == cls
    cfg = policy.inplace_config(1, inplace_kind.default(1, True))
    shipped = tmp_path / "tuning_db"
    shipped.mkdir()
    with Store.open("sqlite://") as scratch:
        scratch.record(None, info, "uint8", 1, (1, *even), cls, cfg, ok(3000.0), problem=problem)
        (shipped / f"{info.slug}.json").write_text(textio.dumps(textio.export(scratch)))
    monkeypatch.setattr(lookup, "tuning_db_dir", lambda: shipped)
    at.clear_caches()
    _check(cupy, rng, even, "uint8")
    assert not programs.history and _choice(even, 1).source == "shipped"
    _check(cupy, rng, odd, "uint8")
    assert len(programs.history) == 1 and programs.history[0][2] == cls
