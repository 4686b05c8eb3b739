"""Offering the planned keys to the server (a paramiko AuthStrategy), and saying why none worked."""
from __future__ import annotations

import functools

from clusterctl.transport.openssh_config import SSHTarget
from clusterctl.transport.paramiko_setup import _paramiko
from clusterctl.transport.ssh_keys import KeyPlan


def key_strategy(user: str, plan: KeyPlan):
    """A paramiko AuthStrategy offering the plan's keys, each once, in the plan's order."""
    return _key_strategy_class()(user, plan)


@functools.lru_cache(maxsize=None)
def _key_strategy_class():
    """The subclass is made on first use: paramiko is imported only when a connection is made.
    `get_sources` is AuthStrategy's documented override point (as Fabric's OpenSSHAuthStrategy)."""
    auth = _paramiko().auth_strategy

    class KeyStrategy(auth.AuthStrategy):
        def __init__(self, user: str, plan: KeyPlan):
            super().__init__(ssh_config=None)
            self.user, self.plan = user, plan

        def get_sources(self):
            for _, key in self.plan.offered:
                yield auth.InMemoryPrivateKey(self.user, key)

    return KeyStrategy


def auth_failure(target: SSHTarget, plan: KeyPlan, allowed: list, exc: Exception) -> str:
    """One line: who, what was offered, what could not be, and what the server would take."""
    tried = [name for name, _ in plan.offered]
    offered = f"offered {len(tried)} key(s): {', '.join(tried)}" if tried else "no key to offer"
    parts = [f"authentication failed as {target.user}@{target.hostname} ({offered})"]
    parts += plan.notes
    if allowed:
        parts.append(f"the server accepts: {', '.join(allowed)}")
    if target.gssapi and "gssapi-with-mic" in allowed:
        parts.append("GSSAPI (Kerberos), which ssh_config enables, is not used by clusterctl: use a key (ssh-agent)")
    if not tried and not plan.notes and not isinstance(exc, _paramiko().AuthenticationException):
        parts.append(str(exc))
    return "; ".join(parts)
