"""Inventory file -> `Inventory`, validated completely before any connection is made.

Formats (auto-detected): clusterctl YAML (see CONTRACT.md), Ansible YAML, Ansible INI and
MPI/DeepSpeed hostfiles. The foreign formats are translated into clusterctl data by
`inventory_formats` and then pass through the same checks, so every format gets the same
errors. Every error is an `InventoryError` naming what is wrong, where (`file:line` and
the key path, e.g. `inventory/h20.yaml:7 hosts[1].address`) and how to fix it. Each value is
read by an `expect_*` parser of `inventory_values`; this module reads the sections and checks
what spans them (unique hosts, the master, local GPUs).

Not done here, on purpose: reading ~/.ssh/config (the transport resolves host aliases at
connect time, so addresses are kept as written) and anything that needs the network.
"""
from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional, Union

from clusterctl.errors import InventoryError
from clusterctl.inventory.ansible_source import ANSIBLE_PREFIX, read_ansible_dir, read_inventory_text, read_with_ansible
from clusterctl.inventory.container_section import (CONTAINER_KEYS, CONTAINER_NAME_RE, REGISTRY_AUTH_FROM,  # noqa: F401
                                                     REGISTRY_AUTH_KEYS, container_section)
from clusterctl.inventory.dump import dump_inventory
from clusterctl.inventory.formats import sniff_format
from clusterctl.inventory.health_section import health_settings
from clusterctl.inventory.healing_section import HEALING_KEYS, healing_settings
from clusterctl.inventory.notify_section import notify_settings
from clusterctl.inventory.scheduler import scheduler_spec
from clusterctl.inventory.ssh_values import HOST_SSH_KEYS, expect_ssh_options, host_become, host_ssh
from clusterctl.inventory.values import (
    Doc, did_you_mean, format_size, parse_size, HOST_NAME_RE, PLACEHOLDERS, check_placeholders, describe, expect_address, expect_bool, expect_choice,
    expect_env, expect_gpus, expect_ib, expect_int, expect_nproc, expect_number, expect_outputs, expect_policy,
    expect_port, expect_remote_dir, expect_safe_name, expect_size, expect_text, expect_text_list, expect_user,
)
from clusterctl.models import CheckSettings, Host, Inventory, JobSpec, RendezvousSpec, SchedulerSpec, SSHSettings
from clusterctl.inventory.yamlsource import Locator, read_text

NIC_RE = re.compile(r"^[\^=]?[A-Za-z0-9_.:@-]{1,15}(,[A-Za-z0-9_.:@-]{1,15})*$")
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")

TOP_KEYS = ("name", "ssh", "hosts", "container", "rendezvous", "job", "checks", "scheduler", "health", "notify")
SSH_KEYS = ("user", "port", "identity_file", "known_hosts", "host_key_policy", "connect_timeout",
            "command_timeout", "proxy_jump", "forward_agent", "config_file", "options")
HOST_KEYS = ("name", "address", "port", "user", "identity_file", "proxy_jump", "connection", "gpus", "nic", "env",
             "groups", "slots") + HOST_SSH_KEYS
RENDEZVOUS_KEYS = ("port", "master", "join_timeout", "address")
JOB_KEYS = ("command", "args", "workdir", "nproc_per_node", "world_size_divides", "outputs", "env", "python",
            "stall_timeout", "launcher", "metrics_every", *HEALING_KEYS)
CHECK_KEYS = ("ib", "shm_min", "disk_min", "clock_skew_warn")


# ------------------------------------------------------------------ sections


def _ssh_settings(doc: Doc, data: Any) -> SSHSettings:
    path = ("ssh",)
    ssh = doc.mapping(data, path, SSH_KEYS)
    default = SSHSettings()
    return SSHSettings(
        user=doc.value(ssh, "user", path, expect_user),
        port=doc.value(ssh, "port", path, expect_port),
        identity_file=doc.value(ssh, "identity_file", path, Doc.local_path),
        known_hosts=doc.value(ssh, "known_hosts", path, Doc.local_path) or os.path.expanduser(default.known_hosts),
        host_key_policy=doc.value(ssh, "host_key_policy", path, expect_policy, default.host_key_policy),
        connect_timeout=doc.value(ssh, "connect_timeout", path, expect_number, default.connect_timeout),
        command_timeout=doc.value(ssh, "command_timeout", path, expect_number, default.command_timeout),
        proxy_jump=doc.value(ssh, "proxy_jump", path, _proxy_jump),
        forward_agent=doc.value(ssh, "forward_agent", path, expect_bool, default.forward_agent),
        config_file=doc.value(ssh, "config_file", path, Doc.local_path),
        options=doc.value(ssh, "options", path, expect_ssh_options, ()),
        explicit=frozenset(key for key in SSH_KEYS if ssh.get(key) is not None),
    )


