"""Fact parsers on real tool outputs (tests/fixtures/tools/, sources in SOURCES.md)."""
from __future__ import annotations

import os
import sys

from clusterctl.preflight import facts


def test_versions_snippet_reads_torch_without_importing_it(tmp_path):
    # Run for real with this interpreter; a `torch` shadowing the real one proves no import happens.
    import subprocess

    torch_dir = tmp_path / "torch"
    torch_dir.mkdir()
    (torch_dir / "__init__.py").write_text("raise SystemExit('imported')\n")
    (torch_dir / "version.py").write_text("from typing import Optional\n__version__ = '2.11.0+cu130'\n"
                                          "debug = False\ncuda: Optional[str] = '13.0'\n")
    done = subprocess.run([sys.executable, "-c", facts.VERSIONS_SNIPPET], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(tmp_path)), timeout=60)
    versions = facts.parse_versions(done.stdout)
    assert (versions.torch, versions.cuda, versions.error) == ("2.11.0+cu130", "13.0", None)
    assert versions.nccl  # the nvidia-nccl wheel's version, or "bundled" (linked into torch)
    assert done.stdout.count("\n") == 1


def test_versions_snippet_on_a_python_without_torch(tmp_path):
    import subprocess

    done = subprocess.run([sys.executable, "-I", "-S", "-c", facts.VERSIONS_SNIPPET], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    versions = facts.parse_versions(done.stdout)
    assert versions.torch is None and versions.error == "ModuleNotFoundError: No module named 'torch'"
