"""The wheel carries the templates and the shipped results: built here, installed into a fresh
virtual environment, it renders a kernel and finds the H100 results from its own files. The
build prints no packaging warnings (a deprecated field, a folder left out of `packages`)."""

from __future__ import annotations

import re
import shutil
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What a build copies into the wheel: the package and the folders it maps into it.
SOURCES = ("pyproject.toml", "README.md", "autotranspose", "templates", "tuning_db")
# setuptools' own notice under PYTHONDONTWRITEBYTECODE, not something of ours to fix
_NOT_OURS = ("byte-compiling is disabled",)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel and what its build printed. Built from a copy of the sources: a build writes
    build/ and *.egg-info beside them, never in the checkout (where parallel test workers or
    an editable install would meet them)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
            shutil.copytree(ROOT / name, src / name, ignore=ignore)
        else:
            shutil.copy(ROOT / name, src / name)
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(tmp / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    return next((tmp / "dist").glob("autotranspose-*.whl")), build.stdout + build.stderr


@pytest.fixture(scope="module")
def installed(built: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheel = built[0]
    env = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    site_packages = next(env.glob("lib/python*/site-packages"))
    # autotranspose only from the wheel; the dependencies from this interpreter's own
    # site-packages. Not system_site_packages=True: run from a virtualenv, that would give
    # the base interpreter's, which lack them. Paths listed in a .pth file are added as they
    # are (their own .pth files, an editable autotranspose's among them, are not run).
    (site_packages / "deps.pth").write_text("\n".join(_dependency_dirs()) + "\n")
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--target",
            str(site_packages),
            str(wheel),
            "-q",
        ],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr
    return python


def test_the_build_prints_no_packaging_warnings(built: tuple[Path, str]) -> None:
    """A deprecated pyproject field (`license` as a table) or a template folder missing from
    `packages` makes setuptools print a warning; either is a packaging bug to fix here."""
    lines = [
        line.strip()
        for line in built[1].splitlines()
        if re.search(r"warn|deprecat", line, re.IGNORECASE)
        and not any(n in line for n in _NOT_OURS)
    ]
    assert not lines, "\n".join(lines)


def test_the_wheel_carries_every_template_and_shipped_file(built: tuple[Path, str]) -> None:
    """Every kernel template (in any folder of templates/), shipped result, migration and
    module: `packages` is an explicit list, and a package folder left out of it is left out of
    the wheel without a warning."""
    names = set(zipfile.ZipFile(built[0]).namelist())
    wanted = [
        ("autotranspose", "**/*.py", "autotranspose"),
        ("templates", "**/*.j2", "autotranspose/templates"),
        ("tuning_db", "*.json", "autotranspose/tuning_db"),
        ("autotranspose/store/migrations", "**/*.py", "autotranspose/store/migrations"),
        ("autotranspose/store/migrations", "*.mako", "autotranspose/store/migrations"),
    ]
    for folder, pattern, package in wanted:
        files = sorted((ROOT / folder).glob(pattern))
        assert files, (folder, pattern)
        for f in files:
            assert f"{package}/{f.relative_to(ROOT / folder).as_posix()}" in names, f


def _dependency_dirs() -> list[str]:
    """Where this interpreter's packages are: its (virtualenv's) site-packages, and the user's."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if Path(d).is_dir()]


def test_installed_wheel_renders_a_kernel_from_its_own_templates(installed: Path, tmp_path: Path):
    script = (
        "import autotranspose as at, autotranspose.kernels.codegen as cg, autotranspose.dispatch.lookup as lk\n"
        "src = at.render(at.KernelConfig(2, 64, 128, 4, 2))\n"
        "assert 'autotranspose_s2_m64_n128_v4_t2' in src\n"
        "print(at.__file__); print(cg.template_dir()); print(lk.tuning_db_dir())\n"
        "print(len(lk.shipped('NVIDIA H100 80GB HBM3')))\n"
    )
    run = subprocess.run(
        [str(installed), "-c", script], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    module, templates, shipped, count = run.stdout.split()
    venv_dir = str(installed.parent.parent)
    assert module.startswith(venv_dir) and templates.startswith(venv_dir)
    assert shipped.startswith(venv_dir) and int(count) > 0


def test_installed_console_script_answers(installed: Path, tmp_path: Path):
    run = subprocess.run(
        [
            str(installed),
            "-m",
            "autotranspose",
            "lookup",
            "--device",
            "NVIDIA H100 80GB HBM3",
            "--shape",
            "8192x8192",
            "--dtype",
            "float32",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr
    assert '"source": "shipped"' in run.stdout


def test_installed_wheel_ships_the_jax_handler_source(installed: Path, tmp_path: Path):
    script = (
        "from autotranspose.frameworks import _jax_handler as h\n"
        "assert h.HANDLER_SOURCE.is_file(), h.HANDLER_SOURCE\n"
        "assert 'XLA_FFI_DEFINE_HANDLER_SYMBOL' in h.HANDLER_SOURCE.read_text()\n"
        "print(h.HANDLER_SOURCE)\n"
    )
    run = subprocess.run(
        [str(installed), "-c", script], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().startswith(str(installed.parent.parent))
