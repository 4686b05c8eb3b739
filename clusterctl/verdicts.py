"""Preflight check verdicts: pure functions from facts to `CheckResult`s.

Every detail names its evidence and every fix names the change, in inventory terms
where there is one (`hosts[NAME].gpus`, `container.shm_size`, `rendezvous.port`...).
A failure or warning with a cause from CONTRACT.md's vocabulary starts its detail with
the slug and a colon (`port_in_use: ...`); `cause_of` reads it back.

Cross-node verdicts take a mapping host -> fact (in inventory order, master first) and
return one result per host: pass for the agreeing majority, fail for the odd ones.
"""
from __future__ import annotations

import re
from collections import Counter
from statistics import median
from typing import Any, Callable, Hashable, Mapping, Optional, Sequence, Union

from clusterctl.errors import ClusterctlError
from clusterctl.facts.host import ContainerState, DiskUsage, DockerInfo, MemInfo, Versions
from clusterctl.facts.ib import IbStatus
from clusterctl.facts.net import HostnameResolution, Interface, Listener, RouteInfo, free_port_near, \
    holder_of, interface_with_address, is_virtual_interface
from clusterctl.facts.nvidia import GpuInventory, GpuProcess, SmiQuery
from clusterctl.models import CheckResult, CheckSettings, CheckStatus, ContainerSpec, GpuSelection, Inventory

PASS, WARN, FAIL = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL
CAUSES = ("nic_mismatch", "shm_too_small", "fabricmanager", "docker_no_gpu_runtime", "gpu_ordinal", "oom_killed",
          "duplicate_gpu", "port_in_use", "rdzv_unreachable", "config_divisibility", "driver_too_old",
          "hostname_unresolvable", "ib_config", "version_mismatch")
GIB = 1 << 30


def _result(host: Optional[str], check: str, status: CheckStatus, detail: str, fix: str = "",
            cause: Optional[str] = None) -> CheckResult:
    return CheckResult(host=host, check=check, status=status, detail=f"{cause}: {detail}" if cause else detail, fix=fix)


def cause_of(result: CheckResult) -> Optional[str]:
    """The cause slug a failed or warned check names, if any."""
    head = result.detail.split(":", 1)[0]
    return head if head in CAUSES else None


def _majority(values: Mapping[str, Hashable]) -> Hashable:
    """The most common value; on a tie the one seen first (the master's side)."""
    counts = Counter(values.values())
    order = list(dict.fromkeys(values.values()))
    return max(order, key=lambda value: (counts[value], -order.index(value)))


def _size(n: Optional[int]) -> str:
    if n is None:
        return "?"
    for unit, scale in (("TiB", 1 << 40), ("GiB", GIB), ("MiB", 1 << 20)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}".replace(".0 ", " ")
    return f"{n} B"


# --------------------------------------------------------------------------- connection, docker


def check_ssh(host: str, error: Optional[str], address: str = "", user: Optional[str] = None,
              port: Optional[int] = None) -> CheckResult:
    """The SSH connection's outcome (None = connected)."""
    where = f"{user + '@' if user else ''}{address}{':' + str(port) if port else ''}"
    if error is None:
        return _result(host, "ssh", PASS, f"connected to {where}")
    text = error.lower()
    if "auth" in text or "permission denied" in text:
        fix = (f"set ssh.identity_file (or hosts[{host}].ssh.identity_file) to a key {host} accepts, or fix ssh.user; "
               f"try `ssh {where}` by hand")
    elif "host key" in text or "known_hosts" in text or "identification has changed" in text:
        fix = (f"record {host}'s key: `ssh-keyscan -p {port or 22} {address} >> ~/.ssh/known_hosts` (after checking it), "
               "or set ssh.host_key_policy: accept-new for hosts never seen before")
    else:
        fix = f"check hosts[{host}].address ({address}) and ssh.port; sshd must run on {host} and be reachable from here"
    return _result(host, "ssh", FAIL, f"cannot connect to {where}: {error}", fix)


