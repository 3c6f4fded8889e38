"""The wheel carries the templates and the shipped results: built here, installed into a fresh
virtual environment, it renders a kernel and finds the H100 results from its own files."""

from __future__ import annotations

import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
         "-w", str(tmp / "dist"), "-q"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    wheel = next((tmp / "dist").glob("autotranspose-*.whl"))
    env = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    site_packages = next(env.glob("lib/python*/site-packages"))
    # autotranspose only from the wheel; the dependencies from this interpreter's own
    # site-packages. Not system_site_packages=True: run from a virtualenv, that would give
    # the base interpreter's, which lack them. Paths listed in a .pth file are added as they
    # are (their own .pth files, an editable autotranspose's among them, are not run).
    (site_packages / "deps.pth").write_text("\n".join(_dependency_dirs()) + "\n")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site_packages),
         str(wheel), "-q"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    return python


def _dependency_dirs() -> list[str]:
    """Where this interpreter's packages are: its (virtualenv's) site-packages, and the user's."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if Path(d).is_dir()]


def test_installed_wheel_renders_a_kernel_from_its_own_templates(installed: Path, tmp_path: Path):
    script = (
        "import autotranspose as at, autotranspose.codegen as cg, autotranspose.lookup as lk\n"
        "src = at.render(at.KernelConfig(2, 64, 128, 4, 2))\n"
        "assert 'autotranspose_s2_m64_n128_v4_t2' in src\n"
        "print(at.__file__); print(cg.template_dir()); print(lk.tuning_db_dir())\n"
        "print(len(lk.shipped('NVIDIA H100 80GB HBM3')))\n"
    )
    run = subprocess.run([str(installed), "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    module, templates, shipped, count = run.stdout.split()
    venv_dir = str(installed.parent.parent)
    assert module.startswith(venv_dir) and templates.startswith(venv_dir)
    assert shipped.startswith(venv_dir) and int(count) > 0


def test_installed_console_script_answers(installed: Path, tmp_path: Path):
    run = subprocess.run(
        [str(installed), "-m", "autotranspose", "lookup", "--device", "NVIDIA H100 80GB HBM3",
         "--shape", "8192x8192", "--dtype", "float32", "--json"],
        capture_output=True, text=True, cwd=tmp_path, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert '"source": "shipped"' in run.stdout


def test_installed_wheel_ships_the_jax_handler_source(installed: Path, tmp_path: Path):
    script = (
        "from autotranspose.frameworks import _jax_handler as h\n"
        "assert h.HANDLER_SOURCE.is_file(), h.HANDLER_SOURCE\n"
        "assert 'XLA_FFI_DEFINE_HANDLER_SYMBOL' in h.HANDLER_SOURCE.read_text()\n"
        "print(h.HANDLER_SOURCE)\n"
    )
    run = subprocess.run([str(installed), "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().startswith(str(installed.parent.parent))
