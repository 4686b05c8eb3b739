"""`clusterctl launch --from-env` as a flow (the command parses, this runs): the entrypoint a platform runs
on every node."""
from __future__ import annotations

import errno
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from clusterctl.outcome import Outcome
from clusterctl.errors import UsageError
from clusterctl.models import MASK, CheckResult, CheckStatus, looks_secret
from clusterctl.plan import launcher as launchers
from clusterctl.plan.topology import NodeFacts

Run = Callable[[Sequence[str]], "subprocess.CompletedProcess"]
Resolve = Callable[[str], Optional[str]]
_DERIVED_NIC = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")




@dataclass(frozen=True)
class LaunchOptions:
    """The options of `clusterctl launch` (its --help says each)."""

    from_env: bool = False
    platform: str = "auto"
    prompt_file: Optional[Path] = None
    dry_run: bool = False
    join_timeout: Optional[int] = None
    strict: bool = False
    run_id: Optional[str] = None
    exec_: bool = False


def launch_from_env(app, options: LaunchOptions) -> Outcome:
    """`clusterctl launch --from-env`: probe this node, plan, check, then torchrun (or, dry, say what would run)."""
    from clusterctl.plan.prompt import optional_prompt
    from clusterctl.plan import platform

    if not options.from_env:
        raise UsageError("launch only runs from the platform's variables", "clusterctl launch",
                         "clusterctl launch --from-env -i INVENTORY (to launch from here over SSH: clusterctl run)")
    identity = platform.node_identity(app.env, options.platform)
    inventory = app.inventory()
    launchers.require_torchrun(inventory, "launch --from-env")
    run_id = platform.check_run_id(options.run_id, "--run-id") if options.run_id else platform.run_id_from(identity, app.env)
    prompt = optional_prompt(options.prompt_file, inventory, "pass --prompt-file FILE (the same file on every node, e.g. on a shared volume)")
    join_timeout = options.join_timeout if options.join_timeout is not None else inventory.rendezvous.join_timeout
    if join_timeout < 1:
        raise UsageError(f"--join-timeout {join_timeout} must be at least 1", "--join-timeout", "e.g. --join-timeout 120")
    node_inv = platform.node_inventory(inventory, identity, join_timeout)
    probe = probe_node(identity, app.env, run_local, resolve_address, wait_s=join_timeout)
    topology = platform.plan_node(node_inv, identity, probe.facts, strict=options.strict)
    node = topology.nodes[identity.node_rank]
    checks = node_checks(identity, probe, inventory.checks, run_local, port_in_use)
    argv, env, env_notes = node_command(node_inv, topology, identity, run_id, prompt, app.env)
    notes = [*identity.notes, *probe.notes, *topology.notes, *env_notes]
    document = _document(identity, topology, node, run_id, checks, argv, env, app.env, notes, options.dry_run)
    _report(app, identity, checks, notes, argv)
    if any(c.status == CheckStatus.FAIL for c in checks):
        app.renderer.error("node checks failed: torchrun not started")
        return Outcome({**document, "ok": False})
    if options.dry_run:
        return Outcome({**document, "ok": True})
    cwd = node_inv.job.workdir or None
    _prepare_outputs(node_inv.job.outputs, app.renderer)
    if options.exec_:
        _exec(argv, env, cwd)
    # --json promises one document on stdout: the ranks' output goes to stderr then.
    code, tail, interrupted = supervise(argv, env, cwd, stdout=sys.stderr if app.renderer.json_mode else None)
    explanation = _explain(tail, identity, join_timeout, node.host.name, node.first_rank) if code else None
    if explanation:
        app.renderer.error(f"{identity.node_name}: {explanation}")
    return Outcome({**document, "ok": code == 0, "exit_code": code, "explanation": explanation},
                   interrupted=interrupted)


# --------------------------------------------------------------------------- probing this node