def check_docker(host: str, info: DockerInfo, uses_container: bool = True) -> CheckResult:
    if not uses_container:
        return _result(host, "docker", PASS, "container.runtime is host: Docker is not needed")
    if not info.reachable:
        reason = info.error or "no server version reported"
        if "not installed" in reason:
            fix = f"install Docker Engine on {host} (apt-get install docker.io), or set container.runtime: host"
        elif "permission denied" in reason.lower():
            fix = f"add ssh.user to the docker group on {host} (`usermod -aG docker USER`, then reconnect), or connect as root"
        else:
            fix = f"start the daemon on {host}: `systemctl enable --now docker`"
        return _result(host, "docker", FAIL, f"Docker engine not usable: {reason}", fix)
    return _result(host, "docker", PASS, f"Docker {info.server_version}, cgroup driver {info.cgroup_driver or '?'}, "
                   f"runtimes {', '.join(info.runtimes) or 'none listed'}")


def check_container(host: str, spec: Optional[ContainerSpec], state: Optional[ContainerState],
                    gpus: Optional[GpuSelection] = None) -> CheckResult:
    """The job container as `docker inspect` shows it, against `container:` in the inventory."""
    if spec is None or spec.runtime != "docker":
        return _result(host, "container", PASS, "no container: the job runs on the bare host")
    if state is not None and state.error and "Cannot connect to the Docker daemon" in state.error:
        return _result(host, "container", FAIL, f"container {spec.name} cannot be inspected: the Docker engine on {host} "
                       f"is not reachable ({state.error})", f"start the daemon on {host} (see the docker check), "
                       "then `clusterctl up` restarts the container")
    if state is None or state.error or state.status == "missing":
        reason = state.error if state and state.error else "not found"
        return _result(host, "container", FAIL, f"container {spec.name} does not exist ({reason})",
                       "run `clusterctl up` to create it")
    wanted_gpus = spec.gpus if gpus is None else gpus
    problems, cause = [], None
    if state.image != spec.image:
        problems.append(f"runs image {state.image}, the inventory says container.image: {spec.image}")
    if state.network_mode != "host":
        problems.append(f"network mode is {state.network_mode}, ranks need --net=host")
        cause = "nic_mismatch"
    if wanted_gpus != "none" and state.gpu_request is None:
        problems.append("was created without GPUs (no --gpus device request)")
    if problems:
        return _result(host, "container", FAIL, f"container {spec.name} " + "; ".join(problems),
                       "`clusterctl down` then `clusterctl up` recreates it from the inventory", cause)
    if not state.running:
        return _result(host, "container", FAIL, f"container {spec.name} is {state.status}, not running",
                       f"`clusterctl up` starts it again; `docker logs {spec.name}` on {host} tells why it stopped")
    return _result(host, "container", PASS, f"container {spec.name} running {state.image}, --net=host, "
                   f"GPUs {state.gpu_request or 'none'}")


# --------------------------------------------------------------------------- GPUs


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
        return _result(host, "gpus", PASS, "no GPUs asked for (gpus: none): ranks run on CPU")
    visible = list(gpus.indices)
    if not visible:
        reason = gpus.error or "nvidia-smi lists no GPU"
        asked = inventory.uses_container or inventory.host(host).gpus is not None
        if not asked:  # ranks on the bare host, no GPUs named: a CPU rehearsal is legitimate
            return _result(host, "gpus", WARN, f"no GPU visible on {host} ({reason}): ranks run on CPU with gloo",
                           f"set hosts[{host}].gpus: none to say so, or install the NVIDIA driver")
        return _result(host, "gpus", FAIL, f"no GPU visible on {host}: {reason}",
                       f"install the NVIDIA driver on {host} so `nvidia-smi` works, or set hosts[{host}].gpus: none")
    if isinstance(selection, (tuple, list)):
        missing = [i for i in selection if i not in visible]
        if missing:
            return _result(host, "gpus", FAIL, f"hosts[{host}].gpus asks for {list(selection)} but {host} shows GPUs "
                           f"{visible}: {missing} do not exist", f"set hosts[{host}].gpus: {visible} (or a subset)",
                           "gpu_ordinal")
        usable = list(selection)
    elif isinstance(selection, int):
        if selection > len(visible):
            return _result(host, "gpus", FAIL, f"the inventory asks for {selection} GPUs but {host} shows "
                           f"{len(visible)} ({visible})", f"set hosts[{host}].gpus: {len(visible)}", "gpu_ordinal")
        usable = visible[:selection]
    else:
        usable = visible
    name = gpus.gpus[0].name
    if isinstance(nproc, int) and nproc > len(usable):
        return _result(host, "gpus", FAIL, f"job.nproc_per_node is {nproc} but {host} has {len(usable)} usable GPUs "
                       f"{usable}: ranks {len(usable)}..{nproc - 1} would fail with 'invalid device ordinal'",
                       f"set job.nproc_per_node: {len(usable)} (or auto)", "gpu_ordinal")
    if isinstance(nproc, int) and nproc < len(usable):
        return _result(host, "gpus", WARN, f"job.nproc_per_node is {nproc}: {len(usable) - nproc} of the {len(usable)} "
                       f"usable GPUs on {host} stay idle", "set job.nproc_per_node: auto to use every GPU")
    return _result(host, "gpus", PASS, f"{len(usable)} x {name} usable: GPUs {usable}")


