"""The error tree. Every user-facing error says what is wrong, where, and how to fix it.

Errors are raised only for problems that stop the whole command before it touches the
cluster (bad inventory, bad playbook, bad arguments, missing state). Problems on one host
are values (`HostResult`), never exceptions.
"""
from __future__ import annotations

from typing import Optional


class ClusterctlError(Exception):
    """Base of all expected errors. `cli` prints these without a traceback."""

    exit_code = 2

    def __init__(self, what: str, where: Optional[str] = None, fix: Optional[str] = None):
        super().__init__(what)
        self.what = what
        self.where = where
        self.fix = fix

    def __str__(self) -> str:
        text = f"{self.where}: {self.what}" if self.where else self.what
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text


class InventoryError(ClusterctlError):
    """The inventory file is malformed or inconsistent."""


class PlaybookError(ClusterctlError):
    """The playbook file is malformed, names an unknown module, or has bad arguments."""


class UsageError(ClusterctlError):
    """Bad command-line arguments or input files."""


class StateError(ClusterctlError):
    """Local state (.clusterctl/) is missing or in use: no active cluster, a run in progress."""


class TopologyError(ClusterctlError):
    """The job cannot be laid out on the hosts (GPUs, world size, divisibility)."""


class SandboxError(ClusterctlError):
    """The rehearsal cluster could not be built or torn down."""


class HostKeyError(ClusterctlError):
    """A host key is unknown (strict) or changed. Raised by the transport, turned into a HostResult."""


class UnreachableError(ClusterctlError):
    """The host could not be connected to. Raised by the transport, turned into a HostResult."""
