"""What `docker run --gpus` needs on a node, read from the node.

dockerd serves a `--gpus` device request itself, without any registered `nvidia` runtime:
it registers its NVIDIA device driver at start when `nvidia-container-runtime-hook` is on
*its own* PATH, and engines with moby/moby#50228 also serve it through CDI when
`nvidia-cdi-hook` is on that PATH and a CDI spec for `nvidia.com/gpu` exists. So this fact
is dockerd's PATH (from /proc, which needs root: then systemd's default PATH is assumed),
which of those binaries it holds, and the CDI specs in Docker's default spec directories.
The `nvidia` OCI runtime (`--runtime=nvidia`) is a separate thing, judged only when asked for.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from clusterctl.models import Command
from clusterctl.preflight.facts._text import excerpt, strip_provenance
from clusterctl.preflight.facts.nvidia import ANY_EXIT

HOOK = "nvidia-container-runtime-hook"
CDI_HOOK = "nvidia-cdi-hook"
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# One `key: value` line each. dockerd's pid by pidof, else by /proc/*/comm read with the shell's own
# `read` (a fork per process would cost seconds on a busy node).
_SCRIPT = r'''pid=$(pidof -s dockerd 2>/dev/null)
if [ -z "$pid" ]; then
  for c in /proc/[0-9]*/comm; do
    name=; read -r name 2>/dev/null < "$c"
    if [ "$name" = dockerd ]; then pid=${c#/proc/}; pid=${pid%/comm}; break; fi
  done
fi
path=
if [ -n "$pid" ]; then path=$(tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | sed -n 's/^PATH=//p'); fi
echo "dockerd_pid: ${pid:-none}"
echo "dockerd_path: ${path:-unknown}"
search=${path:-__DEFAULT__}
for tool in nvidia-container-runtime-hook nvidia-cdi-hook nvidia-container-runtime; do
  found=none
  old_ifs=$IFS; IFS=:
  for d in $search; do
    if [ -x "$d/$tool" ]; then found="$d/$tool"; break; fi
  done
  IFS=$old_ifs
  echo "$tool: $found"
done
for f in /etc/cdi/* /var/run/cdi/*; do
  [ -f "$f" ] && grep -q 'nvidia.com/gpu' "$f" 2>/dev/null && echo "cdi_spec: $f"
done
echo "end: ok"'''.replace("__DEFAULT__", SYSTEMD_PATH)
GPU_HOOKS = Command(argv=("sh", "-c", _SCRIPT), timeout=30.0, ok_exit_codes=ANY_EXIT, privileged=True)


@dataclass(frozen=True)
class GpuHooks:
    dockerd_running: Optional[bool] = None
    dockerd_path: Optional[str] = None  # None: unreadable (not root), SYSTEMD_PATH was searched instead
    runtime_hook: Optional[str] = None  # where nvidia-container-runtime-hook is on that PATH
    cdi_hook: Optional[str] = None
    nvidia_runtime: Optional[str] = None  # the nvidia-container-runtime binary (for --runtime=nvidia)
    cdi_specs: tuple[str, ...] = ()  # CDI spec files naming nvidia.com/gpu
    unreadable: Optional[str] = None

    @property
    def searched(self) -> str:
        if self.dockerd_path:
            return self.dockerd_path
        why = "no running dockerd found" if self.dockerd_running is False else "dockerd's own PATH needs root to read"
        return f"{SYSTEMD_PATH}, systemd's default ({why})"


def parse_gpu_hooks(text: str) -> GpuHooks:
    values: dict[str, str] = {}
    specs: list[str] = []
    for line in strip_provenance(text).splitlines():
        key, sep, value = line.partition(": ")
        if not sep:
            continue
        if key == "cdi_spec":
            specs.append(value.strip())
        elif re.match(r"^[a-z_-]+$", key):
            values[key] = value.strip()
    if values.get("end") != "ok":
        return GpuHooks(unreadable=f"the GPU hook probe printed {excerpt(text)}")

    def found(name: str) -> Optional[str]:
        value = values.get(name, "none")
        return None if value == "none" else value

    path = values.get("dockerd_path")
    return GpuHooks(dockerd_running=values.get("dockerd_pid", "none") != "none",
                    dockerd_path=None if path in (None, "unknown") else path,
                    runtime_hook=found(HOOK), cdi_hook=found(CDI_HOOK), nvidia_runtime=found("nvidia-container-runtime"),
                    cdi_specs=tuple(specs))
