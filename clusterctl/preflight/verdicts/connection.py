"""Verdicts on reaching a node: SSH, the Docker engine, the job's container."""
from __future__ import annotations

from typing import Optional

from clusterctl.models import CheckResult, ContainerSpec, GpuSelection
from clusterctl.preflight.facts.host import ContainerState, DockerInfo
from clusterctl.preflight.verdicts.common import FAIL, PASS, cannot_read, verdict


def check_ssh(host: str, error: Optional[str], address: str = "", user: Optional[str] = None,
              port: Optional[int] = None) -> CheckResult:
    """The SSH connection's outcome (None = connected)."""
    where = f"{user + '@' if user else ''}{address}{':' + str(port) if port else ''}"
    if error is None:
        return verdict(host, "ssh", PASS, f"connected to {where}")
    text = error.lower()
    if "auth" in text or "permission denied" in text:
        fix = (f"set ssh.identity_file (or hosts[{host}].ssh.identity_file) to a key {host} accepts, or fix ssh.user; "
               f"try `ssh {where}` by hand")
    elif "host key" in text or "known_hosts" in text or "identification has changed" in text:
        fix = (f"record {host}'s key: `ssh-keyscan -p {port or 22} {address} >> ~/.ssh/known_hosts` (after checking it), "
               "or set ssh.host_key_policy: accept-new for hosts never seen before")
    else:
        fix = f"check hosts[{host}].address ({address}) and ssh.port; sshd must run on {host} and be reachable from here"
    return verdict(host, "ssh", FAIL, f"cannot connect to {where}: {error}", fix)


def check_docker(host: str, info: DockerInfo, uses_container: bool = True) -> CheckResult:
    if not uses_container:
        return verdict(host, "docker", PASS, "container.runtime is host: Docker is not needed")
    if info.unreadable:
        return cannot_read(host, "docker", info.unreadable, f"run `docker info` on {host}")
    if not info.reachable:
        reason = info.error or "no server version reported"
        if "not installed" in reason:
            fix = f"install Docker Engine on {host} (apt-get install docker.io), or set container.runtime: host"
        elif "permission denied" in reason.lower():
            fix = f"add ssh.user to the docker group on {host} (`usermod -aG docker USER`, then reconnect), or connect as root"
        else:
            fix = f"start the daemon on {host}: `systemctl enable --now docker`"
        return verdict(host, "docker", FAIL, f"Docker engine not usable: {reason}", fix)
    return verdict(host, "docker", PASS, f"Docker {info.server_version}, cgroup driver {info.cgroup_driver or '?'}, "
                   f"runtimes {', '.join(info.runtimes) or 'none listed'}")


def check_container(host: str, spec: Optional[ContainerSpec], state: Optional[ContainerState],
                    gpus: Optional[GpuSelection] = None) -> CheckResult:
    """The job container as `docker inspect` shows it, against `container:` in the inventory."""
    if spec is None or spec.runtime != "docker":
        return verdict(host, "container", PASS, "no container: the job runs on the bare host")
    if state is not None and state.error and "Cannot connect to the Docker daemon" in state.error:
        return verdict(host, "container", FAIL, f"container {spec.name} cannot be inspected: the Docker engine on {host} "
                       f"is not reachable ({state.error})", f"start the daemon on {host} (see the docker check), "
                       "then `clusterctl up` restarts the container")
    if state is not None and state.unreadable:
        return cannot_read(host, "container", state.unreadable, f"run `docker inspect {spec.name}` on {host}")
    if state is None or state.error or state.status == "missing":
        reason = state.error if state and state.error else "not found"
        return verdict(host, "container", FAIL, f"container {spec.name} does not exist ({reason})",
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
        return verdict(host, "container", FAIL, f"container {spec.name} " + "; ".join(problems),
                       "`clusterctl down` then `clusterctl up` recreates it from the inventory", cause)
    if not state.running:
        return verdict(host, "container", FAIL, f"container {spec.name} is {state.status}, not running",
                       f"`clusterctl up` starts it again; `docker logs {spec.name}` on {host} tells why it stopped")
    return verdict(host, "container", PASS, f"container {spec.name} running {state.image}, --net=host, "
                   f"GPUs {state.gpu_request or 'none'}")