def check_gpu_runtime(host: str, info: DockerInfo, selection: GpuSelection = "all",
                      uses_container: bool = True) -> CheckResult:
    if not uses_container or selection == "none":
        return _result(host, "gpu_runtime", PASS, "no GPUs in a container: no NVIDIA runtime needed")
    if not info.reachable:
        return _result(host, "gpu_runtime", FAIL, f"cannot ask Docker for its runtimes: {info.error}",
                       "fix the docker check first")
    if info.has_nvidia_runtime:
        return _result(host, "gpu_runtime", PASS, f"nvidia runtime registered (default runtime {info.default_runtime})")
    return _result(host, "gpu_runtime", FAIL, f"Docker on {host} lists no nvidia runtime (runtimes: "
                   f"{', '.join(info.runtimes) or 'none'}): containers would start without GPUs",
                   f"install nvidia-container-toolkit on {host}, then `nvidia-ctk runtime configure --runtime=docker "
                   f"&& systemctl restart docker`; or set container.gpus: none", "docker_no_gpu_runtime")


def check_gpu_busy(host: str, processes: Sequence[GpuProcess], gpus: Optional[GpuInventory] = None,
                   own_pids: Sequence[int] = (), selection: GpuSelection = "all") -> CheckResult:
    """Compute processes already on the GPUs the job will use (other jobs, stale ranks)."""
    def index(process: GpuProcess) -> Optional[int]:
        if process.gpu_index is not None or gpus is None or process.gpu_uuid is None:
            return process.gpu_index
        return gpus.index_of_uuid(process.gpu_uuid)

    wanted = set(selection) if isinstance(selection, (tuple, list)) else None
    foreign = [p for p in processes if p.pid not in own_pids and p.kind in (None, "C", "C+G", "M")
               and (wanted is None or index(p) in wanted)]
    if selection == "none" or not foreign:
        return _result(host, "gpu_busy", PASS, "no other compute process on the job's GPUs")
    listed = "; ".join(f"GPU {index(p) if index(p) is not None else p.gpu_uuid}: pid {p.pid} {p.process_name} "
                       f"{p.used_memory_mib if p.used_memory_mib is not None else '?'} MiB" for p in foreign)
    busy = {index(p) for p in foreign}
    free = [i for i in (gpus.indices if gpus else ()) if i not in busy]
    keep = f", or leave the busy GPUs out: hosts[{host}].gpus: {free}" if free else ""
    return _result(host, "gpu_busy", FAIL, f"GPUs on {host} are in use by {listed}",
                   f"stop them on {host} (`kill {' '.join(str(p.pid) for p in foreign)}`; `clusterctl down` removes "
                   f"stale ranks of an earlier run){keep}", "duplicate_gpu")


def check_fabric(host: str, query: SmiQuery) -> CheckResult:
    """NVSwitch fabric state from `nvidia-smi -q` (fabric manager registered every GPU?)."""
    if query.error:
        return _result(host, "fabric", PASS, f"no fabric to check: {query.error}")
    if not query.fabric_applicable:
        return _result(host, "fabric", PASS, "no NVSwitch fabric on these GPUs (fabric state N/A)")
    stuck = query.fabric_not_ready
    if stuck:
        states = sorted({f"{entry.state}/{entry.status}" for entry in stuck})
        return _result(host, "fabric", FAIL, f"{len(stuck)} GPU(s) report fabric state {', '.join(states)}: CUDA will "
                       "fail with 'system not yet initialized' (802)",
                       f"start nvidia-fabricmanager on {host} (`systemctl enable --now nvidia-fabricmanager`); its "
                       f"version must equal the driver's ({query.driver_version or 'see nvidia-smi'})", "fabricmanager")
    return _result(host, "fabric", PASS, f"fabric Completed/Success on {len(query.fabric)} GPU(s)")


