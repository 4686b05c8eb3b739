"""ssh's ProxyCommand: the connection is a command's stdin and stdout.

Run as ssh runs it (`$SHELL -c 'exec COMMAND'`, tokens already expanded), with its stdin and
stdout on one end of a socket pair: paramiko gets the other end, a real socket, so its
timeouts, select and shutdown work as on TCP. The command's stderr goes to a temporary file,
not the terminal (many run at once); its last lines explain a failure.
"""
from __future__ import annotations

import os
import socket
import subprocess
import tempfile
from typing import Optional

from clusterctl.errors import UnreachableError


class ProxyCommand:
    def __init__(self, command: str, where: Optional[str] = None):
        self.command = command
        ours, theirs = socket.socketpair()
        self.stderr = tempfile.TemporaryFile()
        shell = os.environ.get("SHELL") or "/bin/sh"
        try:
            self.process = subprocess.Popen([shell, "-c", f"exec {command}"], stdin=theirs, stdout=theirs,
                                            stderr=self.stderr, start_new_session=True)
        except OSError as exc:
            ours.close()
            self.stderr.close()
            raise UnreachableError(f"cannot start ProxyCommand `{command}`: {exc.strerror}", where=where,
                                   fix="check the ProxyCommand in ssh_config or ansible_ssh_common_args") from None
        finally:
            theirs.close()
        self.sock = ours

    def said(self) -> str:
        """The command's last stderr lines (why it failed), or its exit status."""
        try:
            self.stderr.seek(0)
            lines = self.stderr.read()[-2000:].decode("utf-8", errors="replace").strip().splitlines()
        except (OSError, ValueError):
            lines = []
        code = self.process.poll()
        tail = " / ".join(line.strip() for line in lines[-3:] if line.strip())
        status = f"exit {code}" if code is not None else "still running"
        return f"ProxyCommand `{self.command}` ({status}){': ' + tail if tail else ''}"

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            if self.process.poll() is None:
                self.process.terminate()  # it sees EOF too; this is for one that ignores it
                try:
                    self.process.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=2)
            self.stderr.close()
