"""`shell` and `command`: run an ad-hoc command on every host (Ansible's modules of the same names)."""
from __future__ import annotations

from typing import Optional, Union

from clusterctl.errors import PlaybookError
from clusterctl.models import Command
from clusterctl.modules.catalog import module


def exec_command(argv: Union[str, list, tuple], chdir: Optional[str] = None, timeout: Optional[float] = None) -> Command:
    """One string runs through `sh -c` (shell syntax allowed); a list runs as an exact argv."""
    if isinstance(argv, str):
        argv = ["sh", "-c", argv]
    elif len(argv) == 1:
        argv = ["sh", "-c", argv[0]]
    if not argv:
        raise PlaybookError("empty command", fix="give the command to run")
    return Command(tuple(argv), timeout=timeout, cwd=chdir, changes=True)


@module("shell")
def shell(ctx, cmd, chdir: Optional[str] = None, timeout: Optional[float] = None):
    if not isinstance(cmd, str):
        raise PlaybookError("shell: cmd must be a string (use `command` for an argv list)")
    return [exec_command(cmd, chdir, timeout or ctx.host.ssh.command_timeout)]


@module("command")
def command(ctx, argv, chdir: Optional[str] = None, timeout: Optional[float] = None):
    if not isinstance(argv, (list, tuple)) or not all(isinstance(a, (str, int, float)) for a in argv):
        raise PlaybookError("command: argv must be a list of strings")
    return [Command(tuple(str(a) for a in argv), timeout=timeout or ctx.host.ssh.command_timeout, cwd=chdir, changes=True)]