def check_driver_version(versions: Mapping[str, Optional[str]]) -> list[CheckResult]:
    """NVIDIA driver versions (host -> version, None without a driver) must be equal across nodes."""
    common = _majority({h: v for h, v in versions.items() if v} or {"": None})
    others = lambda h: ", ".join(o for o, v in versions.items() if v == common and o != h)  # noqa: E731
    results = []
    for host, version in versions.items():
        if version == common:
            results.append(_result(host, "driver_version", PASS, f"driver {version}"))
        elif version is None:
            results.append(_result(host, "driver_version", FAIL, f"no NVIDIA driver on {host}",
                                   f"install driver {common} on {host}, as on {others(host)}"))
        else:
            results.append(_result(host, "driver_version", FAIL, f"{host} runs driver {version}, {others(host)} run "
                                   f"{common}", f"install driver {common} on {host} so every node matches",
                                   "version_mismatch"))
    return results


# --------------------------------------------------------------------------- rendezvous, network


def check_rdzv_port_free(host: str, port: int, listeners: Sequence[Listener]) -> CheckResult:
    """On the master: nothing may listen on rendezvous.port before launch."""
    holder = holder_of(listeners, port)
    if holder is None:
        return _result(host, "rdzv_port_free", PASS, f"port {port} is free on {host}")
    spare = free_port_near(listeners, port)
    who = f"pid {holder.pid} ({holder.process})" if holder.pid else "a process this user cannot see (run as root to name it)"
    stop = f"stop {who} on {host}" if holder.pid else f"find it with `ss -ltnp 'sport = :{port}'` as root on {host}"
    return _result(host, "rdzv_port_free", FAIL, f"port {port} on {host} is held: {holder.describe()}",
                   f"{stop} (`clusterctl down` if it is a stale torchrun of an earlier run), or set "
                   f"rendezvous.port: {spare}", "port_in_use")


def check_rdzv_reachable(host: str, master: str, address: str, port: int, connect_error: Optional[str],
                         worker_rules: Sequence[str] = (), master_rules: Sequence[str] = ()) -> CheckResult:
    """A worker's TCP connect to master:port. 'Connection refused' with no rule in the way means
    the path is open and nothing listens yet, which is normal before launch."""
    quoted = "; ".join([f"on {master}: '{r}'" for r in master_rules] + [f"on {host}: '{r}'" for r in worker_rules])
    if connect_error is None:
        return _result(host, "rdzv_reachable", PASS, f"{host} connected to {master} at {address}:{port}")
    if "refused" in connect_error.lower() and not quoted:
        return _result(host, "rdzv_reachable", PASS, f"{master} at {address}:{port} answered (connection refused: "
                       "nothing listens there yet); the path is open")
    detail = f"{host} cannot open a TCP connection to {master} at {address}:{port}: {connect_error}"
    if quoted:
        detail += f"; blocking rules {quoted}"
    fixes = []
    if master_rules:
        fixes.append(f"on {master} allow the port: {_allow_command(master_rules, port)}")
    if worker_rules:
        fixes.append(f"on {host} allow outgoing {port}: remove the rules quoted above")
    if not fixes:
        fixes.append(f"check that hosts[{master}].address ({address}) is {master}'s address on the network the "
                     f"nodes share and that {host} routes to it (`ip route get {address}` on {host})")
    fixes.append(f"or set rendezvous.port to a port the firewall already lets through")
    return _result(host, "rdzv_reachable", FAIL, detail, "; ".join(fixes), "rdzv_unreachable")


def _allow_command(rules: Sequence[str], port: int) -> str:
    """The command that opens `port` in the firewall the quoted rules come from."""
    first = rules[0]
    if first.startswith(("-A ", ":")):
        return f"`iptables -I INPUT -p tcp --dport {port} -j ACCEPT` (and save it with your rules)"
    if re.search(r"\b(DENY|REJECT|ALLOW)\b|^Default:", first):
        return f"`ufw allow {port}/tcp` (or `ufw allow from SUBNET to any port {port} proto tcp`)"
    return f"`nft insert rule inet filter input tcp dport {port} accept` (adjust to the table/chain quoted)"


