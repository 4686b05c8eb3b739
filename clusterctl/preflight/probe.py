"""Preflight: gather every node's facts in one round trip, then judge them (clusterctl.preflight.verdicts).

Steps: (1) a batch probe per node, (2) a clock read, (3) the per-node and cross-node
verdicts, (4) the rendezvous port: free on the master, then reachable from every worker
over TCP at the real address and port (a temporary listener on the master; on failure the
firewall rules of both ends are read and the blocking rule quoted).

The probe runs under LC_ALL=C (see facts.in_c_locale): translated headers and messages are
not read. A section whose output was not understood makes its check warn, naming the
command and quoting what it printed; it never passes.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Optional, Sequence

from clusterctl.preflight import facts, verdicts
from clusterctl.executor import Background, Connections, for_each_host, run_commands, wait_until
from clusterctl.models import CheckResult, CheckStatus, Command, Host, HostResult, HostStatus, Inventory
from clusterctl.plan.container import in_container, on_host_or_in_container
from clusterctl.transport import BATCH_MARK, TcpForwardingDisabled, batch_command, split_batch
from clusterctl.transport.docker_engine import EngineNotFound, translated

LISTEN_S = 6  # the listener's life: workers connect (3 s timeout each, in parallel) well within it
LISTEN_READY_S = 8.0  # the listener's python (in the container) prints "listening" within this

# Ends when every worker connected, after `seconds`, or as soon as its stdin reaches EOF: stdin is
# held open by the controller's connection, so an interrupted or killed clusterctl never leaves
# the rendezvous port taken for the next `up`/`run`.
_LISTENER = r'''
import os, select, socket, sys, time
port, expected, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[4] else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[4], port)); s.listen(128)
print("listening", flush=True)
seen, end = 0, time.time() + seconds
while seen < expected and time.time() < end:
    ready, _, _ = select.select([s, sys.stdin], [], [], 0.5)
    if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1024):
        break
    if s in ready:
        c, _ = s.accept(); c.close(); seen += 1
print("accepted", seen, flush=True)
'''

_CONNECT = r'''
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close(); print("connected")
except OSError as e:
    print("error:", e.strerror or e); sys.exit(1)
'''


@dataclass(frozen=True)
class Probe:
    docker: object
    container: object
    gpus: object
    apps: tuple
    route: object
    interfaces: tuple
    hostname: object
    ib: object
    shm: object
    disk: object
    memory: object
    versions: object
    listeners: tuple
    topology: object = None  # facts.GpuTopology (host side)
    fabric: object = None  # facts.SmiQuery (host side)
    hooks: object = None  # facts.GpuHooks, with a container that wants GPUs
    boot_id: str = ""  # with the container's instance: whether `run` may reuse these facts (node_facts.py)
    # section -> why its output was not understood, for the parsers that return a tuple or None
    unreadable: Mapping[str, str] = field(default_factory=dict)


IN_CONTAINER = ("gpus", "shm", "versions")  # sections read where the ranks run


def probe_command(inventory: Inventory, host: Host, container_cli: bool = True) -> Command:
    """One round trip per node. With a container and `container_cli`, `docker info`, `docker
    inspect` and one `docker exec` for what is read inside; without `container_cli` those come
    from the engine API instead (`probe_node`)."""
    sections = [
        ("apps", facts.NVIDIA_SMI_APPS),
        ("topo", facts.NVIDIA_SMI_TOPO),
        ("smi_query", facts.NVIDIA_SMI_QUERY),
        ("route", facts.route_get_command(inventory.rendezvous_address)),
        ("addr", facts.IP_ADDR_PROBE),
        ("hostname", facts.HOSTNAME_RESOLUTION),
        ("ib_sysfs", facts.IB_SYSFS),
        ("ibstat", facts.IBSTAT),
        ("disk", Command(on_host_or_in_container(inventory, inventory.job.outputs, facts.df_at_argv))),
        ("memory", facts.MEMINFO),
        ("boot_id", facts.BOOT_ID),
    ]
    if host.name == inventory.master.name:
        sections.append(("ss", Command(("sh", "-c", facts.SS_LISTENERS_SCRIPT, "sh", str(inventory.rendezvous.port)))))
    if not inventory.uses_container:
        return facts.in_c_locale(batch_command(_inside(inventory) + sections, timeout=120))
    if verdicts.gpu_selection(inventory, host.name) != "none":
        sections.append(("gpu_hooks", facts.GPU_HOOKS))
    if container_cli:
        sections = [("docker", facts.DOCKER_INFO), ("container", facts.docker_inspect_command(inventory.container.name)),
                    ("in_container", Command(in_container(inventory, _inside_script(inventory))))] + sections
    return facts.in_c_locale(batch_command(sections, timeout=120))


def _inside(inventory: Inventory) -> list[tuple[str, Command]]:
    """The IN_CONTAINER sections."""
    commands = {"gpus": facts.NVIDIA_SMI_GPUS, "shm": Command(facts.df_at_argv("/dev/shm")),
                "versions": facts.versions_command(inventory.job.python)}
    return [(name, commands[name]) for name in IN_CONTAINER]


def _inside_script(inventory: Inventory) -> tuple[str, ...]:
    """The in-container sections as one `sh -c` (its section marks read as the outer batch's),
    under the C locale of its own: `docker exec` does not pass the outer shell's environment."""
    return facts.in_c_locale(batch_command(_inside(inventory))).argv


def probe_node(inventory: Inventory, transport, host: Host) -> HostResult:
    """The batch probe. With a container, the engine's info, the container's state and the
    in-container sections come through the engine API over the node's connection (in `up`, the
    client its docker tasks opened), so no docker CLI process starts for them; where the API
    cannot be reached that way, the CLI reads them and says why (not installed, daemon down,
    no access)."""
    engine = _engine_sections(transport, inventory) if inventory.uses_container else None
    result = run_commands(transport, host, [probe_command(inventory, host, container_cli=engine is None)])
    if engine is None or not result.succeeded:
        return result
    return replace(result, stdout=engine + result.stdout)


def _engine_sections(transport, inventory: Inventory) -> Optional[str]:
    """docker info, inspect and the in-container batch as the sections the CLI would print."""
    name = inventory.container.name
    try:
        client = transport.docker()
        info = client.info()
        try:
            with translated():
                attrs = client.api.inspect_container(name)
        except EngineNotFound:
            attrs = None
        if attrs is None:
            inspected = inside = f"[]\nError: No such container: {name}"
        elif not (attrs.get("State") or {}).get("Running"):
            inspected = json.dumps([attrs])
            inside = f"Error response from daemon: container {name} is not running"
        else:
            inspected = json.dumps([attrs])
            created = client.api.exec_create(name, list(_inside_script(inventory)), stdout=True, stderr=True)
            inside = client.api.exec_start(created["Id"]).decode("utf-8", errors="replace")
    except Exception:  # no engine, no access, no dial-stdio: the CLI says which
        return None
    return (f"{BATCH_MARK}docker\n{json.dumps(info)}\n{BATCH_MARK}container\n{inspected}\n"
            f"{BATCH_MARK}in_container\n{inside}\n")


def parse_probe(stdout: str) -> Probe:
    s = split_batch(stdout)
    for name in IN_CONTAINER:  # no container to exec into: each section shows docker's error
        s.setdefault(name, s.get("in_container", ""))
    shm, disk, memory = facts.parse_df(s.get("shm", "")), facts.parse_df(s.get("disk", "")), \
        facts.parse_meminfo(s.get("memory", ""))
    unreadable = {
        "apps": facts.compute_apps_unreadable(s.get("apps", "")),
        "ss": facts.ss_unreadable(s["ss"]) if "ss" in s else None,
        "shm": None if shm else facts.df_unreadable(s.get("shm", ""), "df -P -B1 /dev/shm"),
        "disk": None if disk else facts.df_unreadable(s.get("disk", "")),
        "memory": None if memory else f"`cat /proc/meminfo` printed {facts.excerpt(s.get('memory', ''))}",
    }
    return Probe(
        docker=facts.parse_docker_info(s.get("docker", "")), container=facts.parse_docker_inspect(s.get("container", "")),
        gpus=facts.parse_gpu_csv(s.get("gpus", "")), apps=facts.parse_compute_apps_csv(s.get("apps", "")),
        route=facts.parse_route_get(s.get("route", "")), interfaces=facts.parse_ip_addr(s.get("addr", "")),
        hostname=facts.parse_hostname_resolution(s.get("hostname", "")),
        ib=facts.ib_status(s.get("ib_sysfs", ""), s.get("ibstat", "")),
        shm=shm, disk=disk, memory=memory, versions=facts.parse_versions(s.get("versions", "")),
        listeners=facts.parse_ss(s.get("ss", "")),
        topology=facts.parse_topology(s["topo"]) if "topo" in s else facts.GpuTopology(error="not read"),
        fabric=facts.parse_smi_query(s.get("smi_query", "")),
        hooks=facts.parse_gpu_hooks(s["gpu_hooks"]) if "gpu_hooks" in s else None,
        boot_id=s.get("boot_id", "").strip(),
        unreadable={name: why for name, why in unreadable.items() if why},
    )


ImagePullChecks = Callable[[Inventory, Sequence[Host], Connections], list[CheckResult]]


def run_checks(inventory: Inventory, hosts: Sequence[Host], connections: Connections,
               image_pull: Optional[ImagePullChecks] = None) -> list[CheckResult]:
    """Every check on every host; unreachable hosts get a failed `ssh` check. `image_pull`: the
    registry's check (registry/image_pull.py), handed in by the caller because the registry stage
    comes after this one; None where the caller asked the registry already (`up` does so before
    changing anything)."""
    return run_checks_and_facts(inventory, hosts, connections, image_pull)[0]


def run_checks_and_facts(inventory: Inventory, hosts: Sequence[Host], connections: Connections,
                         image_pull: Optional[ImagePullChecks] = None) -> tuple[list[CheckResult], dict, dict]:
    """`run_checks`, what `run` may reuse of the probes (node_facts.RememberedFacts by host: nodes
    whose container runs, or without a container), and the GPUs each node reported ({host:
    tuple[facts.Gpu]}, by UUID where nvidia-smi gives one: the health record's GPUs, issue 36)."""
    from clusterctl.preflight.node_facts import RememberedFacts, instance_key

    results = for_each_host(list(hosts), lambda t, h: probe_node(inventory, t, h), connections)
    checks: list[CheckResult] = []
    probes: dict[str, Probe] = {}
    for host in hosts:
        result = results[host.name]
        checks.append(verdicts.check_ssh(host.name, None if result.succeeded else result.detail, host.address,
                                         host.ssh.user, host.ssh.port))
        if result.succeeded:
            probes[host.name] = parse_probe(result.stdout)
    checks += _per_node(inventory, probes)
    if image_pull is not None:
        checks += image_pull(inventory, [h for h in hosts if h.name in probes], connections)
    planner_facts = {h: _node_facts(p, inventory.rendezvous_address) for h, p in probes.items()}
    checks += _cross_node(inventory, probes, planner_facts, connections)
    checks += _rendezvous(inventory, probes, connections)
    reusable = {name: RememberedFacts(instance_key(p.boot_id, p.container.instance if inventory.uses_container else ""),
                                      planner_facts[name], time.time())
                for name, p in probes.items()
                if p.boot_id and (not inventory.uses_container or p.container.instance)}
    return checks, reusable, {name: p.gpus.gpus for name, p in probes.items() if p.gpus.gpus}


def _per_node(inventory: Inventory, probes: dict[str, Probe]) -> list[CheckResult]:
    spec, settings = inventory.container, inventory.checks
    # one node, or every node this machine: ranks talk over loopback whatever the hostname says
    single_node = len(inventory.hosts) == 1 or all(h.is_local for h in inventory.hosts)
    out = []
    for name, p in probes.items():
        selection, why = verdicts.gpu_selection(inventory, name), p.unreadable
        if inventory.uses_container:
            out += [verdicts.check_docker(name, p.docker), verdicts.check_container(name, spec, p.container, selection),
                    verdicts.check_gpu_runtime(name, p.docker, selection, hooks=p.hooks)]
        out += [verdicts.check_gpus(name, inventory, p.gpus),
                verdicts.check_gpu_busy(name, p.apps, p.gpus, selection=selection, unreadable=why.get("apps")),
                verdicts.check_nvlink(name, p.topology, p.fabric, selection),
                verdicts.check_fabric(name, p.fabric),
                verdicts.check_gpu_nics(name, p.topology, p.ib, selection),
                verdicts.check_hostname(name, p.hostname, single_node=single_node),
                verdicts.check_shm(name, p.shm, settings, spec, unreadable=why.get("shm")),
                verdicts.check_disk(name, p.disk, settings, inventory.job.outputs, unreadable=why.get("disk")),
                verdicts.check_memory(name, p.memory, unreadable=why.get("memory"))]
    return out


def _cross_node(inventory: Inventory, probes: dict[str, Probe], node_facts: dict, connections: Connections
                ) -> list[CheckResult]:
    from clusterctl.plan.topology import plan

    master = inventory.master.name
    out = verdicts.check_driver_version({h: p.gpus.driver_version for h, p in probes.items()})
    if all(h.is_local for h in inventory.hosts):  # every rank on this machine: loopback is right
        out += [CheckResult(h, "nic", CheckStatus.PASS, "all nodes are this machine: ranks talk over loopback")
                for h in probes]
    else:
        out += verdicts.check_nic({h: p.route for h, p in probes.items()}, master,
                                  {h: p.interfaces for h, p in probes.items()},
                                  {h.name: h.nic for h in inventory.hosts if h.name in probes})
    out += verdicts.check_ib({h: p.ib for h, p in probes.items()}, inventory.checks.ib)
    out += verdicts.check_versions({h: p.versions for h, p in probes.items()}, inventory.container)
    out += verdicts.check_clock_skew(_clock_offsets(inventory, probes, connections), inventory.checks)
    if len(node_facts) == len(inventory.hosts):
        out.append(verdicts.check_topology(lambda: plan(inventory, node_facts)))
    return out


def _node_facts(p: Probe, master_address: str):
    from clusterctl.preflight.node_facts import node_facts_from

    return node_facts_from(p.gpus, p.route, p.interfaces, p.hostname, p.ib, master_address, p.versions.torch)


def _clock_offsets(inventory: Inventory, probes: dict[str, Probe], connections: Connections) -> dict[str, float]:
    hosts = [h for h in inventory.hosts if h.name in probes]

    def action(transport, host: Host) -> HostResult:
        before = time.time()
        result = run_commands(transport, host, [facts.CLOCK])
        after = time.time()
        remote = facts.parse_clock(result.stdout)
        offset = facts.clock_offset(remote, before, after) if remote is not None else None
        return HostResult(host.name, result.status, data={"offset": offset})

    results = for_each_host(hosts, action, connections)
    return {name: r.data["offset"] for name, r in results.items() if r.data.get("offset") is not None}


def _rendezvous(inventory: Inventory, probes: dict[str, Probe], connections: Connections) -> list[CheckResult]:
    master, port = inventory.master, inventory.rendezvous.port
    if master.name not in probes:
        return []
    free = verdicts.check_rdzv_port_free(master.name, port, probes[master.name].listeners,
                                         unreadable=probes[master.name].unreadable.get("ss"))
    workers = [h for h in inventory.hosts if h.name != master.name and h.name in probes]
    if free.status is CheckStatus.FAIL or not workers:
        return [free]
    errors = _connect_from_workers(inventory, master, workers, connections)
    out = [free]
    blocked = {name: err for name, err in errors.items() if err}
    rules = _firewall_rules(inventory, master, list(blocked), connections) if blocked else {}
    for worker in workers:
        out.append(verdicts.check_rdzv_reachable(
            worker.name, master.name, inventory.rendezvous_address, port, errors.get(worker.name),
            worker_rules=rules.get(worker.name, ()), master_rules=rules.get(master.name, ())))
    return out


def _connect_from_workers(inventory: Inventory, master: Host, workers: list[Host],
                          connections: Connections) -> dict[str, Optional[str]]:
    """Open a listener on the master's real port and address; connect from every worker.

    The connects are made by each worker's sshd (`Transport.connect_tcp`): from the worker's
    network stack and firewall (the container shares them: --net=host) with no process started
    there. A worker whose sshd forbids TCP forwarding connects with the image's python instead."""
    port, python = inventory.rendezvous.port, inventory.job.python
    bind = "127.0.0.1" if master.is_local else inventory.rendezvous_address
    listen = Command(in_container(inventory, (python, "-c", _LISTENER, str(port), str(len(workers)), str(LISTEN_S), bind),
                                  interactive=True), timeout=LISTEN_S + 10, stdin_open=True)
    listening = threading.Event()

    def on_listener_event(event) -> None:
        if event.kind == "line" and event.text.strip() == "listening":
            listening.set()

    listener = Background([master], lambda t, h: run_commands(t, h, [listen], on_event=on_listener_event, stream=True),
                          connections)
    wait_until(lambda: listening.is_set() or listener.wait(0), LISTEN_READY_S, 0.05, wake=listening)
    connect = Command(in_container(inventory, (python, "-c", _CONNECT, inventory.rendezvous_address, str(port), "3")), timeout=15)

    def action(transport, host: Host) -> HostResult:
        try:
            error = transport.connect_tcp(inventory.rendezvous_address, port, timeout=3.0)
        except TcpForwardingDisabled:
            result = run_commands(transport, host, [connect])
            error = None if result.succeeded else (result.stdout.strip().removeprefix("error:").strip() or result.detail)
        return HostResult(host.name, HostStatus.OK if error is None else HostStatus.FAILED, detail=error or "")

    results = for_each_host(workers, action, connections)
    listener.wait(LISTEN_S + 12)
    return {name: None if r.succeeded else r.detail for name, r in results.items()}


def _firewall_rules(inventory: Inventory, master: Host, workers: list[str], connections: Connections) -> dict:
    hosts = [master] + [h for h in inventory.hosts if h.name in workers]
    command = batch_command([("iptables", facts.IPTABLES_SAVE), ("nft", facts.NFT_RULESET), ("ufw", facts.UFW_STATUS)])
    port = inventory.rendezvous.port
    results = for_each_host(hosts, lambda t, h: run_commands(t, h, [command]), connections)
    rules = {}
    for name, result in results.items():
        sections = split_batch(result.stdout)
        found = []
        for text in sections.values():
            found += facts.rules_blocking(text, port)
        rules[name] = tuple(dict.fromkeys(found))
    return rules
