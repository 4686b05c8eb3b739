"""Verdicts on GPUs: the ones the job will use, the runtime that exposes them, who holds them,
the NVSwitch fabric and the driver."""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

from clusterctl.models import CheckResult, GpuSelection, Inventory
from clusterctl.preflight.facts.gpu_runtime import GpuHooks
from clusterctl.preflight.facts.host import DockerInfo
from clusterctl.preflight.facts.nvidia import GpuInventory, GpuProcess
from clusterctl.preflight.facts.nvlink import SmiQuery
from clusterctl.preflight.verdicts.common import FAIL, PASS, WARN, cannot_read, majority, verdict


def gpu_selection(inventory: Inventory, host: str) -> GpuSelection:
    """What the inventory asks of `host`: its own `gpus:`, else container.gpus, else all."""
    own = inventory.host(host).gpus
    if own is not None:
        return own
    return inventory.container.gpus if inventory.container else "all"


def check_gpus(host: str, inventory: Inventory, gpus: GpuInventory) -> CheckResult:
    """Visible GPUs (nvidia-smi on the host) against hosts[].gpus / container.gpus and job.nproc_per_node."""
    selection = gpu_selection(inventory, host)
    nproc = inventory.job.nproc_per_node
    if selection == "none":
        return verdict(host, "gpus", PASS, "no GPUs asked for (gpus: none): ranks run on CPU")
    if gpus.unreadable:
        return cannot_read(host, "gpus", gpus.unreadable, f"run `nvidia-smi` on {host}; a driver this new or old may "
                           "need a clusterctl update")
    visible = list(gpus.indices)
    if not visible:
        reason = gpus.error or "nvidia-smi lists no GPU"
        asked = inventory.uses_container or inventory.host(host).gpus is not None
        if not asked:  # ranks on the bare host, no GPUs named: a CPU rehearsal is legitimate
            return verdict(host, "gpus", WARN, f"no GPU visible on {host} ({reason}): ranks run on CPU with gloo",
                           f"set hosts[{host}].gpus: none to say so, or install the NVIDIA driver")
        return verdict(host, "gpus", FAIL, f"no GPU visible on {host}: {reason}",
                       f"install the NVIDIA driver on {host} so `nvidia-smi` works, or set hosts[{host}].gpus: none")
    if isinstance(selection, (tuple, list)):
        missing = [i for i in selection if i not in visible]
        if missing:
            return verdict(host, "gpus", FAIL, f"hosts[{host}].gpus asks for {list(selection)} but {host} shows GPUs "
                           f"{visible}: {missing} do not exist", f"set hosts[{host}].gpus: {visible} (or a subset)",
                           "gpu_ordinal")
        usable = list(selection)
    elif isinstance(selection, int):
        if selection > len(visible):
            return verdict(host, "gpus", FAIL, f"the inventory asks for {selection} GPUs but {host} shows "
                           f"{len(visible)} (GPU ids: {', '.join(map(str, visible))})",
                           f"set hosts[{host}].gpus: {len(visible)}",
                           "gpu_ordinal")
        usable = visible[:selection]
    else:
        usable = visible
    name = gpus.gpus[0].name
    if isinstance(nproc, int) and nproc > len(usable):
        return verdict(host, "gpus", FAIL, f"job.nproc_per_node is {nproc} but {host} has {len(usable)} usable GPU(s) "
                       f"(GPU ids: {', '.join(map(str, usable))}): ranks {len(usable)}..{nproc - 1} would fail "
                       "with 'invalid device ordinal'",
                       f"set job.nproc_per_node: {len(usable)} (or auto)", "gpu_ordinal")
    if isinstance(nproc, int) and nproc < len(usable):
        return verdict(host, "gpus", WARN, f"job.nproc_per_node is {nproc}: {len(usable) - nproc} of the {len(usable)} "
                       f"usable GPUs on {host} stay idle", "set job.nproc_per_node: auto to use every GPU")
    return verdict(host, "gpus", PASS, f"{len(usable)} x {name} usable (GPU ids: {', '.join(map(str, usable))})")


