"""The modules form layers, one package each, imported only downwards:

    errors, _version -> kinds -> plans -> kernels -> runtime -> store -> dispatch -> tuner
                     -> calls -> frameworks -> _api -> (__init__, cli, bench, __main__)

with the store knowing nothing of CUDA, kernel source or lookup. Within the layers, the rules
below name modules that must not reach others.

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
    "runtime.compiler",
    "runtime.driver",
    "runtime.native",
    "runtime.dlpack",
    "runtime.arrays",
    "runtime.streams",
    "runtime.launch",
    "calls.common",
    "dispatch.picker",
    "dispatch.caches",
    "dispatch.transpose",
    "dispatch.permute",
    "dispatch.cast",
    "dispatch.fastpath",
    "calls.transpose",
]
# plain data in the store's package that any layer may hold (`import autotranspose.store`
# loads nothing of the store until a name of it is used)
SHARED_RECORDS = {"store.measurement"}
FORBIDDEN: dict[str, list[str]] = {
    "store.measurement": ["*"],
    "dispatch.lru": [
        "*"
    ],  # the bounded cache every per-signature cache is: imports nothing of ours
    # the kernel kinds' policies: below config (it dispatches to them), pure, no CUDA
    "kinds": [
        *CUDA,
        "kernels.config",
        "kernels.codegen",
        "tuner.measure",
        "tuner.study",
        "store",
        "dispatch.lookup",
        "tuner.worker",
        "runtime.device",
    ],
    "kernels.config": [
        "kernels.codegen",
        "runtime.compiler",
        "runtime.launch",
        "calls.transpose",
        "tuner.measure",
        "tuner.study",
        "store",
        "dispatch.lookup",
    ],
    "kernels.codegen": [
        "runtime.compiler",
        "runtime.launch",
        "calls.transpose",
        "tuner.measure",
        "tuner.study",
        "store",
        "dispatch.lookup",
    ],
    "runtime.compiler": [
        "runtime.launch",
        "calls.transpose",
        "tuner.measure",
        "tuner.study",
        "store",
        "dispatch.lookup",
    ],
    "runtime.launch": [
        "calls.transpose",
        "tuner.measure",
        "tuner.study",
        "store",
        "dispatch.lookup",
        "tuner.worker",
    ],
    "tuner.measure": ["calls.transpose", "tuner.study", "store", "dispatch.lookup", "tuner.worker"],
    "tuner.worker": ["calls.transpose", "tuner.study", "store", "dispatch.lookup"],
    "dispatch.lookup": [*CUDA, "tuner.measure", "tuner.worker", "tuner.study"],
    # what every call runs when no config is forced, decided in one pure module: it reads no
    # database (lookup reads them and asks it) and measures nothing (firstcall, winners)
    "dispatch.policy": [
        *CUDA,
        "dispatch.lookup",
        "dispatch.firstcall",
        "dispatch.winners",
        "store",
        "tuner.measure",
        "tuner.worker",
        "tuner.study",
    ],
    "dispatch.firstcall": [
        "calls.transpose",
        "tuner.measure",
        "tuner.study",
        "tuner.worker",
        "store",
    ],
    # keeps first-call winners in the database: testable on machines without a GPU
    "dispatch.winners": [
        *CUDA,
        "dispatch.firstcall",
        "tuner.measure",
        "tuner.study",
        "tuner.worker",
    ],
    # the store runs SQL and nothing else: kernel versions and the "best changed" notice are
    # handed to it (store.hooks), so it renders no kernel and knows no lookup
    "store": [
        *CUDA,
        "kernels.codegen",
        "tuner.measure",
        "tuner.study",
        "tuner.worker",
        "dispatch.lookup",
        "dispatch.firstcall",
        "dispatch.winners",
    ],
    # permute's planner: shapes and strides in, a Plan out; the executor lives above it
    "plans.permute": [
        *CUDA,
        "kernels.config",
        "kernels.codegen",
        "tuner.measure",
        "tuner.study",
        "store",
        "dispatch.lookup",
        "tuner.worker",
    ],
    # the gather kernels' arguments: pure, so their index walk is modelled without a GPU
    "kernels.gather": [
        *CUDA,
        "kernels.config",
        "kernels.codegen",
        "tuner.measure",
        "tuner.study",
        "store",
        "dispatch.lookup",
        "tuner.worker",
    ],
    # the packed and vector box kernels' specs, arguments and sources: pure, so lookup names
    # and prints the kernel a pass runs and the tests run it on the CPU
    "kernels.packed": [
        *CUDA,
        "tuner.measure",
        "tuner.study",
        "store",
        "dispatch.lookup",
        "tuner.worker",
    ],
    "kernels.vbox": [
        *CUDA,
        "tuner.measure",
        "tuner.study",
        "store",
        "dispatch.lookup",
        "tuner.worker",
    ],
    # the one place that picks a kernel: nothing above it (the entry points, the fast path)
    "dispatch": [
        "calls.transpose",
        "calls.permute",
        "dispatch.fastpath",
        "calls.common",
        "_api",
        "tuner.measure",
        "tuner.study",
        "tuner.worker",
    ],
    # the fast path runs what dispatch kept; it picks nothing
    "dispatch.fastpath": [
        "calls.transpose",
        "calls.permute",
        "tuner.measure",
        "tuner.study",
        "tuner.worker",
    ],
    "calls.common": [
        "dispatch.picker",
        "dispatch.fastpath",
        "dispatch.lookup",
        "dispatch.firstcall",
        "dispatch.winners",
        "calls.transpose",
        "calls.permute",
    ],
    # permute(): validate, plan, launch what transpose() would; it measures and tunes nothing
    "calls.permute": ["tuner.measure", "tuner.study", "tuner.worker", "tuner.multigpu"],
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
    assert {f"{PKG}.calls.transpose", f"{PKG}.runtime.launch", f"{PKG}.store.store"} <= set(MODULES)
    targets = {e.target for e in GRAPH[f"{PKG}.dispatch.transpose"]}
    assert {f"{PKG}.runtime.launch", f"{PKG}.dispatch.lookup", f"{PKG}.runtime.compiler"} <= targets
    assert f"{PKG}.dispatch.picker" in {e.target for e in GRAPH[f"{PKG}.calls.transpose"]}
    # a lazy import inside a function, and `from . import module`
    assert f"{PKG}.runtime.launch" in {e.target for e in GRAPH[f"{PKG}.tuner.measure"]}
    assert f"{PKG}.store.textio" in {e.target for e in GRAPH[f"{PKG}.dispatch.lookup"]}
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
            if (
                target != start
                and not _under(target, [layer])
                and _under(target, FORBIDDEN[layer])
                and _short(target) not in SHARED_RECORDS
            ):
                wrong.append(_chain(chain))
    if wrong:
        pytest.fail(f"{layer} must not reach {FORBIDDEN[layer]}:\n" + "\n".join(wrong))


@pytest.mark.parametrize(
    "module",
    [
        "autotranspose.store",
        "autotranspose.dispatch.lookup",
        "autotranspose.plans.permute",
        "autotranspose.kernels.gather",
        "autotranspose.dispatch.winners",
    ],
)
def test_no_cuda_behind(module: str):
    """Importing the store (or lookup) loads no CUDA code, no measuring and no public call."""
    avoid = [
        "tuner.measure",
        "runtime.compiler",
        "runtime.driver",
        "runtime.native",
        "runtime.dlpack",
        "runtime.arrays",
        "runtime.streams",
        "calls.transpose",
        "runtime.launch",
        "tuner.study",
        "tuner.worker",
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
    above = ORCHESTRATORS | {f"{PKG}._api"}
    wrong = [
        str(e)
        for m, edges in GRAPH.items()
        if m not in above and not _under(m, ["frameworks"])
        for e in edges
        if _under(e.target, ["frameworks"])
    ]
    assert not wrong, "modules below the framework adapters import them: " + "; ".join(wrong)
    assert f"{PKG}.frameworks.jax_ops" in MODULES


@pytest.mark.parametrize("entry", ["calls.transpose", "calls.permute"])
def test_entry_points_leave_the_choice_to_dispatch(entry: str):
    """transpose() and permute() validate calls and run what `_dispatch` picks: neither
    imports lookup, the first-call measurement, the winners or the launches itself."""
    picking = {
        f"{PKG}.{m}"
        for m in ("dispatch.lookup", "dispatch.firstcall", "dispatch.winners", "runtime.launch")
    }
    direct = {e.target: e for e in GRAPH[f"{PKG}.{entry}"]}
    wrong = sorted(f"{e} imports {t}" for t, e in direct.items() if t in picking)
    assert not wrong, "\n".join(wrong)


# the layers, bottom to top: a package (or a loose module) imports only those before it
LAYER_ORDER = [
    "errors",
    "_version",
    "kinds",
    "plans",
    "kernels",
    "runtime",
    "store",
    "dispatch",
    "tuner",
    "calls",
    "frameworks",
    "_api",
]


def _layer(module: str) -> str:
    return _short(module).split(".")[0]


def test_every_module_is_in_a_layer():
    loose = sorted({_layer(m) for m in LAYERS} - set(LAYER_ORDER))
    assert not loose, f"modules outside the layers (add them to LAYER_ORDER): {loose}"


def test_layers_import_only_downwards():
    """A package imports only the packages below it: none climbs back up, so the file list
    reads bottom to top as the data flows."""
    rank = {name: i for i, name in enumerate(LAYER_ORDER)}
    wrong = [
        f"{_short(e.source)} -> {_short(e.target)} ({e})"
        for m, edges in LAYERS.items()
        for e in edges
        if _layer(e.source) in rank
        and _layer(e.target) in rank
        and rank[_layer(e.target)] > rank[_layer(e.source)]
    ]
    assert not wrong, "imports that climb back up:\n" + "\n".join(wrong)