def run_local(argv: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Run a local tool; a missing tool reads like the shell's `command not found`."""
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, errors="replace", timeout=timeout)
    except FileNotFoundError:
        return subprocess.CompletedProcess(list(argv), 127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", f"{argv[0]}: timed out after {timeout:.0f}s")


def resolve_address(name: str) -> Optional[str]:
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return None
    ipv4 = [info[4][0] for info in infos if info[0] == socket.AF_INET]
    return (ipv4 or [infos[0][4][0]])[0] if infos else None


@dataclass(frozen=True)
class NodeProbe:
    facts: NodeFacts
    gpu_detail: str
    master_ip: Optional[str] = None
    route_error: Optional[str] = None
    shm: object = None  # DiskUsage or None
    notes: tuple[str, ...] = ()


def probe_node(identity, env: Mapping[str, str], run: Run, resolve: Resolve, wait_s: float = 0.0,
               sleep: Callable[[float], None] = time.sleep) -> NodeProbe:
    """GPUs, the interface towards MASTER_ADDR and /dev/shm, with the node's own tools."""
    from clusterctl.preflight.facts import parse_df

    notes: list[str] = []
    gpu_ids, gpu_detail = _gpus(run, env, notes)
    master_ip = _master_ip(identity, resolve, wait_s, sleep, notes)
    nic, address, route_error = (None, None, f"{identity.master_addr} does not resolve") if master_ip is None \
        else _route(run, master_ip)
    if nic and not route_error:
        notes.append(f"{identity.node_name}: the route to {identity.master_addr} ({master_ip}) leaves through {nic}"
                     + (f" from {address}" if address else ""))
    df = run(("df", "-P", "-B1", "/dev/shm"))
    facts = NodeFacts(gpu_ids=gpu_ids, nic=nic, address=address or _own_address(resolve))
    return NodeProbe(facts, gpu_detail, master_ip, route_error, parse_df(df.stdout), tuple(notes))


def _gpus(run: Run, env: Mapping[str, str], notes: list[str]) -> tuple[Optional[tuple[int, ...]], str]:
    from clusterctl.preflight.facts import NVIDIA_SMI_GPUS, parse_gpu_csv

    out = run(NVIDIA_SMI_GPUS.argv)
    found = parse_gpu_csv((out.stdout or "") + (out.stderr or ""))
    if not found.gpus:
        return None, f"no GPU ({found.error or 'nvidia-smi listed none'}): CPU ranks (gloo)"
    ids = tuple(sorted(found.indices))
    names = sorted({g.name for g in found.gpus})
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        entries = [e.strip() for e in cvd.split(",") if e.strip()]
        if not entries or entries[0] in ("-1", "none", "void", "NoDevFiles"):
            return None, f"CUDA_VISIBLE_DEVICES={cvd!r} hides the {len(ids)} GPU(s): CPU ranks (gloo)"
        ids = tuple(range(min(len(entries), len(ids))))
        notes.append(f"CUDA_VISIBLE_DEVICES={cvd} set by the platform: the ranks see {len(ids)} GPU(s)")
    return ids, f"{len(ids)} GPU(s) ({', '.join(names)})"


def _master_ip(identity, resolve: Resolve, wait_s: float, sleep, notes: list[str]) -> Optional[str]:
    """Workers may start before the master's DNS name exists (a headless Service): keep asking."""
    deadline = time.monotonic() + (0 if identity.is_master else wait_s)
    while True:
        ip = resolve(identity.master_addr)
        if ip or time.monotonic() >= deadline:
            break
        sleep(min(2.0, max(0.1, deadline - time.monotonic())))
    if ip is None and identity.is_master:
        ip = _own_address(resolve)
        notes.append(f"MASTER_ADDR {identity.master_addr} does not resolve on the master yet; "
                     f"using this node's own address {ip} to find its interface")
    return ip


def _own_address(resolve: Resolve) -> Optional[str]:
    return resolve(socket.gethostname())


def _route(run: Run, ip: str) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """(nic, source address, error) for the route to ip; the master's own address routes via lo."""
    from clusterctl.preflight.facts import IP_ADDR, interface_with_address, parse_ip_addr, parse_route_get
    from clusterctl.plan.platform import is_loopback

    out = run(("ip", "-j", "route", "get", ip))
    route = parse_route_get((out.stdout or "") + (out.stderr or ""))
    if route.error:
        return None, None, route.error
    if route.local and not is_loopback(ip):
        found = interface_with_address(parse_ip_addr(run(IP_ADDR.argv).stdout or ""), ip)
        return (found.name if found else None), ip, None
    return route.dev, route.src or (ip if route.local else None), None


def port_in_use(port: int) -> bool:
    """A bind test, as the TCPStore will bind (SO_REUSEADDR: TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


# --------------------------------------------------------------------------- checks


def node_checks(identity, probe: NodeProbe, settings, run: Run, in_use: Callable[[int], bool]) -> list[CheckResult]:
    """The checks that make sense on the node itself, before torchrun starts."""
    from clusterctl.preflight.verdicts import check_shm

    host = identity.node_name
    checks = [CheckResult(host, "platform", CheckStatus.PASS, identity.describe()),
              CheckResult(host, "gpus", CheckStatus.PASS, probe.gpu_detail)]
    checks.append(_route_check(identity, probe))
    shm = check_shm(host, probe.shm, settings)
    if shm.status != CheckStatus.PASS:
        shm = replace(shm, fix=shm.fix + "; on Kubernetes mount an emptyDir {medium: Memory, sizeLimit: 16Gi} at "
                                          "/dev/shm (clusterctl export does)")
    checks.append(shm)
    if identity.is_master:
        checks.append(_port_check(host, identity.master_port, run, in_use))
    return checks


def _route_check(identity, probe: NodeProbe) -> CheckResult:
    host, error = identity.node_name, probe.route_error
    if error and "not installed" in error:
        return CheckResult(host, "rdzv_route", CheckStatus.WARN, f"{error}: NCCL and Gloo pick an interface themselves",
                           "install iproute2 in the image, or set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME in job.env")
    if error:
        fix = ("check MASTER_ADDR (on Kubernetes: the master pod's Service name) and this pod's DNS"
               if probe.master_ip is None else "check MASTER_ADDR and the node's routes")
        return CheckResult(host, "rdzv_route", CheckStatus.FAIL, f"no route to the master {identity.master_addr}: {error}",
                           fix)
    nic = probe.facts.nic or "?"
    return CheckResult(host, "rdzv_route", CheckStatus.PASS, f"{identity.master_addr} ({probe.master_ip}) via {nic}")


def _port_check(host: str, port: int, run: Run, in_use: Callable[[int], bool]) -> CheckResult:
    from clusterctl.preflight.facts import SS_LISTEN, parse_ss
    from clusterctl.preflight.verdicts import check_rdzv_port_free

    if not in_use(port):
        return CheckResult(host, "rdzv_port_free", CheckStatus.PASS, f"port {port} is free on the master")
    verdict = check_rdzv_port_free(host, port, parse_ss(run(SS_LISTEN.argv).stdout or ""))
    if verdict.status == CheckStatus.PASS:  # ss is missing or cannot see the holder
        return CheckResult(host, "rdzv_port_free", CheckStatus.FAIL, f"port {port} on the master is in use",
                           "stop what listens there, or give the job another MASTER_PORT")
    return verdict


# --------------------------------------------------------------------------- the command


def node_command(inv, topology, identity, run_id: str, prompt: str, process_env: Mapping[str, str]):
    """(argv, full env, notes): torchrun for this node, as `clusterctl run` builds it."""
    from clusterctl.plan.launch_plan import node_start
    from clusterctl.plan.torchrun import torchrun_env

    node = topology.nodes[identity.node_rank]
    argv = node_start(inv, topology, node, run_id, prompt).torchrun
    # the env stays as it was, torchrun's over the platform's: the builder's adds clusterctl's process
    # marker, the attempt and the flight recorder's dumps into a run dir, none of which this launch set
    derived = dict(torchrun_env(node, inv))
    notes = []
    from_job = {var.name for var in inv.job.env}
    for name in _DERIVED_NIC:
        if process_env.get(name) and name not in from_job and name in derived:
            notes.append(f"{name}={process_env[name]} from the platform kept (detected: {derived.pop(name)})")
    cvd = derived.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and process_env.get("CUDA_VISIBLE_DEVICES") and "CUDA_VISIBLE_DEVICES" not in from_job:
        outer = [e.strip() for e in process_env["CUDA_VISIBLE_DEVICES"].split(",") if e.strip()]
        derived["CUDA_VISIBLE_DEVICES"] = ",".join(outer[int(i)] for i in cvd.split(","))
    env = {**process_env, **derived}
    return argv, env, notes


def _document(identity, topology, node, run_id, checks, argv, env, process_env, notes, dry_run) -> dict:
    changed = {k: (MASK if looks_secret(k) else v) for k, v in env.items() if process_env.get(k) != v}
    return {
        "platform": identity.platform, "variables": dict(identity.variables),
        "nnodes": topology.nnodes, "node_rank": identity.node_rank, "nproc_per_node": topology.nproc_per_node,
        "world_size": topology.world_size, "ranks": [node.ranks.start, node.ranks.stop - 1],
        "master": {"address": identity.master_addr, "port": identity.master_port}, "run_id": run_id,
        "gpus": list(node.gpu_ids) if node.gpu_ids is not None else None, "nic": node.nic,
        "checks": [c.to_json() for c in checks], "argv": list(argv), "command": shlex.join(argv),
        "env": changed, "notes": list(notes), "dry_run": dry_run, "exit_code": None, "explanation": None,
    }


def _report(app, identity, checks, notes, argv) -> None:
    app.renderer.message(f"clusterctl launch: {identity.describe()}", "bold")
    for note in notes:
        app.renderer.message(f"note: {note}", "yellow")
    app.renderer.checks_table(checks)
    app.renderer.message(f"{identity.node_name}: {shlex.join(argv)}")


def _prepare_outputs(outputs: str, renderer) -> None:
    try:
        os.makedirs(outputs, exist_ok=True)
    except OSError as exc:
        renderer.message(f"note: cannot create job.outputs {outputs}: {exc.strerror}", "yellow")


def _exec(argv: Sequence[str], env: Mapping[str, str], cwd: Optional[str]) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    if cwd:
        os.chdir(cwd)
    os.execvpe(argv[0], list(argv), dict(env))


def supervise(argv: Sequence[str], env: Mapping[str, str], cwd: Optional[str], echo=None, stdout=None,
              tail_lines: int = 400) -> tuple[int, str, bool]:
    """Run torchrun, pass its stderr through, forward signals; (exit code, stderr tail, interrupted)."""
    echo = echo or sys.stderr
    tail: deque[str] = deque(maxlen=tail_lines)
    interrupted = False
    if stdout is not None:
        stdout.flush()
    proc = subprocess.Popen(list(argv), env=dict(env), cwd=cwd, stdout=stdout, stderr=subprocess.PIPE, text=True,
                            errors="replace", bufsize=1, start_new_session=True, preexec_fn=_die_with_parent)

    def forward(signum, frame):
        nonlocal interrupted
        interrupted = True
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        for line in proc.stderr:
            echo.write(line)
            echo.flush()
            tail.append(line)
        code = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return (128 - code if code < 0 else code), "".join(tail), interrupted


def _die_with_parent() -> None:
    """Linux: SIGTERM to torchrun when the launcher dies, so no rank outlives it."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _explain(tail: str, identity, join_timeout: int, host: str, rank: int) -> Optional[str]:
    from clusterctl.diagnose.engine import diagnose_text
    from clusterctl.plan.platform import explain_rendezvous_failure

    explained = explain_rendezvous_failure(tail, identity, join_timeout)
    if explained:
        return explained
    findings = [f for f in diagnose_text(tail, host=host, rank=rank) if f.cause != "unknown"]
    return f"{findings[0].cause}: {findings[0].fix} (evidence: {findings[0].evidence})" if findings else None
