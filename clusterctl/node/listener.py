"""The one discipline of every port clusterctl opens on a node: the supervisor (node_agent.py), the
mpirun gate (node_mpi_gate.py) and the image relay (registry/relay.py, which carries this file's text
in front of its own). Standard library only, Python 3.8+; plain definitions, no imports of its own
kind, so that it runs as a module beside the node programs and as text inside the relay.

What a listener admits (docs/reliability.md, "Listeners"):
- a deadline per REQUEST, not per read: a connection that has not proven itself (its signature, its
  handshake) within `deadline_s` of its accept is shut down by the reaper, however it trickles bytes;
- slots per address and in all, counted over the connections still unproven: a new connection is
  never refused for want of a slot; the OLDEST unproven connection of its address (full address), or
  of the address holding the most (all full), is dropped for it. A keeper (or the master's agent, or
  the receiving relay) sends its proof within milliseconds of connecting, so a crowd of idle or slow
  connections from its own address cannot keep it out: the crowd would have to open `per_address`
  new connections within those milliseconds, every time;
- handshakes side by side: each admitted connection proves itself on a thread of its own, so one
  silent peer never holds up the next;
- a proven connection leaves the slots: it is the key holder's, and never dropped for another.
"""
import socket
import sys
import threading
import time

# A program's own part on the nodes: its threads and clocks are that process's (tests/unit/test_architecture.py)
RUNS_ON_NODES = True
REAP_EVERY_S = 0.25
LOG_LINE = 300  # a refused connection is one line of the program's log, at most this long, at most one a second


class RefusalLog:
    """One bounded line per refused connection, at most one a second (a flood writes one line and a count)."""

    def __init__(self, write=None, now=time.monotonic):
        self.write, self.now, self.last, self.quiet = write or sys.stdout.write, now, None, 0

    def __call__(self, peer, what):
        now = self.now()
        if self.last is not None and now - self.last < 1.0:
            self.quiet += 1
            return
        more = " (%d more since the last line)" % self.quiet if self.quiet else ""
        self.last, self.quiet = now, 0
        line = ("refused a request from %s: %s%s" % (peer, what, more)).replace("\n", " ").replace("\r", " ")
        self.write(line[:LOG_LINE] + "\n")


class Slots:
    """The unproven connections of one listener, with their deadlines; a reaper thread ends the late ones."""

    def __init__(self, deadline_s, per_address, total, refuse=None):
        self.deadline_s, self.per_address, self.total = deadline_s, per_address, total
        self.refuse = refuse or (lambda peer, what: None)
        self.pending = {}  # socket -> (address, deadline), in admission order (oldest first)
        self.lock, self.closed = threading.Lock(), False
        threading.Thread(target=self._reap, daemon=True).start()

    def admit(self, conn, peer):
        """Count `conn` (from address `peer`) in; drop an older unproven connection when full. Never refuses."""
        with self.lock:
            mine = [c for c, (p, _) in self.pending.items() if p == peer]
            if len(mine) >= self.per_address:
                self._drop(mine[0], peer, "too many unproven connections of this address: dropped its oldest")
            elif len(self.pending) >= self.total:
                counts = {}
                for p, _ in self.pending.values():
                    counts[p] = counts.get(p, 0) + 1
                greediest = max(counts, key=counts.get)
                oldest = next(c for c, (p, _) in self.pending.items() if p == greediest)
                self._drop(oldest, greediest, "connections full: dropped the oldest of the address holding the most")
            self.pending[conn] = (peer, time.monotonic() + self.deadline_s)

    def proven(self, conn):
        """`conn` holds the key: out of the slots, never dropped for another, no deadline of ours."""
        with self.lock:
            return self.pending.pop(conn, None) is not None

    def done(self, conn):
        with self.lock:
            self.pending.pop(conn, None)

    def close(self):
        """The listener ends: every unproven connection with it."""
        with self.lock:
            self.closed = True
            for conn in list(self.pending):
                self._drop(conn, None, None)

    def _drop(self, conn, peer, why):
        del self.pending[conn]
        if why:
            self.refuse(peer, why)
        try:
            conn.shutdown(socket.SHUT_RDWR)  # its reader sees the end; its own thread closes it
        except OSError:
            pass

    def _reap(self):
        while not self.closed:
            time.sleep(REAP_EVERY_S)
            now = time.monotonic()
            with self.lock:
                for conn, (peer, deadline) in list(self.pending.items()):
                    if deadline <= now:
                        self._drop(conn, peer, "did not send its whole request in %gs" % self.deadline_s)


def first_proven(server, prove, wait_s, slots, allowed=frozenset()):
    """The first connection to `server` for which `prove(conn)` returns (not raises), as (conn, its value);
    None when none did within `wait_s`. Every handshake runs on its own thread under `slots`; a peer outside
    `allowed` (when given) is closed before any byte. The server and every other connection are closed."""
    won, lock = [], threading.Lock()
    deadline = time.monotonic() + wait_s

    def shake(conn):
        try:
            value = prove(conn)
        except (OSError, ValueError, PermissionError) as exc:
            slots.done(conn)
            slots.refuse(_peer_of(conn), str(exc) or exc.__class__.__name__)
            conn.close()
            return
        with lock:
            if slots.proven(conn) and not won:
                won.append((conn, value))
                return
        conn.close()

    try:
        while not won and time.monotonic() < deadline:
            server.settimeout(min(0.2, max(0.01, deadline - time.monotonic())))
            try:
                conn, peer = server.accept()
            except socket.timeout:
                continue
            if allowed and peer[0] not in allowed:
                slots.refuse(peer[0], "not an address allowed here (%s)" % ", ".join(sorted(allowed)))
                conn.close()
                continue
            slots.admit(conn, peer[0])
            threading.Thread(target=shake, args=(conn,), daemon=True).start()
    finally:
        server.close()
        slots.close()
    with lock:
        return won[0] if won else None


def _peer_of(conn):
    try:
        return conn.getpeername()[0]
    except OSError:
        return "?"
