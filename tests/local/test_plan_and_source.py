"""The backends' Plan (pure, printable: what `run --plan` shows, what a relaunch launches again), the
inventory source as a value, and `import clusterctl` staying light (issue 33)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_importing_clusterctl_loads_neither_the_api_nor_fabric_until_asked():
    code = ("import sys, clusterctl, clusterctl.cli; assert 'clusterctl.api' not in sys.modules; "
            "from clusterctl import Cluster; import clusterctl.api; assert 'fabric' not in sys.modules; "
            "assert Cluster is clusterctl.api.Cluster; print('light')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and done.stdout.strip() == "light", done.stderr