def check_nic(routes: Mapping[str, RouteInfo], master: str, interfaces: Mapping[str, Sequence[Interface]] = {},
              overrides: Mapping[str, Optional[str]] = {}) -> list[CheckResult]:
    """Each node's route to the master picks the NCCL/Gloo socket interface (hosts[].nic overrides).

    `interfaces` (host -> `ip addr` fact) names the master's own NIC, whose route to itself says dev lo.
    """
    chosen: dict[str, str] = {}
    results: dict[str, CheckResult] = {}
    for host, route in routes.items():
        if overrides.get(host):
            chosen[host] = overrides[host]
            continue
        nic, problem = _route_nic(host, route, master, interfaces.get(host, ()))
        if problem:
            results[host] = problem
        else:
            chosen[host] = nic
    per_node = ", ".join(f"{h}: {n}" for h, n in chosen.items())
    for host, nic in chosen.items():
        route = routes[host]
        how = f"hosts[{host}].nic: {nic}" if overrides.get(host) else \
            f"route to {master} {route.dst}: dev {nic} src {route.src}{' via ' + route.via if route.via else ''}"
        env = f"NCCL_SOCKET_IFNAME={nic} GLOO_SOCKET_IFNAME={nic}"
        if len(set(chosen.values())) > 1:
            results[host] = _result(host, "nic", WARN, f"{how}; interface names differ across nodes ({per_node}): "
                                    f"clusterctl sets them per node, here {env}",
                                    f"nothing to change; pin one with hosts[{host}].nic if detection picks wrong")
        else:
            results[host] = _result(host, "nic", PASS, f"{how}; clusterctl sets {env}")
    return [results[host] for host in routes]


def _route_nic(host: str, route: RouteInfo, master: str,
               interfaces: Sequence[Interface]) -> tuple[Optional[str], Optional[CheckResult]]:
    """(the interface the route leaves through, or the verdict on why it is unusable)."""
    if route.error:
        return None, _result(host, "nic", FAIL, f"{host} has no route to {master}: {route.error}",
                             f"add a route from {host} to {master}'s address, or set hosts[{master}].address to an "
                             "address both share", "rdzv_unreachable")
    nic = route.dev
    if route.local and host == master:
        own = interface_with_address(interfaces, route.src or route.dst or "")
        if own is None:
            return None, _result(host, "nic", WARN, f"{host} is the master and its route says dev lo; no interface "
                                 f"known to hold {route.src}", f"set hosts[{host}].nic to the interface the workers reach")
        nic = own.name
    if nic == "lo" or is_virtual_interface(nic or "lo"):
        return None, _result(host, "nic", FAIL, f"the route from {host} to {master} ({route.dst}) leaves through {nic}, "
                             "a virtual interface: NCCL/Gloo would bind there and peers never answer",
                             f"set hosts[{master}].address to {master}'s LAN address, or hosts[{host}].nic to the "
                             "physical interface", "nic_mismatch")
    return nic, None


def check_hostname(host: str, resolution: HostnameResolution) -> CheckResult:
    name = resolution.hostname
    note = "the launcher passes --local-addr (and is_host on the master), so torchrun does not rely on it"
    if not resolution.resolvable:
        return _result(host, "hostname", WARN, f"hostname {name} of {host} does not resolve; {note}",
                       f"add `ADDRESS {name}` to /etc/hosts on {host} for tools that look it up",
                       "hostname_unresolvable")
    if resolution.loopback_only:
        return _result(host, "hostname", WARN, f"hostname {name} of {host} resolves to loopback "
                       f"{', '.join(resolution.addresses)}; {note}",
                       f"map {name} to its LAN address in /etc/hosts on {host} (replace the 127.0.1.1 line)",
                       "nic_mismatch")
    return _result(host, "hostname", PASS, f"hostname {name} resolves to {', '.join(resolution.addresses)}")