def _proxy_jump(doc: Doc, value: Any, path: tuple) -> str:
    text = expect_text(doc, value, path)
    if text.startswith("-") or re.search(r"\s", text):
        doc.fail(path, f"proxy_jump '{text}' is not [user@]host[:port]", "write proxy_jump: admin@bastion:22")
    return text


def _host(doc: Doc, item: Any, path: tuple, ssh: SSHSettings) -> Host:
    if isinstance(item, str):
        doc.fail(path, f"host entry '{item}' is text, not a mapping", f"write - {{name: {item}, address: {item}}}")
    entry = doc.mapping(item, path, HOST_KEYS)
    if entry.get("name") is None:
        doc.fail(path + ("name",), "host has no name", "add name: node-01 (a short safe name used in logs)")
    name = expect_safe_name(doc, entry["name"], path + ("name",))
    connection = doc.value(entry, "connection", path, lambda d, v, p: expect_choice(d, v, p, ("ssh", "local")), "ssh")
    address = doc.value(entry, "address", path, expect_address)
    if address is None and connection == "ssh":
        doc.fail(path + ("address",), f"host {name} has no address",
                 "add address: (an IP, DNS name or ~/.ssh/config alias), or connection: local for this machine")
    ssh_of_host = replace(host_ssh(doc, entry, path, ssh), port=doc.value(entry, "port", path, expect_port, ssh.port),
                          user=doc.value(entry, "user", path, expect_user, ssh.user),
                          identity_file=doc.value(entry, "identity_file", path, Doc.local_path, ssh.identity_file),
                          proxy_jump=doc.value(entry, "proxy_jump", path, _proxy_jump, ssh.proxy_jump))
    groups = entry.get("groups")
    groups = [groups] if isinstance(groups, str) else groups
    if groups is not None and not isinstance(groups, list):
        doc.fail(path + ("groups",), f"groups must be a list of names, got {describe(groups)}", "write groups: [gpu]")
    return Host(name=name, address=address or "127.0.0.1", ssh=ssh_of_host, connection=connection,
                **host_become(doc, entry, path),
                gpus=doc.value(entry, "gpus", path, expect_gpus),
                groups=tuple(expect_safe_name(doc, g, path + ("groups", i)) for i, g in enumerate(groups or [])),
                slots=doc.value(entry, "slots", path, expect_int),
                nic=doc.value(entry, "nic", path, _nic), env=doc.value(entry, "env", path, expect_env, ()))


def _nic(doc: Doc, value: Any, path: tuple) -> str:
    text = expect_text(doc, value, path)
    if not NIC_RE.fullmatch(text):
        doc.fail(path, f"nic '{text}' is not a network interface name", "write the interface, e.g. nic: eth0 or bond0")
    return text


def _hosts(doc: Doc, data: dict, ssh: SSHSettings, gpus_default: Any) -> tuple[Host, ...]:
    items = data.get("hosts")
    if data.get("scheduler") is not None and not items and not isinstance(items, (dict, str)):
        return ()  # the scheduler's allocation brings the nodes (inventory/scheduler.py)
    if "hosts" not in data:
        doc.fail((), "the inventory has no hosts: section", "add hosts:\n  - {name: node-01, address: 10.0.0.1}")
    if not isinstance(items, list):
        doc.fail(("hosts",), f"hosts must be a list of hosts, got {describe(items)}",
                 "write hosts:\n  - {name: node-01, address: 10.0.0.1}")
    if not items:
        doc.fail(("hosts",), "hosts is empty: at least one host is needed", "add - {name: node-01, address: 10.0.0.1}")
    hosts = tuple(_host(doc, item, ("hosts", i), ssh) for i, item in enumerate(items))
    _check_unique(doc, hosts, gpus_default)
    return hosts


