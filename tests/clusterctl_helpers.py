"""Helpers for the integration tests that drive clusterctl against the rehearsal cluster.

- `Cli(state_dir)`: run `clusterctl ...` in-process (`cli.main(argv, env)`) and get
  (exit code, the `--json` document); or start it as a subprocess with this interpreter
  (`sys.executable -m clusterctl`, never a `python` shim from PATH, which may swallow signals).
- `variant(sb, path, change)`: the sandbox inventory, changed by a function, written elsewhere.
- Node-side looks: `docker_client`, `container_of`, `processes_with`, `wait_until`.
- `sandbox_skip_reason()`: why the rehearsal cluster cannot run here (None when it can).
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import yaml

REPO = Path(__file__).resolve().parents[1]
FIXTURE_JOBS = Path(__file__).resolve().parent / "fixtures" / "jobs"
CONTAINER_OUTPUTS = "/workspace/output"  # where the sandbox inventory mounts sb.shared_outputs


def examples(full: int) -> int:
    """A property test's example count: `full` under the `full` profile (`make test`), scaled as the
    loaded profile scales hypothesis' default of 100 otherwise (`quick`: a quarter), never under 10
    (tests/conftest.py)."""
    from hypothesis import settings

    return max(10, full * settings.default.max_examples // 100)


def sandbox_skip_reason() -> str | None:
    if os.environ.get("CLUSTERCTL_SKIP_SANDBOX") == "1":
        return "CLUSTERCTL_SKIP_SANDBOX=1"
    if not sys.platform.startswith("linux"):
        return "the sandbox needs Linux (network namespaces)"
    if os.geteuid() != 0:
        return "the sandbox needs root"
    return None


class Cli:
    """clusterctl with its own local state directory (CLUSTERCTL_STATE)."""

    def __init__(self, state_dir: Path):
        self.state_dir = Path(state_dir)
        self.env = {**os.environ, "CLUSTERCTL_STATE": str(self.state_dir)}

    def json(self, *args: str) -> tuple[int, dict]:
        """`clusterctl ARGS --json` in-process: (exit code, the one JSON document on stdout)."""
        from clusterctl.cli import main

        argv = list(_with_json(args))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv, env=self.env)
        text = out.getvalue()
        try:
            document = json.loads(text)
        except ValueError:
            raise AssertionError(f"clusterctl {' '.join(argv)} printed no single JSON document (exit {code}):\n"
                                 f"stdout: {text[-2000:]}\nstderr: {err.getvalue()[-2000:]}") from None
        return code, document

    def popen(self, *args: str, json_output: bool = True) -> subprocess.Popen:
        """`clusterctl ARGS` as a subprocess of this interpreter; stdout/stderr piped, text."""
        argv = [sys.executable, "-m", "clusterctl", *(_with_json(args) if json_output else args)]
        return subprocess.Popen(argv, env=self.env, cwd=str(self.state_dir.parent), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_terminal)

    @staticmethod
    def finish(proc: subprocess.Popen, timeout: float = 180) -> tuple[int, dict, str]:
        """Wait for a `popen` and parse its JSON: (exit code, document, stderr)."""
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
            raise AssertionError(f"clusterctl did not finish in {timeout}s; stderr:\n{err[-3000:]}")
        try:
            document = json.loads(out)
        except ValueError:
            raise AssertionError(f"no JSON from clusterctl (exit {proc.returncode}):\n{out[-2000:]}\n{err[-3000:]}") from None
        if proc.args[1:3] == ["-m", "clusterctl"] and "--json" in proc.args:
            from json_documents import check_command_output

            check_command_output(proc.args[3], out)
        return proc.returncode, document, err


def _with_json(args: Sequence[str]) -> list[str]:
    """Insert --json after the subcommand (before a `--` that starts an exec command)."""
    args = list(args)
    return args[:1] + ["--json"] + args[1:]


# --------------------------------------------------------------------------- inventories


def load_inventory(sb) -> dict:
    return yaml.safe_load(Path(sb.inventory_path).read_text())


def variant(sb, path: Path, change: Optional[Callable[[dict], None]] = None) -> Path:
    """Write the sandbox inventory, changed in place by `change(doc)`, to `path`."""
    doc = copy.deepcopy(load_inventory(sb))
    if change is not None:
        change(doc)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    return path


def host_entry(doc: dict, name: str) -> dict:
    return next(h for h in doc["hosts"] if h["name"] == name)


# --------------------------------------------------------------------------- looking at nodes


def docker_client(sb, node: str):
    import docker

    return docker.DockerClient(base_url=sb.docker_host(node), version="1.41", timeout=60)


def container_of(sb, node: str, name: str):
    """The container `name` on `node`'s engine (docker-py object), or None."""
    import docker

    client = docker_client(sb, node)
    try:
        return client.containers.get(name)
    except docker.errors.NotFound:
        return None
    finally:
        client.close()


def as_from_a_terminal() -> None:
    """In a child before exec: SIGHUP as a shell on a terminal leaves it (default), even when these tests
    run under `nohup` (which ignores it for the whole tree, and an ignored signal stays ignored across exec)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def processes_with(text: str) -> list[tuple[int, str]]:
    """(pid, cmdline) of live processes on this machine whose command line contains `text`.

    The sandbox's nodes share this machine's process table (one network namespace each),
    and so do their containers' processes: one look here sees every node."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(") ", 1)[1][:1]
        except (OSError, IndexError):
            continue
        if state != "Z" and text.encode() in raw:
            found.append((int(entry), raw.replace(b"\0", b" ").decode(errors="replace").strip()))
    return found


