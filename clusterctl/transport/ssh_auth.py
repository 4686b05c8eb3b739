"""Offering the planned keys to the server (a paramiko AuthStrategy), and saying why none worked."""
from __future__ import annotations

from clusterctl.transport.openssh_config import SSHTarget
from clusterctl.transport.paramiko_setup import _paramiko
from clusterctl.transport.ssh_keys import KeyPlan


class KeyStrategy:
    """paramiko's AuthStrategy interface over a KeyPlan: each key once, in the plan's order."""

    def __init__(self, user: str, plan: KeyPlan):
        self.user, self.plan = user, plan

    def authenticate(self, transport):
        auth = _paramiko().auth_strategy
        strategy = auth.AuthStrategy(ssh_config=None)
        strategy.get_sources = lambda: (auth.InMemoryPrivateKey(self.user, key) for _, key in self.plan.offered)
        return strategy.authenticate(transport)


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
