"""How a connection runs privileged commands, decided once per connection (issue 52: what a poll costs
a node), not asked again by every command.

A choice is the vocabulary of CLUSTERCTL_BECOME (transport/base.py `_BECOME`): `never` (as the SSH user,
which may be root), `sudo` (`sudo -n --`) or `sudo:USER` (`sudo -n -u USER --`). The inventory's
`become` decides it outright; unset, it is `never` for root and otherwise learned from the node once
(`CHECK`: `id -u` and `sudo -n true`, what every privileged command used to run before itself: a
shell, a subshell, `id` and `sudo` per command). A privileged command then runs as `PREFIX argv`, with
no shell around it; a batch's privileged sections read the choice from CLUSTERCTL_BECOME.

`sudo -n true` answered in a fresh SSH session without a terminal means sudo needs no password there
(its timestamps are per terminal or parent process), so it holds for the connection's life.
"""
from __future__ import annotations

import threading
from typing import Callable, Optional

from clusterctl.models import Command, Host

NEVER, SUDO = "never", "sudo"

# asked once per connection where neither the inventory nor the SSH user (root) says
CHECK = Command(("sh", "-c", 'id -u; if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; '
                             'then echo sudo; fi'), timeout=30)


def known(host: Host, user: Optional[str], is_root: bool) -> Optional[str]:
    """The choice when nothing needs asking: the inventory's `become`, or a root SSH user; else None."""
    if host.become is False:
        return NEVER
    if host.become is True:
        wanted = host.become_user or "root"
        return NEVER if (user == wanted or (wanted == "root" and is_root)) else f"{SUDO}:{wanted}"
    return NEVER if is_root else None


def from_check(stdout: str) -> Optional[str]:
    """The choice from CHECK's output (`UID`, then `sudo` where sudo needs no password); None when
    the output is not that (the node stays asked per command, as before)."""
    words = stdout.split()
    if not words or not words[0].isdigit() or any(w != SUDO for w in words[1:]):
        return None
    if words[0] == "0":
        return NEVER
    return SUDO if SUDO in words[1:] else NEVER


def prefix(choice: str) -> tuple[str, ...]:
    """What goes before a privileged argv under `choice`."""
    if choice == NEVER:
        return ()
    if choice == SUDO:
        return ("sudo", "-n", "--")
    if choice.startswith(SUDO + ":"):
        return ("sudo", "-n", "-u", choice[len(SUDO) + 1:], "--")
    raise ValueError(f"unknown become choice {choice!r}")


class Decision:
    """One connection's choice, taken at its first privileged command (thread-safe: the polls, the
    straggler rounds and the streams share a connection)."""

    def __init__(self, choice: Optional[str] = None):
        self._choice, self._asked = choice, choice is not None
        self._lock = threading.Lock()

    def choice(self, ask: Callable[[], Optional[str]]) -> Optional[str]:
        """The choice, asking (`ask()`, once; None: could not tell) the first time it is needed."""
        if self._asked:
            return self._choice
        with self._lock:
            if not self._asked:
                self._choice, self._asked = ask(), True
        return self._choice
