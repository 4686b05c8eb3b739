"""This checkout as a user gets it from `pip install .` (a wheel, not an editable install), in a fresh venv:
for the packaging tests of tests/local/ (the wheel's contents, the built-in playbooks, `up` on this machine)
and tests/rehearsal/ (`up` on the rehearsal cluster).

Offline but for the build backend: the wheel is built from a copy of what the build reads (so that a stale
build/ of the checkout cannot put a file in it), without build isolation when this interpreter's setuptools
is new enough for pyproject.toml. The venv has no pip; the wheel goes in with `pip --python`, without its
dependencies, which it finds in this interpreter's site-packages, after its own: a .pth line adds that path
without running the .pth files there, so this checkout's editable install stays out."""
from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD_INPUTS = ("pyproject.toml", "README.md", "clusterctl")  # what setuptools reads to build the wheel
SETUPTOOLS_NEEDED = 77  # pyproject.toml's build-system requires (its SPDX `license` string)


@dataclass(frozen=True)
class Installed:
    venv: Path
    wheel: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def clusterctl(self) -> Path:
        return self.venv / "bin" / "clusterctl"

    def run(self, *args: str, cwd: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        """`clusterctl ARGS` from the venv's console script, in `cwd` (never the checkout: its clusterctl/
        would be imported first from there)."""
        return subprocess.run([str(self.clusterctl), *args], cwd=str(cwd), env={**os.environ, **(env or {})},
                              capture_output=True, text=True, timeout=timeout)

    def python_json(self, code: str, cwd: Path) -> dict:
        """What `code` prints as JSON, run by the venv's Python."""
        proc = subprocess.run([str(self.python), "-c", code], cwd=str(cwd), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout)


def package_files(root: Path = REPO) -> set[str]:
    """Every file of the package's tree (its modules and the data it reads), as the wheel names them."""
    return {str(path.relative_to(root)) for path in (root / "clusterctl").rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"}


def wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name for name in archive.namelist() if not name.endswith("/")}


def build_wheel(work: Path) -> Path:
    source = work / "source"
    source.mkdir(parents=True)
    for name in BUILD_INPUTS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / name, source / name)
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work / "dist"), str(source)]
    if _setuptools_major() >= SETUPTOOLS_NEEDED:
        argv.append("--no-build-isolation")  # this interpreter's backend: nothing downloaded
    subprocess.run(argv, check=True, timeout=300, capture_output=True)
    (wheel,) = (work / "dist").glob("clusterctl-*.whl")
    return wheel


def install(work: Path) -> Installed:
    """The wheel of this checkout, built and installed into a fresh venv under `work`."""
    wheel = build_wheel(work)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    Path(purelib, "zz_runtime_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
                    "--no-index", "-q", str(wheel)], check=True, timeout=300, capture_output=True)
    return Installed(venv, wheel)


def _setuptools_major() -> int:
    try:
        return int(re.match(r"\d+", metadata.version("setuptools")).group())
    except (metadata.PackageNotFoundError, AttributeError):
        return 0