def environ_of(pid: int) -> dict:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.25, what: str = "condition"):
    """Poll `predicate` until it returns something truthy; that value, or AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def stop(proc: Optional[subprocess.Popen]) -> None:
    """Kill a process this test started (by its own handle) and reap it."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


def checks_named(document: dict, check: str) -> dict:
    """{host: check entry} for one check id in a `check`/`up` JSON document."""
    entries = document.get("checks")
    if entries is None:  # `up`: checks live per host
        entries = [c for h in document.get("hosts", {}).values() for c in h.get("checks", [])]
    return {c["host"]: c for c in entries if c["check"] == check}


def run_records(sb, run_id: str) -> dict[int, dict]:
    """The example job's per-rank JSON records of one run, by rank."""
    folder = Path(sb.shared_outputs) / "ranks" / run_id
    return {int(p.stem.removeprefix("rank")): json.loads(p.read_text()) for p in sorted(folder.glob("rank*.json"))}


def node_ssh_client(sb, name: str, timeout: float = 5.0):
    """A paramiko client to a sandbox node as its inventory reaches it: its user and port, and
    through the bastion for the node behind it; host keys checked strictly."""
    import paramiko

    node = sb.node(name)
    sock, hop = None, None
    if node.behind_bastion:
        hop = paramiko.SSHClient()
        hop.load_host_keys(str(sb.known_hosts))
        hop.set_missing_host_key_policy(paramiko.RejectPolicy())
        hop.connect(sb.bastion.address, port=22, username="root", key_filename=str(sb.identity_file),
                    look_for_keys=False, allow_agent=False, timeout=timeout, banner_timeout=timeout, auth_timeout=timeout)
        sock = hop.get_transport().open_channel("direct-tcpip", (node.listen_address, node.ssh_port), ("127.0.0.1", 0))
    client = paramiko.SSHClient()
    client.load_host_keys(str(sb.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(node.listen_address, port=node.ssh_port, username=node.ssh_user, key_filename=str(sb.identity_file),
                       look_for_keys=False, allow_agent=False, timeout=timeout, banner_timeout=timeout,
                       auth_timeout=timeout, sock=sock)
    except BaseException:
        if hop is not None:
            hop.close()
        raise
    client._cc_hop = hop  # closed with the client (see node_ssh_run)
    return client


def node_ssh_run(sb, name: str, command: str) -> tuple[int, str]:
    """(exit code, stdout) of `command` on a sandbox node over SSH."""
    client = node_ssh_client(sb, name)
    try:
        _, stdout, _ = client.exec_command(command, timeout=30)
        out = stdout.read().decode()
        return stdout.channel.recv_exit_status(), out
    finally:
        client.close()
        if client._cc_hop is not None:
            client._cc_hop.close()


def cluster_with_jobs(sb, tmp_path_factory, jobs_dir: str, *jobs: str):
    """A module's cluster: the sandbox up, with tests/fixtures/jobs/<job> copied into <shared outputs>/<jobs_dir>
    (the containers see it under /workspace/output/<jobs_dir>); yields (Cli, its folder with prompt.txt), then
    takes the containers down and the jobs away. Use as the body of a module-scoped fixture (`yield from`)."""
    import shutil

    shipped = sb.shared_outputs / jobs_dir
    shipped.mkdir(parents=True, exist_ok=True)
    for job in jobs:
        shutil.copy(FIXTURE_JOBS / job, shipped / job)
    where = tmp_path_factory.mktemp(jobs_dir)
    cli = Cli(where / "state")
    (where / "prompt.txt").write_text("a cat\n")
    code, doc = cli.json("up", str(sb.inventory_path))
    assert code == 0, doc
    try:
        yield cli, where
    finally:
        cli.json("down", "-i", str(sb.inventory_path))  # the next module starts from no container
        shutil.rmtree(shipped, ignore_errors=True)


def steady_health() -> dict:
    """Health rules under which the faults a test provokes on purpose (a node cut off, a rank killed) make
    nobody suspect or quarantined: the fleet record remembers them, but each test of a module plans the
    same hosts (suspect hosts are chosen last where spares exist, issue 48; tests/rehearsal/test_cluster_health.py
    covers the rules themselves)."""
    return {"rules": {kind: {"suspect_after": "never", "quarantine_after": "never"}
                      for kind in ("heal_excluded", "node_lost", "run_blamed", "straggler")}}


LEASES_SETTLE_S = 45  # a lease lapses 22 s (max(lost_after, 15) + 7) after its run's last beat


def wait_for_leases_to_lapse(sandbox) -> None:
    """At most LEASES_SETTLE_S, until no run holds a GPU lease on the sandbox's nodes."""
    import time

    from clusterctl.node import leases

    outputs = sandbox.shared_outputs
    hosts = [p.name for p in (outputs / leases.LEASES).iterdir()] if (outputs / leases.LEASES).is_dir() else []
    deadline = time.monotonic() + LEASES_SETTLE_S
    while time.monotonic() < deadline:
        try:
            held = [lease for host in hosts for lease in leases.listing(str(outputs), host)["leases"] if lease["alive"]]
        except (OSError, ValueError, leases.Refused):
            return  # a lease directory this test broke on purpose says so in its own assertions
        if not held:
            return
        time.sleep(1)


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on, for a test's rendezvous or server: taken below the kernel's ephemeral range,
    so that no outgoing connection of this machine can be given it between this look and the test's own bind (a
    port the kernel handed out from bind(0) is also what it hands to the next connect: torchrun's TCPStore met
    EADDRINUSE on one such port in a CI run). Free on `address` and on every address, as a store binds."""
    import random
    import socket

    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low)
        try:
            for where in (address, "0.0.0.0"):
                with socket.socket() as sock:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind((where, port))
        except OSError:
            continue
        return port
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]
