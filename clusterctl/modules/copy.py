"""`copy`: put a file (or inline content) on every host, atomically, only when it differs."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

from clusterctl.errors import PlaybookError
from clusterctl.models import Command, HostResult, HostStatus
from clusterctl.modules.catalog import module

# Writes stdin to a temp file beside the destination, then renames it: never half a file.
_WRITE = 'umask 077; mkdir -p -- "$(dirname -- "$1")" && cat > "$1.cc-tmp" && chmod "$2" "$1.cc-tmp" && mv -f -- "$1.cc-tmp" "$1"'


def write_file_command(dest: str, data: bytes, mode: str = "0644") -> Command:
    return Command(("sh", "-c", _WRITE, "sh", dest, mode), stdin=data, timeout=120, changes=True)


@module("copy")
def copy(ctx, dest: str, src: Optional[str] = None, content: Optional[str] = None, mode: str = "0644"):
    if (src is None) == (content is None):
        raise PlaybookError("copy: give exactly one of src or content")
    if not str(dest).startswith("/"):
        raise PlaybookError(f"copy: dest must be an absolute path, got {dest!r}")
    if src is not None:
        base = Path(ctx.vars.get("playbook_dir", "."))
        path = (base / src).expanduser()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise PlaybookError(f"copy: cannot read {path}: {exc.strerror}") from None
    else:
        data = content.encode()
    digest = hashlib.sha256(data).hexdigest()

    def action(transport, host) -> HostResult:
        current = transport.run(Command(("sha256sum", "--", dest), timeout=60))
        if current.ok and current.stdout.split()[:1] == [digest]:
            return HostResult(host.name, HostStatus.OK, f"{dest} already up to date")
        result = transport.run(write_file_command(dest, data, mode))
        if not result.ok:
            return HostResult(host.name, HostStatus.FAILED, f"copy to {dest} failed: {result.stderr.strip()}",
                              result.exit_code)
        return HostResult(host.name, HostStatus.CHANGED, f"wrote {dest} ({len(data)} bytes)")

    return action
