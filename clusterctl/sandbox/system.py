"""Host plumbing for the sandbox: running argv commands, packages, daemons and pid files.

Processes are only ever signalled when a pid file under the state directory names them
and their command line mentions that directory, or when they live inside a network
namespace the sandbox created: the sandbox never kills what it did not start.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from clusterctl.errors import SandboxError
from clusterctl.node.rank_procs import stat_fields

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# binary -> Debian package that provides it
CORE_TOOLS = {
    "ip": "iproute2",
    "iptables": "iptables",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "setsid": "util-linux",
    "mount": "mount",
    "hostname": "hostname",
    "sshd": "openssh-server",
    "ssh-keygen": "openssh-client",
    "ibstat": "infiniband-diags",
    "sudo": "sudo",  # the non-root node user's privilege escalation
}
DOCKER_TOOLS = {"dockerd": "docker.io", "docker-registry": "docker-registry"}


def run(argv: Sequence[str], check: bool = True, timeout: float = 60.0, **kwargs) -> subprocess.CompletedProcess:
    """Run one argv list (never a shell string), capturing text output."""
    argv = [str(a) for a in argv]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as exc:
        raise SandboxError(f"timed out after {timeout:.0f}s: {' '.join(argv)}") from exc
    except FileNotFoundError as exc:
        raise SandboxError(f"command not found: {argv[0]}", fix="install the sandbox's Debian packages") from exc
    if check and done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()
        raise SandboxError(f"`{' '.join(argv)}` exited {done.returncode}: {detail}")
    return done


def which(binary: str) -> Optional[str]:
    return shutil.which(binary, path=os.environ.get("PATH", "") + ":" + SYSTEM_PATH)


def require_root_linux() -> None:
    if not sys.platform.startswith("linux"):
        raise SandboxError("the sandbox needs Linux (network namespaces)", fix="run it on a Linux machine or VM")
    if os.geteuid() != 0:
        raise SandboxError("the sandbox needs root (namespaces, bridge, iptables)", fix="run as root, e.g. sudo")


def missing_packages(docker: bool) -> list[str]:
    """Debian packages providing the binaries this machine lacks."""
    tools = dict(CORE_TOOLS, **(DOCKER_TOOLS if docker else {}))
    return sorted({pkg for binary, pkg in tools.items() if which(binary) is None})


def ensure_packages(docker: bool) -> None:
    """apt-get install whatever Debian packages provide the missing binaries.

    Daemons that the packages would start (the machine's own sshd and dockerd) are kept
    from starting with a temporary policy-rc.d: the sandbox runs its own instances.
    """
    install_debian_packages(missing_packages(docker))


def install_debian_packages(missing: list[str]) -> None:
    """apt-get install `missing` (a no-op when empty), their own services kept from starting."""
    if not missing:
        return
    if which("apt-get") is None:
        raise SandboxError(f"missing packages {', '.join(missing)} and no apt-get", fix="install them by hand")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    policy = Path("/usr/sbin/policy-rc.d")
    placed = not policy.exists()
    if placed:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        run(["apt-get", "update"], timeout=600, env=env)
        run(["apt-get", "install", "-y", "--no-install-recommends", *missing], timeout=1200, env=env)
    finally:
        if placed:
            policy.unlink(missing_ok=True)


def daemon_env() -> dict[str, str]:
    """A clean environment for daemons: no proxies (the registry is on the bridge)."""
    return {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8", "HOME": "/root"}


# The shell records its own pid, then becomes the daemon (nsenter and unshare exec too).
_WITH_PIDFILE = 'echo $$ > "$1"; shift; exec "$@"'


def spawn_detached(argv: Sequence[str], log: Path, pid_file: Path) -> None:
    """Start a long-lived daemon reparented to init (setsid --fork), output to `log`,
    its pid written to `pid_file` before it starts (so an early death is noticed)."""
    pid_file.unlink(missing_ok=True)
    with open(log, "ab") as out:
        subprocess.run(
            ["setsid", "--fork", "sh", "-c", _WITH_PIDFILE, "sh", str(pid_file), *map(str, argv)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=daemon_env(), check=True, timeout=30,
        )


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, detail: Callable[[], str] = str,
               failed: Callable[[], bool] = lambda: False) -> None:
    """Poll `predicate`; give up after `timeout`, or at once when `failed()` says it never will."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while not predicate():
        if failed():
            raise SandboxError(f"{what} exited while starting", where=detail() or None)
        if time.monotonic() > deadline:
            raise SandboxError(f"timed out after {timeout:.0f}s waiting for {what}", where=detail() or None)
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)


def pid_file_names_dead_process(pid_file: Path) -> bool:
    """The daemon wrote its pid file and is gone already (it failed to start)."""
    try:
        return not alive(int(pid_file.read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        return False


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# --------------------------------------------------------------------------- processes


def alive(pid: int) -> bool:
    """True for a running (not zombie) process."""
    fields = stat_fields(pid)
    return bool(fields) and fields[0] not in ("Z", "X")


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def owned_pid(pid_file: Path, marker: str) -> Optional[int]:
    """The live pid named by `pid_file`, if its command line mentions `marker` (our state dir)."""
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if pid <= 1 or not alive(pid) or marker not in cmdline(pid):
        return None
    return pid


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(entry)
            if len(fields) > 1 and fields[1] == str(pid):
                found.append(int(entry))
    return found


def processes_in_netns(inode: int) -> list[int]:
    """Pids whose network namespace is the one with this inode."""
    want = f"net:[{inode}]"
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if os.readlink(f"/proc/{entry}/ns/net") == want:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def terminate(pids: Iterable[int], timeout: float = 15.0) -> int:
    """SIGTERM, wait up to `timeout`, then SIGKILL. Returns how many were signalled."""
    pids = [p for p in pids if alive(p)]
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    stubborn = [p for p in pids if alive(p)]
    for pid in stubborn:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while any(alive(p) for p in stubborn) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(pids)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


# --------------------------------------------------------------------------- mounts


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below `root` in this mount namespace, deepest first."""
    prefix = str(root).rstrip("/")
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return sorted(set(points), key=len, reverse=True)


def unmount_under(root: Path) -> None:
    for point in mounts_under(root):
        run(["umount", "-l", point], check=False)