def check_ib(statuses: Mapping[str, IbStatus], mode: str = "auto") -> list[CheckResult]:
    """InfiniBand/RoCE per node and across nodes; checks.ib: auto | required | off."""
    if mode == "off":
        return [_result(h, "ib", PASS, "checks.ib is off: clusterctl sets NCCL_IB_DISABLE=1 (TCP sockets)")
                for h in statuses]
    with_ib = {h: s for h, s in statuses.items() if s.nccl_ports}
    layer = _majority({h: s.link_layer for h, s in with_ib.items()}) if with_ib else None
    count = _majority({h: len(s.nccl_ports) for h, s in with_ib.items()}) if with_ib else 0
    return [_ib_verdict(host, status, mode, bool(with_ib), layer, count) for host, status in statuses.items()]


def _ib_verdict(host: str, status: IbStatus, mode: str, any_ib: bool, layer: Optional[str], count: int) -> CheckResult:
    ports = status.nccl_ports
    if not ports:
        why = status.error or "no port is Active/LinkUp: " + ", ".join(p.describe() for p in status.ports)
        if mode == "required" or any_ib:
            peers = " while other nodes have active ports" if any_ib else ""
            return _result(host, "ib", FAIL, f"no usable IB/RoCE port on {host}{peers}: {why}",
                           f"bring the ports up on {host} (cables, subnet manager, `ibstat`), or set checks.ib: off so "
                           "every node uses TCP (NCCL_IB_DISABLE=1)", "ib_config")
        return _result(host, "ib", PASS, f"no InfiniBand/RoCE on {host}, NCCL uses TCP sockets: {why}")
    hca = status.nccl_ib_hca
    if layer and status.link_layer != layer:
        return _result(host, "ib", FAIL, f"{host} would use {status.link_layer} ports ({hca}) while the other nodes "
                       f"use {layer}", f"give {host} the same fabric as the others, or set checks.ib: off", "ib_config")
    down = [p.describe() for p in status.inactive_ports if p.link_layer == status.link_layer]
    if status.warnings:
        return _result(host, "ib", WARN, f"NCCL_IB_HCA={hca}, but ibstat stopped early: {status.warnings[-1]}",
                       f"run `ibstat` on {host}; a device it cannot stat may be missing from NCCL_IB_HCA", "ib_config")
    if len(ports) < count or down:
        fewer = f"only {len(ports)} active port(s) where the other nodes have {count}; " if len(ports) < count else ""
        return _result(host, "ib", WARN, f"NCCL_IB_HCA={hca}: {fewer}down: {', '.join(down) or 'none'}",
                       f"bring up the down ports on {host}; the slowest node sets the pace", "ib_config")
    return _result(host, "ib", PASS, f"NCCL_IB_HCA={hca} ({len(ports)} x {ports[0].rate} Gb/s {status.link_layer})")


# --------------------------------------------------------------------------- resources


def check_shm(host: str, shm: Optional[DiskUsage], settings: CheckSettings,
              container: Optional[ContainerSpec] = None) -> CheckResult:
    """/dev/shm as the ranks see it (`df -B1 /dev/shm` inside the container)."""
    if container is not None and container.ipc == "host":
        return _result(host, "shm", PASS, "container.ipc is host: ranks share the host's /dev/shm")
    if shm is None:
        return _result(host, "shm", WARN, f"could not read the size of /dev/shm on {host}",
                       "set container.shm_size: 16g or container.ipc: host to be sure")
    if shm.size_bytes < settings.shm_min_bytes:
        fix = ("set container.shm_size: 16g or container.ipc: host" if container is not None and container.runtime == "docker"
               else f"grow /dev/shm on {host} (`mount -o remount,size=16g /dev/shm`)")
        return _result(host, "shm", FAIL, f"/dev/shm on {host} is {_size(shm.size_bytes)}, below "
                       f"{_size(settings.shm_min_bytes)}: NCCL and DataLoader workers run out of shared memory",
                       fix, "shm_too_small")
    return _result(host, "shm", PASS, f"/dev/shm is {_size(shm.size_bytes)} ({_size(shm.avail_bytes)} free)")


