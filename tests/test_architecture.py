"""The modules form one acyclic line: config -> codegen -> compiler -> launch -> api, with
measure -> worker/tuner -> store beside it, and the store knowing nothing of CUDA, kernel
source or lookup.

The graph is read from the source with `ast`: every import statement, at the top of a module
or inside a function (the lazy ones count: a cycle through a function-level import is still a
cycle for a reader), relative ones resolved. The orchestrators at the top (the package's
`__init__`, the `cli` and `bench` packages with every module in them, `__main__`) may import
anything; nothing else may import them, except `__version__` from the package itself.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = "autotranspose"
# packages on top: they and every module in them are orchestrators
ORCHESTRATOR_PACKAGES = (f"{PKG}.cli", f"{PKG}.bench")
FROM_PACKAGE_OK = {"__version__"}  # names a layer may read from the package's __init__

# module -> modules it must not reach, directly or through others (a name stands for a
# module and, for a package, everything in it)
CUDA = [
    "_compiler",
    "_driver",
    "_native",
    "_dlpack",
    "_arrays",
    "_streams",
    "_launch",
    "_calls",
    "_dispatch",
    "_fastpath",
    "_api",
]
FORBIDDEN: dict[str, list[str]] = {
    "_measurement": ["*"],
    "_lru": ["*"],  # the bounded cache every per-signature cache is: imports nothing of ours
    # the kernel kinds' policies: below config (it dispatches to them), pure, no CUDA
    "kinds": [
        *CUDA,
        "_config",
        "_codegen",
        "_measure",
        "_tuner",
        "store",
        "_lookup",
        "_worker",
        "_device",
    ],
    "_config": [
        "_codegen",
        "_compiler",
        "_launch",
        "_api",
        "_measure",
        "_tuner",
        "store",
        "_lookup",
    ],
    "_codegen": ["_compiler", "_launch", "_api", "_measure", "_tuner", "store", "_lookup"],
    "_compiler": ["_launch", "_api", "_measure", "_tuner", "store", "_lookup"],
    "_launch": ["_api", "_measure", "_tuner", "store", "_lookup", "_worker"],
    "_measure": ["_api", "_tuner", "store", "_lookup", "_worker"],
    "_worker": ["_api", "_tuner", "store", "_lookup"],
    "_lookup": [*CUDA, "_measure", "_worker", "_tuner"],
    "_firstcall": ["_api", "_measure", "_tuner", "_worker", "store"],
    # keeps first-call winners in the database: testable on machines without a GPU
    "_winners": [*CUDA, "_firstcall", "_measure", "_tuner", "_worker"],
    # the store runs SQL and nothing else: kernel versions and the "best changed" notice are
    # handed to it (store.hooks), so it renders no kernel and knows no lookup
    "store": [
        *CUDA,
        "_codegen",
        "_measure",
        "_tuner",
        "_worker",
        "_lookup",
        "_firstcall",
        "_winners",
    ],
    # permute's planner: shapes and strides in, a Plan out; the executor lives above it
    "_plan": [*CUDA, "_config", "_codegen", "_measure", "_tuner", "store", "_lookup", "_worker"],
    # the gather kernels' arguments: pure, so their index walk is modelled without a GPU
    "_gather": [*CUDA, "_config", "_codegen", "_measure", "_tuner", "store", "_lookup", "_worker"],
    # the packed and vector box kernels' specs, arguments and sources: pure, so lookup names
    # and prints the kernel a pass runs and the tests run it on the CPU
    "_packed": [*CUDA, "_measure", "_tuner", "store", "_lookup", "_worker"],
    "_vbox": [*CUDA, "_measure", "_tuner", "store", "_lookup", "_worker"],
    # the one place that picks a kernel: nothing above it (the entry points, the fast path)
    "_dispatch": [
        "_api",
        "_permuter",
        "_fastpath",
        "_calls",
        "_entry",
        "_measure",
        "_tuner",
        "_worker",
    ],
    # the fast path runs what dispatch kept; it picks nothing
    "_fastpath": ["_api", "_permuter", "_measure", "_tuner", "_worker"],
    "_calls": ["_dispatch", "_fastpath", "_lookup", "_firstcall", "_winners", "_api", "_permuter"],
    # permute(): validate, plan, launch what transpose() would; it measures and tunes nothing
    "_permuter": ["_measure", "_tuner", "_worker", "_multigpu"],
}


class Edge(NamedTuple):
    """`source` imports `target` at `path`:`line`."""

    source: str
    target: str
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _modules() -> dict[str, tuple[Path, bool]]:
    """module name -> (file, is a package)"""
    found = {}
    for path in sorted((ROOT / PKG).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        found[".".join(parts)] = (path, is_pkg)
    return found


MODULES = _modules()
ORCHESTRATORS = {PKG, f"{PKG}.__main__"} | {
    m for m in MODULES for p in ORCHESTRATOR_PACKAGES if m == p or m.startswith(f"{p}.")
}


def _targets(node: ast.Import | ast.ImportFrom, name: str, is_pkg: bool) -> Iterable[str]:
    """The package modules an import statement reads (a name from a package: the package)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    if node.level:
        base = name.split(".") if is_pkg else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    for alias in node.names:
        sub = f"{module}.{alias.name}"
        yield sub if sub in MODULES else module


