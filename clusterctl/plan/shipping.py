"""Files a run ships to its nodes (nccl-test's benchmark, a prompt file): where they land on every
node (node/layout.py's `files_dir`) and the command that writes one there (`put_file_command`)."""
from __future__ import annotations

import re

from clusterctl.plan import wrapper as agent
from clusterctl.plan.container import in_container
from clusterctl.models import Command, Inventory

# Writes stdin to "$1/$2" through a temporary file and a rename: nodes sharing one
# filesystem may write the same file at once, and a rank never reads a half-written one.
# The temporary name comes from mktemp (O_EXCL), not `$$`: containers have PID namespaces
# of their own, so shells on different nodes share PIDs, and with them a `.name.$$` file.
# $1 <outputs>/logs/<run id>/.files, $2 the file's name. On a shared filesystem another node may
# have written the same file first (as another user, in a sticky directory): the same bytes there
# are success.
_PUT_FILE = agent.RUN_DIRS_SH + r'''umask 022; run_dirs "$(dirname "$1")" && mk "$1" && tmp=$(mktemp "$1/.$2.XXXXXX") || exit 1
cat > "$tmp" && chmod 644 "$tmp" || { rm -f "$tmp"; exit 1; }
if cmp -s "$tmp" "$1/$2" 2>/dev/null; then rm -f "$tmp"; exit 0; fi
mv -f "$tmp" "$1/$2" && exit 0
rm -f "$tmp"; exit 1'''
_FILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def put_file_command(inventory: Inventory, directory: str, name: str, data: bytes) -> Command:
    """Write `data` to directory/name where the ranks run (in the container when there is one)."""
    if not _FILE_NAME_RE.fullmatch(name):
        raise ValueError(f"not a plain file name: {name!r}")
    argv = in_container(inventory, ("sh", "-c", _PUT_FILE, "clusterctl-put", directory, name), interactive=True)
    return Command(argv, stdin=data, timeout=60)