def check_disk(host: str, usage: Optional[DiskUsage], settings: CheckSettings, path: str) -> CheckResult:
    """Free space where outputs and rank logs go (job.outputs)."""
    if usage is None:
        return _result(host, "disk", WARN, f"could not read free space at {path} on {host}",
                       f"make sure job.outputs ({path}) exists on {host}")
    if usage.avail_bytes < settings.disk_min_bytes:
        return _result(host, "disk", FAIL, f"only {_size(usage.avail_bytes)} free at {path} ({usage.mount} on "
                       f"{usage.filesystem}), below {_size(settings.disk_min_bytes)}",
                       f"free space on {usage.mount} of {host}, or point job.outputs at a filesystem with room")
    return _result(host, "disk", PASS, f"{_size(usage.avail_bytes)} free at {path} ({usage.mount})")


def check_memory(host: str, mem: Optional[MemInfo], min_available_bytes: int = 4 * GIB) -> CheckResult:
    if mem is None:
        return _result(host, "memory", WARN, f"could not read /proc/meminfo on {host}", "")
    low = mem.available_bytes < min_available_bytes or mem.available_bytes < mem.total_bytes // 10
    detail = f"{_size(mem.available_bytes)} of {_size(mem.total_bytes)} RAM available on {host}"
    if low:
        return _result(host, "memory", WARN, f"{detail}: ranks may be OOM-killed while loading weights",
                       f"stop what holds memory on {host}, or run fewer ranks there (job.nproc_per_node)", "oom_killed")
    return _result(host, "memory", PASS, detail)


# --------------------------------------------------------------------------- cross-node software


def check_versions(versions: Mapping[str, Versions], container: Optional[ContainerSpec] = None) -> list[CheckResult]:
    """python / torch / CUDA / NCCL must be identical on every node."""
    working = {h: v for h, v in versions.items() if v.torch}
    common = _majority({h: v.key for h, v in working.items()}) if working else None
    reference = next((v for v in working.values() if v.key == common), None)
    agreeing = [h for h, v in working.items() if v.key == common]
    in_image = container is not None and container.runtime == "docker"
    results = []
    for host, version in versions.items():
        if not version.torch:
            fix = (f"use a container.image that has torch (python {version.python or '?'} there has none)" if in_image
                   else f"install torch on {host} (job.python: {version.python or 'python3'} cannot import it)")
            results.append(_result(host, "versions", FAIL, f"torch unusable on {host}: {version.error}", fix))
        elif version.key == common:
            results.append(_result(host, "versions", PASS, version.describe()))
        else:
            fix = ("set container.pull: always: the image tag resolves to different builds on different nodes"
                   if in_image else f"install the same versions on {host} as on {agreeing[0]}")
            results.append(_result(host, "versions", FAIL, f"{host} has {version.describe()} but "
                                   f"{', '.join(agreeing)} have {reference.describe()}", fix, "version_mismatch"))
    return results


def check_clock_skew(offsets: Mapping[str, float], settings: CheckSettings) -> list[CheckResult]:
    """Clock offsets (seconds, each node minus the controller) compared with the nodes' median."""
    middle = median(offsets.values()) if offsets else 0.0
    results = []
    for host, offset in offsets.items():
        skew = offset - middle
        if abs(skew) > settings.clock_skew_warn_s:
            side = "ahead of" if skew > 0 else "behind"
            results.append(_result(host, "clock_skew", WARN, f"{host}'s clock is {abs(skew):.2f} s {side} the other "
                                   f"nodes (limit checks.clock_skew_warn_s: {settings.clock_skew_warn_s} s): log "
                                   "timestamps will not line up", f"enable NTP on {host} (`timedatectl set-ntp true` "
                                   "or chrony)"))
        else:
            results.append(_result(host, "clock_skew", PASS, f"clock within {abs(skew):.3f} s of the other nodes"))
    return results


def check_topology(build: Union[Callable[[], Any], str, BaseException]) -> CheckResult:
    """Wraps the topology planner: a callable that builds it (raising TopologyError), or its message."""
    if callable(build):
        try:
            topology = build()
        except ClusterctlError as exc:
            return _result(None, "topology", FAIL, exc.what, exc.fix or "", "config_divisibility"
                           if "divid" in exc.what else None)
        summary = ", ".join(f"{key} {getattr(topology, key)}" for key in ("world_size", "nproc_per_node", "nnodes")
                            if hasattr(topology, key))
        return _result(None, "topology", PASS, summary or "the job lays out on the hosts")
    if isinstance(build, ClusterctlError):
        return _result(None, "topology", FAIL, build.what, build.fix or "")
    return _result(None, "topology", FAIL, str(build), "")