def _graph() -> dict[str, list[Edge]]:
    graph: dict[str, list[Edge]] = {m: [] for m in MODULES}
    for name, (path, is_pkg) in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(node, name, is_pkg):
                    if target in MODULES and target != name:
                        graph[name].append(Edge(name, target, path, node.lineno))
    return graph


GRAPH = _graph()
# the layers: everything but the orchestrators, and no edge into them
LAYERS = {
    m: [e for e in edges if e.target not in ORCHESTRATORS]
    for m, edges in GRAPH.items()
    if m not in ORCHESTRATORS
}


def _short(module: str) -> str:
    return module.removeprefix(f"{PKG}.")


def _chain(edges: list[Edge]) -> str:
    return " -> ".join([_short(edges[0].source)] + [f"{_short(e.target)} ({e})" for e in edges])


def _find_cycle() -> list[Edge] | None:
    """A cycle of LAYERS as its edges, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[Edge] = []

    def visit(m: str) -> list[Edge] | None:
        state[m] = 1
        for e in LAYERS[m]:
            if state.get(e.target) == 1:
                start = next(i for i, s in enumerate(stack) if s.source == e.target)
                return [*stack[start:], e]
            if e.target not in state:
                stack.append(e)
                found = visit(e.target)
                if found:
                    return found
                stack.pop()
        state[m] = 2
        return None

    for m in sorted(LAYERS):
        if m not in state:
            stack.clear()
            cycle = visit(m)
            if cycle:
                return cycle
    return None


def _reach(start: str) -> dict[str, list[Edge]]:
    """Every module reachable from `start`, with the import chain that gets there."""
    paths: dict[str, list[Edge]] = {start: []}
    todo = [start]
    while todo:
        m = todo.pop()
        for e in LAYERS[m]:
            if e.target not in paths:
                paths[e.target] = [*paths[m], e]
                todo.append(e.target)
    return paths


def _under(module: str, names: list[str]) -> bool:
    short = _short(module)
    return "*" in names or any(short == n or short.startswith(f"{n}.") for n in names)


def test_the_graph_is_read():
    """The parser sees what it should (a guard against a test that checks an empty graph)."""
    assert {f"{PKG}._api", f"{PKG}._launch", f"{PKG}.store.store"} <= set(MODULES)
    targets = {e.target for e in GRAPH[f"{PKG}._dispatch.transpose"]}
    assert {f"{PKG}._launch", f"{PKG}._lookup", f"{PKG}._compiler"} <= targets
    assert f"{PKG}._dispatch" in {e.target for e in GRAPH[f"{PKG}._api"]}
    # a lazy import inside a function, and `from . import module`
    assert f"{PKG}._launch" in {e.target for e in GRAPH[f"{PKG}._measure"]}
    assert f"{PKG}.store.textio" in {e.target for e in GRAPH[f"{PKG}._lookup"]}
    # the orchestrators' packages and their modules
    assert {f"{PKG}.cli", f"{PKG}.bench", f"{PKG}.bench.runners"} <= ORCHESTRATORS


def test_no_import_cycles():
    cycle = _find_cycle()
    if cycle:
        pytest.fail("import cycle: " + _chain(cycle))


def test_nothing_imports_the_orchestrators():
    wrong = []
    for m, (path, is_pkg) in MODULES.items():
        if m in ORCHESTRATORS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(node, m, is_pkg):
                if target == PKG and isinstance(node, ast.ImportFrom):
                    names = {a.name for a in node.names} - FROM_PACKAGE_OK
                    names = {n for n in names if f"{PKG}.{n}" not in MODULES}
                    if names:
                        wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} takes {names}")
                elif target in ORCHESTRATORS - {PKG}:
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target}")
    if wrong:
        pytest.fail("layers import the orchestrators: " + "; ".join(wrong))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_order(layer: str):
    starts = [m for m in LAYERS if _under(m, [layer])]
    assert starts, f"no module {layer}"
    wrong = []
    for start in starts:
        for target, chain in _reach(start).items():
            if target != start and not _under(target, [layer]) and _under(target, FORBIDDEN[layer]):
                wrong.append(_chain(chain))
    if wrong:
        pytest.fail(f"{layer} must not reach {FORBIDDEN[layer]}:\n" + "\n".join(wrong))


@pytest.mark.parametrize(
    "module",
    [
        "autotranspose.store",
        "autotranspose._lookup",
        "autotranspose._plan",
        "autotranspose._gather",
        "autotranspose._winners",
    ],
)
def test_no_cuda_behind(module: str):
    """Importing the store (or lookup) loads no CUDA code, no measuring and no public call."""
    avoid = [
        "_measure",
        "_compiler",
        "_driver",
        "_native",
        "_dlpack",
        "_arrays",
        "_streams",
        "_api",
        "_launch",
        "_tuner",
        "_worker",
    ]
    script = (
        f"import sys, {module}\n"
        "print('\\n'.join(m for m in sys.modules if m.startswith(('autotranspose', 'pycuda'))))"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    loaded = set(run.stdout.split())
    bad = sorted(m for m in loaded if m.startswith("pycuda") or m in {f"{PKG}.{a}" for a in avoid})
    assert not bad, f"import {module} loaded {bad}"


def test_only_the_store_speaks_sql():
    """The store is the only code of ours that makes an engine or runs SQL: no module outside
    it imports SQLAlchemy or Alembic (the tuner reaches Optuna's storage through
    `store.studies`)."""
    wrong = []
    for m, (path, _) in MODULES.items():
        if _under(m, ["store"]):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            if any(n.split(".")[0] in ("sqlalchemy", "alembic") for n in names):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not wrong, "SQL outside the store: " + "; ".join(wrong)


def test_frameworks_sit_on_top():
    """The framework adapters (JAX's primitive, PyTorch's ops) call api and permuter; nothing
    below them imports them, so the core runs without any framework's tracing machinery. Only
    the orchestrators and the top-level dispatch (`entry`) may reach them."""
    above = ORCHESTRATORS | {f"{PKG}._entry"}
    wrong = [
        str(e)
        for m, edges in GRAPH.items()
        if m not in above and not _under(m, ["frameworks"])
        for e in edges
        if _under(e.target, ["frameworks"])
    ]
    assert not wrong, "modules below the framework adapters import them: " + "; ".join(wrong)
    assert f"{PKG}.frameworks.jax_ops" in MODULES


@pytest.mark.parametrize("entry", ["_api", "_permuter"])
def test_entry_points_leave_the_choice_to_dispatch(entry: str):
    """transpose() and permute() validate calls and run what `_dispatch` picks: neither
    imports lookup, the first-call measurement, the winners or the launches itself."""
    picking = {f"{PKG}.{m}" for m in ("_lookup", "_firstcall", "_winners", "_launch")}
    direct = {e.target: e for e in GRAPH[f"{PKG}.{entry}"]}
    wrong = sorted(f"{e} imports {t}" for t, e in direct.items() if t in picking)
    assert not wrong, "\n".join(wrong)