def check_gpu_runtime(host: str, info: DockerInfo, selection: GpuSelection = "all", uses_container: bool = True,
                      hooks: Optional[GpuHooks] = None, oci_runtime: Optional[str] = None) -> CheckResult:
    """Can dockerd serve what clusterctl asks: `--gpus` (a device request), and `--runtime=nvidia`
    only when `oci_runtime` says the inventory asks for it. `hooks`: what dockerd finds on its PATH."""
    if not uses_container or selection == "none":
        return verdict(host, "gpu_runtime", PASS, "no GPUs in a container: no NVIDIA runtime needed")
    if info.unreadable:
        return cannot_read(host, "gpu_runtime", info.unreadable)
    if not info.reachable:
        return verdict(host, "gpu_runtime", FAIL, f"cannot ask Docker for its runtimes: {info.error}",
                       "fix the docker check first")
    install = (f"install nvidia-container-toolkit on {host}, then `nvidia-ctk runtime configure --runtime=docker && "
               "systemctl restart docker` (dockerd looks for the hook when it starts)")
    if oci_runtime == "nvidia" and not info.has_nvidia_runtime:
        return verdict(host, "gpu_runtime", FAIL, f"the inventory asks for the nvidia runtime but Docker on {host} "
                       f"lists only {', '.join(info.runtimes) or 'none'}", install, "docker_no_gpu_runtime")
    if hooks is None:  # not probed (an older caller): the registered runtime is the only evidence
        if info.has_nvidia_runtime:
            return verdict(host, "gpu_runtime", PASS, "nvidia runtime registered: nvidia-container-toolkit is installed")
        return verdict(host, "gpu_runtime", WARN, f"Docker on {host} lists no nvidia runtime and its PATH was not "
                       "searched for the --gpus hook", install)
    if hooks.unreadable:
        return cannot_read(host, "gpu_runtime", hooks.unreadable)
    if hooks.runtime_hook:
        return verdict(host, "gpu_runtime", PASS, f"--gpus is served by {hooks.runtime_hook} on dockerd's PATH")
    if hooks.cdi_hook and hooks.cdi_specs:
        cdi = f"{hooks.cdi_hook} and the CDI spec {', '.join(hooks.cdi_specs)}"
        if (info.major_version or 0) >= 29:
            return verdict(host, "gpu_runtime", PASS, f"--gpus is served through CDI: {cdi}")
        return verdict(host, "gpu_runtime", WARN, f"only CDI is set up ({cdi}); Docker {info.server_version} may "
                       "predate serving --gpus through CDI (moby/moby#50228), and no nvidia-container-runtime-hook is "
                       f"on dockerd's PATH", install)
    return verdict(host, "gpu_runtime", FAIL, f"no nvidia-container-runtime-hook on dockerd's PATH ({hooks.searched}) "
                   f"and no CDI spec for nvidia.com/gpu: `docker run --gpus` fails on {host} with 'could not select "
                   f"device driver \"\" with capabilities: [[gpu]]'", f"{install}; or set container.gpus: none",
                   "docker_no_gpu_runtime")


def check_gpu_busy(host: str, processes: Sequence[GpuProcess], gpus: Optional[GpuInventory] = None,
                   own_pids: Sequence[int] = (), selection: GpuSelection = "all",
                   unreadable: Optional[str] = None) -> CheckResult:
    """Compute processes already on the GPUs the job will use (other jobs, stale ranks)."""
    if unreadable and selection != "none":
        return cannot_read(host, "gpu_busy", unreadable, f"run `nvidia-smi` on {host} to see who uses the GPUs")
    def index(process: GpuProcess) -> Optional[int]:
        if process.gpu_index is not None or gpus is None or process.gpu_uuid is None:
            return process.gpu_index
        return gpus.index_of_uuid(process.gpu_uuid)

    wanted = set(selection) if isinstance(selection, (tuple, list)) else None
    foreign = [p for p in processes if p.pid > 0 and p.pid not in own_pids and p.kind in (None, "C", "C+G", "M")
               and (wanted is None or index(p) in wanted)]
    if selection == "none" or not foreign:
        return verdict(host, "gpu_busy", PASS, "no other compute process on the job's GPUs")
    listed = "; ".join(f"GPU {index(p) if index(p) is not None else p.gpu_uuid}: pid {p.pid} {p.process_name} "
                       f"{p.used_memory_mib if p.used_memory_mib is not None else '?'} MiB" for p in foreign)
    busy = {index(p) for p in foreign}
    free = [i for i in (gpus.indices if gpus else ()) if i not in busy]
    keep = f", or leave the busy GPUs out: hosts[{host}].gpus: {free}" if free else ""
    return verdict(host, "gpu_busy", FAIL, f"GPUs on {host} are in use by {listed}",
                   f"stop them on {host} (`kill {' '.join(str(p.pid) for p in foreign)}`; `clusterctl down` removes "
                   f"stale ranks of an earlier run){keep}", "duplicate_gpu")


def check_fabric(host: str, query: SmiQuery) -> CheckResult:
    """NVSwitch fabric state from `nvidia-smi -q` (fabric manager registered every GPU?)."""
    if query.error:
        return verdict(host, "fabric", PASS, f"no fabric to check: {query.error}")
    if query.unreadable:
        return cannot_read(host, "fabric", query.unreadable)
    if not query.fabric_applicable:
        return verdict(host, "fabric", PASS, "no NVSwitch fabric on these GPUs (fabric state N/A)")
    stuck = query.fabric_not_ready
    if stuck:
        states = sorted({f"{entry.state}/{entry.status}" for entry in stuck})
        return verdict(host, "fabric", FAIL, f"{len(stuck)} GPU(s) report fabric state {', '.join(states)}: CUDA will "
                       "fail with 'system not yet initialized' (802)",
                       f"start nvidia-fabricmanager on {host} (`systemctl enable --now nvidia-fabricmanager`); its "
                       f"version must equal the driver's ({query.driver_version or 'see nvidia-smi'})", "fabricmanager")
    return verdict(host, "fabric", PASS, f"fabric Completed/Success on {len(query.fabric)} GPU(s)")


def check_driver_version(versions: Mapping[str, Optional[str]]) -> list[CheckResult]:
    """NVIDIA driver versions (host -> version, None without a driver) must be equal across nodes."""
    common = majority({h: v for h, v in versions.items() if v} or {"": None})
    others = lambda h: ", ".join(o for o, v in versions.items() if v == common and o != h)  # noqa: E731
    results = []
    for host, version in versions.items():
        if version == common:
            results.append(verdict(host, "driver_version", PASS, f"driver {version}"))
        elif version is None:
            results.append(verdict(host, "driver_version", FAIL, f"no NVIDIA driver on {host}",
                                   f"install driver {common} on {host}, as on {others(host)}"))
        else:
            results.append(verdict(host, "driver_version", FAIL, f"{host} runs driver {version}, {others(host)} run "
                                   f"{common}", f"install driver {common} on {host} so every node matches",
                                   "version_mismatch"))
    return results
