"""Cold fan-out: `true` on every node, every tool starting from nothing (a new process and
new SSH connections each time).

Competitors: `clusterctl exec`; `ansible -m raw` with its default forks (5) and with
forks = node count; `pdsh -R ssh`; and N OpenSSH clients started at once (the floor: what
a tool that forks `ssh` per host can reach at best). Host keys are checked everywhere,
against the sandbox's known_hosts.

Ansible keeps its default `ssh_args` (ControlMaster=auto, ControlPersist=60s), with a
fresh ControlPath directory per run so that no run reuses the previous run's masters; the
masters are closed (`ssh -O exit`) after each run, outside the timing.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from common import (BEFORE, BEFORE_LABEL, PY, WORK, clusterctl_argv, clusterctl_env, fresh_dir, log, rounds, timed,
                    timed_parallel, write_ssh_config)

ANSIBLE_DEFAULT_SSH_ARGS = "-C -o ControlMaster=auto -o ControlPersist=60s"


def write_ini(path: Path, nodes: Sequence, key: Path) -> Path:
    """Nodes by their ssh_config names (`-F` in ANSIBLE_SSH_ARGS gives user, port and bastion)."""
    lines = ["[nodes]"] + [f"{n.name} ansible_user={n.ssh_user}" for n in nodes]
    lines += ["", "[all:vars]", f"ansible_ssh_private_key_file={key}",
              "ansible_python_interpreter=/usr/bin/python3", ""]
    path.write_text("\n".join(lines))
    return path


class Ansible:
    """Runs ansible/ansible-playbook with its defaults, host-key checking on, a fresh ControlPath dir."""

    def __init__(self, bin_dir: Path, sandbox, work: Path):
        self.bin_dir = bin_dir
        self.sandbox = sandbox
        self.work = work
        self.ini = write_ini(work / "hosts.ini", sandbox.nodes, sandbox.identity_file)
        self.ssh_config = write_ssh_config(sandbox, work / "ssh_config")
        self.runs = 0

    def env(self, control_dir: Path) -> dict:
        import os

        return dict(
            os.environ,
            LC_ALL="C.UTF-8",
            ANSIBLE_HOME=str(self.work / "ansible-home"),
            ANSIBLE_LOCAL_TEMP=str(self.work / "ansible-tmp"),
            ANSIBLE_HOST_KEY_CHECKING="True",
            ANSIBLE_SSH_ARGS=f"{ANSIBLE_DEFAULT_SSH_ARGS} -F {self.ssh_config}",
            ANSIBLE_SSH_CONTROL_PATH_DIR=str(control_dir),
            ANSIBLE_RETRY_FILES_ENABLED="False",
            ANSIBLE_NOCOLOR="1",
        )

    def run(self, program: str, args: Sequence[str]) -> dict:
        self.runs += 1
        control_dir = fresh_dir(self.work / f"cp-{self.runs}")
        try:
            return timed([self.bin_dir / program, "-i", self.ini, *args], env=self.env(control_dir), timeout=600)
        finally:
            close_masters(control_dir)

    def raw(self, forks: int | None) -> dict:
        return self.run("ansible", ["all", "-m", "raw", "-a", "true", *(["-f", str(forks)] if forks else [])])


def close_masters(control_dir: Path) -> None:
    """Stop the ControlPersist masters a run left behind (they would serve the next run warm)."""
    sockets = [p for p in control_dir.iterdir()] if control_dir.exists() else []
    procs = [subprocess.Popen(["ssh", "-o", f"ControlPath={s}", "-O", "exit", "x"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for s in sockets]
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def pdsh_argv(sandbox, ssh_config: Path) -> tuple[list[str], dict]:
    import os

    env = dict(os.environ, PDSH_SSH_ARGS_APPEND=f"-F {ssh_config}")
    hosts = ",".join(f"{n.ssh_user}@{n.name}" for n in sandbox.nodes)
    return ["pdsh", "-R", "ssh", "-w", hosts, "true"], env


def parallel_ssh_argvs(sandbox, ssh_config: Path, command: str = "true") -> list[list[str]]:
    return [["ssh", "-F", str(ssh_config), n.name, command] for n in sandbox.nodes]


def competitors(sandbox, bin_dir: Path, work: Path) -> dict:
    n = len(sandbox.nodes)
    state = fresh_dir(work / "state")
    ansible = Ansible(bin_dir, sandbox, work)
    pdsh, pdsh_env = pdsh_argv(sandbox, ansible.ssh_config)
    ssh_argvs = parallel_ssh_argvs(sandbox, ansible.ssh_config)
    cc_env = clusterctl_env(state)
    exec_argv = clusterctl_argv("exec", "-i", sandbox.inventory_path, "--", "true")
    before = {BEFORE_LABEL: lambda: timed(exec_argv, env=clusterctl_env(state, before=True))} if BEFORE else {}
    if shutil.which("pdsh") is None:
        log("pdsh is not installed here: measured without it")
    return {
        "clusterctl": lambda: timed(exec_argv, env=cc_env),
        **before,
        "ansible (forks 5)": lambda: ansible.raw(None),
        "ansible (forks N)": lambda: ansible.raw(n),
        **({"pdsh": lambda: timed(pdsh, env=pdsh_env)} if shutil.which("pdsh") else {}),
        "parallel ssh": lambda: timed_parallel(ssh_argvs),
    }


def measure(sandbox, bin_dir: Path, reps: int) -> dict:
    n = len(sandbox.nodes)
    work = fresh_dir(WORK / f"fanout-{n}")
    log(f"fan-out on {n} nodes, {reps} rounds")
    samples = rounds(reps, competitors(sandbox, bin_dir, work))
    return {"nodes": n, "samples": samples}


def measure_help(reps: int) -> dict:
    """`clusterctl --help` (import and argument parsing), next to a bare `python -c pass`."""
    log(f"clusterctl --help, {reps} rounds")
    before = {f"{BEFORE_LABEL} --help": lambda: timed(clusterctl_argv("--help"), env=clusterctl_env(WORK, before=True))
              } if BEFORE else {}
    samples = rounds(reps, {
        "clusterctl --help": lambda: timed(clusterctl_argv("--help"), env=clusterctl_env(WORK)),
        **before,
        "python -c pass": lambda: timed([PY, "-c", "pass"]),
    })
    return {"samples": samples}