def _check_unique(doc: Doc, hosts: tuple[Host, ...], gpus_default: Any) -> None:
    names: dict[str, int] = {}
    endpoints: dict[tuple, int] = {}
    for index, host in enumerate(hosts):
        path = ("hosts", index)
        if host.name in names:
            doc.fail(path + ("name",), f"duplicate host name '{host.name}' (also hosts[{names[host.name]}], line "
                     f"{doc.locator.line(('hosts', names[host.name]))})", "give every host a different name")
        names[host.name] = index
        if host.is_local:
            continue
        endpoint = (host.address.lower(), host.ssh.port or 22)
        if endpoint in endpoints:
            other = endpoints[endpoint]
            doc.fail(path + ("address",), f"hosts {hosts[other].name} and {host.name} are the same machine "
                     f"({endpoint[0]} port {endpoint[1]})", "remove the duplicate, or fix its address or port")
        endpoints[endpoint] = index
    _check_local_gpus(doc, hosts, gpus_default)


def _check_local_gpus(doc: Doc, hosts: tuple[Host, ...], gpus_default: Any) -> None:
    """Several local hosts are fine only if they cannot grab the same GPU."""
    seen: list[tuple[int, Any]] = []
    for index, host in enumerate(hosts):
        if not host.is_local:
            continue
        gpus = host.gpus if host.gpus is not None else gpus_default
        for other, other_gpus in seen:
            clash = not (gpus == other_gpus == "none") and not (
                isinstance(gpus, tuple) and isinstance(other_gpus, tuple) and not set(gpus) & set(other_gpus))
            if clash:
                doc.fail(("hosts", index, "gpus"),
                         f"local hosts {hosts[other].name} and {host.name} would use the same GPUs (duplicate GPU)",
                         "give each local host its own device ids, e.g. gpus: [0, 1] and gpus: [2, 3]")
        seen.append((index, gpus))


def _rendezvous(doc: Doc, data: Any, hosts: tuple[Host, ...]) -> RendezvousSpec:
    path, default = ("rendezvous",), RendezvousSpec()
    spec = doc.mapping(data, path, RENDEZVOUS_KEYS)
    if not hosts:  # a scheduler's allocation: the first allocated node is the master, at its own address
        for key in ("master", "address"):
            if spec.get(key) is not None:
                doc.fail(path + (key,), f"rendezvous.{key} names a host, but the inventory lists none: the nodes "
                         "are the allocation's, and the first allocated node is the master",
                         f"remove rendezvous.{key} (or list the hosts, which then become the allocation's --nodelist)")
        return RendezvousSpec(port=doc.value(spec, "port", path, expect_port, default.port),
                              join_timeout=doc.value(spec, "join_timeout", path, expect_int, default.join_timeout))
    master = doc.value(spec, "master", path, expect_text)
    names = [h.name for h in hosts]
    if master is not None and master not in names:
        same = [h.name for h in hosts if h.address == master]
        fix = f"write master: {same[0]} (the host's name, not its address)" if same else \
            f"use one of the host names: {', '.join(names)}"
        doc.fail(path + ("master",),
                 f"rendezvous master '{master}' is not a host name{did_you_mean(master, names)}", fix)
    result = RendezvousSpec(port=doc.value(spec, "port", path, expect_port, default.port), master=master,
                            join_timeout=doc.value(spec, "join_timeout", path, expect_int, default.join_timeout),
                            address=doc.value(spec, "address", path, expect_address))
    chosen = next(h for h in hosts if h.name == (master or hosts[0].name))
    if result.address is not None and _is_loopback(result.address) and any(not h.is_local for h in hosts):
        doc.fail(path + ("address",), f"rendezvous.address {result.address} is a loopback address, which the "
                 "remote hosts cannot reach", f"write the address of {chosen.name} on the network the nodes share")
    if result.address is None and _is_loopback(chosen.address) and any(not h.is_local for h in hosts):
        doc.fail(path + ("master",) if master else ("hosts", 0, "address"), f"the rendezvous master {chosen.name} "
                 f"is at {chosen.address}, which the remote hosts cannot reach",
                 f"give {chosen.name} this machine's address on the cluster network, or make a remote host the master")
    return result


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address.lower() in LOOPBACK_NAMES


