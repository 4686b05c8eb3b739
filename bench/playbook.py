"""A six-step playbook on every node: `clusterctl play` vs `ansible-playbook`.

The same six shell commands, in order, with a barrier between tasks in both tools
(Ansible's default `linear` strategy; clusterctl's `run_plan`). Ansible gets every
advantage that keeps it at its defaults otherwise: no fact gathering, the interpreter
named (no discovery round trip). Host keys are checked in both.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from common import WORK, clusterctl_argv, clusterctl_env, fresh_dir, log, rounds, timed
from fanout import Ansible

TASKS = [
    ("Hostname", "hostname"),
    ("Kernel", "uname -r"),
    ("Load", "cat /proc/loadavg"),
    ("Disk", "df -P /"),
    ("Identity", "id -u"),
    ("Clock", "date +%s"),
]


def write_playbooks(work: Path) -> tuple[Path, Path]:
    clusterctl_book = work / "six-steps.yaml"
    clusterctl_book.write_text(yaml.safe_dump([{"name": name, "shell": cmd} for name, cmd in TASKS], sort_keys=False))
    ansible_book = work / "six-steps-ansible.yaml"
    ansible_book.write_text(yaml.safe_dump([{
        "name": "six steps", "hosts": "all", "gather_facts": False,
        "tasks": [{"name": name, "shell": cmd} for name, cmd in TASKS],
    }], sort_keys=False))
    return clusterctl_book, ansible_book


def measure(sandbox, bin_dir: Path, reps: int, ansible_reps: int, forks_n: bool = True) -> dict:
    n = len(sandbox.nodes)
    work = fresh_dir(WORK / f"playbook-{n}")
    ours, theirs = write_playbooks(work)
    cc_env = clusterctl_env(fresh_dir(work / "state"))
    ansible = Ansible(bin_dir, sandbox, work)
    log(f"6-task playbook on {n} nodes: clusterctl {reps} rounds, ansible-playbook {ansible_reps}")
    competitors = {
        "clusterctl play": lambda: timed(clusterctl_argv("play", "-i", sandbox.inventory_path, ours), env=cc_env),
        "ansible-playbook (forks 5)": lambda: ansible.run("ansible-playbook", [str(theirs)]),
        "ansible-playbook (forks N)": lambda: ansible.run("ansible-playbook", ["-f", str(n), str(theirs)]),
    }
    if not forks_n:
        del competitors["ansible-playbook (forks N)"]
    samples = rounds(ansible_reps, competitors)
    if reps > ansible_reps:
        extra = rounds(reps - ansible_reps, {
            "clusterctl play": lambda: timed(clusterctl_argv("play", "-i", sandbox.inventory_path, ours), env=cc_env)})
        samples["clusterctl play"] += extra["clusterctl play"]
    return {"nodes": n, "tasks": len(TASKS), "samples": samples}
