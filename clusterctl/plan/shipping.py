"""Files a run ships to its nodes (nccl-test's benchmark, a prompt file): where they land on every
node (node/layout.py's `files_dir`) and the command that writes one there (`put_file_command`); a
launch's writes on one node (its env, then the shipped files) as one command (`stage_commands`)."""
from __future__ import annotations

import re
from typing import Mapping

from clusterctl.plan import node_files
from clusterctl.plan.container import host_path
from clusterctl.models import Command, Inventory

_FILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def put_file_command(inventory: Inventory, directory: str, name: str, data: bytes) -> Command:
    """Write `data` to directory/name where the ranks run (in the container when there is one)."""
    if not _FILE_NAME_RE.fullmatch(name):
        raise ValueError(f"not a plain file name: {name!r}")
    from clusterctl.node.layout import FILES

    # node/run_files.py `put`: an exclusive temp file renamed over the name (nodes sharing one filesystem
    # write the same file at once; a rank never reads half of one), the same bytes there already are
    # success. The run's .files as root (sudo, or in the container): nothing another user made runs on a
    # node (issue 47); a node's own run dir as the user who owns it.
    return node_files.command(inventory, directory, "put", name, stdin=data,
                              in_container_only=directory.rstrip("/").rsplit("/", 1)[-1] != FILES)


def stage_commands(inventory: Inventory, run_dir: str, env: tuple[tuple[str, str], ...], files_dir: str,
                   files: Mapping[str, bytes]) -> list[Command]:
    """The node's run dir owned and its env written (plan/wrapper.write_env_command), then `files` put
    into the run's `files_dir`: one start of node/run_files.py (`stage`), not one per file (issue 52: each
    is ~30 ms of the node's CPU, and an SSH session; in the container a `docker exec`). Both are written
    where write-env writes (as root on the host through the bind mount, else in the container); where
    the run dir and the files dir would not be reached alike (a bind mount of one and not the other),
    the commands one by one."""
    from clusterctl.plan import wrapper as agent

    for name in files:
        if not _FILE_NAME_RE.fullmatch(name):
            raise ValueError(f"not a plain file name: {name!r}")
    env_bytes = agent.env_file(env)
    if _reached_alike(inventory, run_dir, files_dir):
        sizes = [str(part) for name, data in files.items() for part in (name, len(data))]
        return [node_files.command(inventory, run_dir, "stage", agent.give_run_dir(inventory), str(len(env_bytes)),
                                   *sizes, stdin=env_bytes + b"".join(files.values()))]
    return [agent.write_env_command(inventory, run_dir, env),
            *(put_file_command(inventory, files_dir, name, data) for name, data in files.items())]


def _reached_alike(inventory: Inventory, run_dir: str, files_dir: str) -> bool:
    """The run dir and the files dir beside it under one base, both on the host or both in the container."""
    on_host = host_path(inventory, run_dir), host_path(inventory, files_dir)
    if (on_host[0] is None) != (on_host[1] is None):
        return False
    run_dir, files_dir = on_host if on_host[0] is not None else (run_dir, files_dir)
    parts, files = run_dir.rstrip("/").split("/"), files_dir.rstrip("/").split("/")
    return len(parts) == len(files) and parts[:-1] == files[:-1] and node_files.split_run_path(run_dir)[1].count("/") == 2