def _job(doc: Doc, data: Any, host_count: int = 0) -> JobSpec:
    path, default = ("job",), JobSpec()
    spec = doc.mapping(data, path, JOB_KEYS)
    args = doc.value(spec, "args", path, expect_text_list, ())
    check_placeholders(doc, args, path + ("args",))
    return JobSpec(
        command=doc.value(spec, "command", path, expect_text_list, ()), args=args,
        workdir=doc.value(spec, "workdir", path, expect_remote_dir),
        nproc_per_node=doc.value(spec, "nproc_per_node", path, expect_nproc, default.nproc_per_node),
        world_size_divides=doc.value(spec, "world_size_divides", path, expect_int),
        outputs=doc.value(spec, "outputs", path, expect_outputs, default.outputs),
        env=doc.value(spec, "env", path, expect_env, ()),
        python=doc.value(spec, "python", path, expect_text, default.python),
        stall_timeout=doc.value(spec, "stall_timeout", path, _expect_stall_timeout, default.stall_timeout),
        launcher=doc.value(spec, "launcher", path, lambda d, v, p: expect_choice(d, v, p, ("torchrun", "none", "mpirun", "deepspeed")),
                           default.launcher),
        metrics_every=doc.value(spec, "metrics_every", path, _expect_stall_timeout, default.metrics_every),
        healing=healing_settings(doc, spec, path, host_count),
    )


def _expect_stall_timeout(doc: Doc, value: Any, path: tuple) -> float:
    """Seconds, 0 turning it off (stall detection, the metrics sampler; a bare `0`, not `false`: one way to say it)."""
    return expect_number(doc, value, path, low=0.0, strict=False)


def _checks(doc: Doc, data: Any) -> CheckSettings:
    path, default = ("checks",), CheckSettings()
    spec = doc.mapping(data, path, CHECK_KEYS)
    shm, disk = doc.value(spec, "shm_min", path, expect_size), doc.value(spec, "disk_min", path, expect_size)
    return CheckSettings(
        ib=doc.value(spec, "ib", path, expect_ib, default.ib),
        shm_min_bytes=parse_size(shm) if shm else default.shm_min_bytes,
        disk_min_bytes=parse_size(disk) if disk else default.disk_min_bytes,
        clock_skew_warn_s=doc.value(spec, "clock_skew_warn", path, expect_number, default.clock_skew_warn_s),
    )


def _check_nproc_fits(doc: Doc, inv: Inventory) -> None:
    """nproc_per_node: N needs N GPUs on every host that lists or counts them."""
    nproc = inv.job.nproc_per_node
    if not isinstance(nproc, int):
        return
    default = inv.container.gpus if inv.container else None
    for index, host in enumerate(inv.hosts):
        gpus = host.gpus if host.gpus is not None else default
        count = len(gpus) if isinstance(gpus, tuple) else gpus if isinstance(gpus, int) else None
        if count is not None and count < nproc:
            path = ("hosts", index, "gpus") if host.gpus is not None else ("container", "gpus")
            doc.fail(path, f"host {host.name} gets {count} GPU(s) but job.nproc_per_node is {nproc} "
                     "(ranks beyond the visible GPUs fail with 'invalid device ordinal')",
                     f"set nproc_per_node: {count} (or auto), or give {host.name} more GPUs")


def _scheduler(doc: Doc, top: dict, hosts: tuple[Host, ...]) -> Optional[SchedulerSpec]:
    """`scheduler:`; with hosts listed too, they are the allocation's nodes (--nodelist), so a
    node count that says otherwise is a contradiction."""
    spec = scheduler_spec(doc, top.get("scheduler"))
    if spec is not None and hosts and spec.nodes is not None and spec.nodes != len(hosts):
        doc.fail(("scheduler", "nodes"), f"scheduler.nodes is {spec.nodes} but {len(hosts)} host(s) are listed, "
                 "and listed hosts are the allocation's nodes", "remove scheduler.nodes, or remove the hosts: "
                 "section to let Slurm choose the nodes")
    return spec


def _top_level(doc: Doc, data: Any) -> dict:
    if data is None:
        doc.fail((), "the inventory is empty", "write at least hosts:\n  - {name: node-01, address: 10.0.0.1}")
    if isinstance(data, list):
        doc.fail((), "the top level is a list, but it must be a mapping", "put the list under a hosts: key "
                 "(hosts:\n  - {name: node-01, address: 10.0.0.1})")
    if not isinstance(data, dict):
        doc.fail((), f"the top level must be a mapping, got {describe(data)}",
                 "start the file with keys such as name:, ssh:, hosts:")
    return doc.mapping(data, (), TOP_KEYS)


def build_inventory(data: Any, locator: Locator, *, base_dir: Path, default_name: str,
                    source: Optional[Path] = None) -> Inventory:
    """Validated clusterctl inventory data (with its Locator) -> Inventory."""
    if locator.line(()) is None:  # an empty document: point at its first line
        locator.record((), 1)
    warnings = tuple(data.pop("warnings", ())) if isinstance(data, dict) and "hosts" in data else ()
    doc = Doc(locator, base_dir)
    top = _top_level(doc, data)
    ssh = _ssh_settings(doc, top.get("ssh"))
    container = container_section(doc, top.get("container"))
    hosts = _hosts(doc, top, ssh, container.gpus if container else None)
    scheduler = _scheduler(doc, top, hosts)
    inventory = Inventory(
        name=doc.value(top, "name", (), expect_safe_name, default_name), hosts=hosts, ssh=ssh, container=container,
        rendezvous=_rendezvous(doc, top.get("rendezvous"), hosts), job=_job(doc, top.get("job"), len(hosts)),
        checks=_checks(doc, top.get("checks")), source=source, warnings=warnings, scheduler=scheduler,
        health=health_settings(doc, top.get("health")), notify=notify_settings(doc, top.get("notify")),
    )
    _check_nproc_fits(doc, inventory)
    return inventory


def _name(source_name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", Path(source_name.rstrip("/")).stem).lstrip("._-") or "cluster"
    return stem[:63]


def parse_inventory(text: str, source_name: str = "<inventory>", *, base_dir: Optional[Path] = None,
                    fmt: Optional[str] = None, source: Optional[Path] = None) -> Inventory:
    """Inventory text in any supported format -> Inventory. fmt: yaml | ini | hostfile (default: sniffed)."""
    fmt = fmt or sniff_format(text, Path(source_name))
    data, locator = read_inventory_text(text, source_name, fmt, source.parent if source else None)
    return build_inventory(data, locator, base_dir=base_dir or Path.cwd(), default_name=_name(source_name),
                           source=source)


def load_inventory_located(path: Union[str, os.PathLike]) -> tuple[Inventory, Locator]:
    """An inventory and the Locator that says where each of its values was written: a file, an
    Ansible inventory directory, or `ansible:SOURCE` (read by ansible-inventory). Raises only
    InventoryError."""
    given = str(path)
    marker = "/" + ANSIBLE_PREFIX  # `ansible:PATH` remembered by `up` as an absolute path: CWD/ansible:PATH
    if not given.startswith(ANSIBLE_PREFIX) and marker in given and not os.path.exists(given):
        before, _, rest = given.partition(marker)
        given = ANSIBLE_PREFIX + (rest if rest.startswith("/") else os.path.join(before, rest))
    if given.startswith(ANSIBLE_PREFIX):
        data, locator = read_with_ansible(os.path.expanduser(given[len(ANSIBLE_PREFIX):]))
        return build_inventory(data, locator, base_dir=Path.cwd(), default_name=_name(given[len(ANSIBLE_PREFIX):]),
                               source=None), locator
    path = Path(os.path.expanduser(given))
    if path.is_dir():
        data, locator = read_ansible_dir(path)
        return build_inventory(data, locator, base_dir=path.resolve(), default_name=_name(str(path.resolve())),
                               source=path.resolve()), locator
    text = read_text(path, InventoryError, what="inventory")
    data, locator = read_inventory_text(text, str(path), sniff_format(text, path), path.parent)
    return build_inventory(data, locator, base_dir=path.parent.resolve(), default_name=_name(str(path)),
                           source=path.resolve()), locator


def load_inventory(path: Union[str, os.PathLike]) -> Inventory:
    """Read, detect, translate and validate an inventory (see load_inventory_located). Its secret values
    join the ones masked in everything this process writes out (ground/masking.py OUTBOUND)."""
    from clusterctl.ground.masking import masker

    inventory = load_inventory_located(path)[0]
    masker(inventory)
    return inventory


__all__ = [
    "load_inventory", "parse_inventory", "build_inventory", "dump_inventory", "parse_size", "format_size",
    "PLACEHOLDERS", "HOST_NAME_RE", "CONTAINER_NAME_RE",
]
