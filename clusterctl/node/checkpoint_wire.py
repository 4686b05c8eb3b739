"""The wire of checkpoint replication (issue 50; node/checkpoint_replica.py is its one user): signed
request and answer lines, the bounded reads of a request, manifests (name, size, SHA-256) and files
streamed against them, and the default bandwidth.

TCP, one request per connection: a line "<hmac-sha256 hex> <json>\\n" signed with the key of the pair
of nodes (pair_key: the sender named in the JSON's "from" and the receiver), answered by a line of the
same shape under the same key. Nothing is believed before its signature is checked; the bytes that follow are checked
against the signed manifest: written as .<name>.part, renamed only once size and SHA-256 matched
(files matching the completion marker last), removed on any mismatch. A request line must arrive whole
within PROVE_S of the accept (a deadline per request, not per read), at most HEADER_MAX bytes; each
read of a transfer within IDLE_S, the whole within 60 s + its bytes at MIN_RATE.
Runs on the nodes: the standard library only, Python 3.8+.
"""
import errno
import fnmatch
import hashlib
import hmac
import json
import os
import re
import socket
import time

if __package__:  # imported by the controller
    from clusterctl.node import heal_policy
else:  # beside node_agent.py in a node's run dir
    import heal_policy

RUNS_ON_NODES = True
PORT_OFFSET = 4  # rendezvous port + 4 (+1 the supervisor, +2 `up`'s relay, +3 mpirun's gate)
KEEP = 2
BANDWIDTH = 100 << 20  # bytes/s where the link's speed cannot be read; else a quarter of it
PROVE_S = 5.0
IDLE_S = 30.0  # a read of an authenticated transfer that waits longer: the peer is lost
MIN_RATE = 1 << 20  # a transfer's deadline: 60 s + its bytes at this rate
SLOTS, SLOTS_PER_ADDRESS = 16, 4
HEADER_MAX = 512 << 10
MAX_FILES = 4096
MAX_BYTES = 1 << 40
CHUNK = 1 << 20
RESERVE = 64 << 20  # free space a peer keeps after a copy
MANIFEST = ".manifest.json"
FILE_NAME = re.compile(r"(?!\.\.?\Z)[A-Za-z0-9._+-]{1,255}\Z")
EVENTS = 50


class Failed(Exception):
    """A transfer that did not happen: `kind` (an event kind) and what it `says`."""

    def __init__(self, kind, says):
        super().__init__(says)
        self.kind, self.says = kind, says


# ---- the wire

def frame(key, document):
    body = json.dumps(document, separators=(",", ":")).encode()
    return hmac.new(key.encode(), b"replica\n" + body, hashlib.sha256).hexdigest().encode() + b" " + body + b"\n"


def unframe(key, line):
    """The document of a signed line, or None (unsigned, badly signed, not a JSON object)."""
    mac, _, body = line.rstrip(b"\n").partition(b" ")
    good = hmac.new(key.encode(), b"replica\n" + body, hashlib.sha256).hexdigest().encode()
    if not hmac.compare_digest(mac, good):
        return None
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return document if isinstance(document, dict) else None


def read_line(conn, deadline):
    """One line of at most HEADER_MAX bytes, all of it before `deadline` (however the bytes trickle)."""
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or len(data) > HEADER_MAX:
            raise Failed("refused", "no complete request line in time" if left <= 0 else "request line too long")
        conn.settimeout(left)
        chunk = conn.recv(4096)
        if not chunk:
            raise Failed("lost_mid_copy", "the peer closed the connection")
        data += chunk
    line, _, rest = data.partition(b"\n")
    return line, rest


class Stream:
    """The bytes after a request line: what was read with it first, then the socket, each read within IDLE_S."""

    def __init__(self, conn, rest, deadline):
        self.conn, self.rest, self.deadline = conn, rest, deadline

    def read(self, size):
        if self.rest:
            data, self.rest = self.rest[:size], self.rest[size:]
            return data
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Failed("lost_mid_copy", "the transfer ran past its deadline")
        self.conn.settimeout(min(IDLE_S, left))
        try:
            data = self.conn.recv(min(size, CHUNK))
        except OSError as error:
            raise Failed("lost_mid_copy", f"the peer went silent ({error})") from None
        if not data:
            raise Failed("lost_mid_copy", "the peer closed the connection mid-copy")
        return data


def manifest_ok(files):
    """A manifest's [[name, size, sha256]] as checked tuples, or Failed."""
    if not isinstance(files, list) or len(files) > MAX_FILES:
        raise Failed("refused", "a manifest that is not a list of at most %d files" % MAX_FILES)
    checked, total = [], 0
    for item in files:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and FILE_NAME.match(item[0])
                and isinstance(item[1], int) and 0 <= item[1] and isinstance(item[2], str) and len(item[2]) == 64):
            raise Failed("refused", f"a manifest entry that is not [plain name, size, sha256]: {str(item)[:80]}")
        total += item[1]
        checked.append((item[0], item[1], item[2]))
    if total > MAX_BYTES or len({n for n, _, _ in checked}) != len(checked):
        raise Failed("refused", "a manifest over the size cap or naming a file twice")
    return checked, total


def receive_files(stream, into, files, marker=None, skip=()):
    """Write each file of `files` from `stream` into the Dir `into` as .<name>.part, check its size and
    SHA-256, then rename it (files matching `marker` last). A mismatch removes what was written. The
    files named in `skip` are read and checked, not written (the node has its own); returns the bytes written."""
    written, kept = [], 0
    try:
        for name, size, digest in files:
            part = f".{name}.part"
            fd = into.open_fd(part, new=True) if name not in skip else os.open(os.devnull, os.O_WRONLY)
            written.append(part) if name not in skip else None
            kept += size if name not in skip else 0
            sha, left = hashlib.sha256(), size
            try:
                while left:
                    data = stream.read(min(left, CHUNK))
                    sha.update(data)
                    left -= len(data)
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
            except OSError as error:
                if error.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise Failed("disk_full", f"{into.path} is full ({error.strerror})") from None
                raise
            finally:
                os.close(fd)
            if sha.hexdigest() != digest:
                raise Failed("checksum_mismatch", f"{name}: its SHA-256 differs from the manifest's")
        for name, _, _ in sorted(files, key=lambda f: marker is not None and fnmatch.fnmatch(f[0], marker)):
            if name not in skip:
                into.rename(f".{name}.part", name)
                written.remove(f".{name}.part")
        return kept
    finally:
        for part in written:
            into.remove(part)


def send_files(conn, where, files, rate):
    """The bytes of `files` (the Dir `where`), at most `rate` bytes/s; each must still be its manifest's size."""
    started, sent = time.monotonic(), 0
    for name, size, _ in files:
        fd = where.open_fd(name)
        try:
            left = size
            while left:
                data = os.read(fd, min(left, CHUNK))
                if not data:
                    raise Failed("size_mismatch", f"{where.path}/{name} shrank while it was copied")
                conn.sendall(data)
                left -= len(data)
                sent += len(data)
                ahead = sent / rate - (time.monotonic() - started) if rate else 0
                if ahead > 0:
                    time.sleep(ahead)
        finally:
            os.close(fd)


def manifest_of(where, marker=None):
    """[[name, size, sha256]] of the regular files in the Dir `where`; a link, a directory or an odd name in
    it is Failed (refused): a step is copied whole or not at all."""
    files = []
    for entry in where.entries(MAX_FILES + 1):
        if entry.name == MANIFEST or entry.name.endswith(".part") and entry.name.startswith("."):
            continue
        if entry.kind != "file" or not FILE_NAME.match(entry.name):
            raise Failed("refused", f"{where.path}/{entry.name[:80]!r} is a {entry.kind}, not a plain file: "
                                    "the step is not copied")
        fd = where.open_fd(entry.name)
        sha, size = hashlib.sha256(), 0
        try:
            for data in iter(lambda: os.read(fd, CHUNK), b""):
                sha.update(data)
                size += len(data)
        finally:
            os.close(fd)
        files.append([entry.name, size, sha.hexdigest()])
    return files


def pair_key(secret, one, other):
    """The key two nodes of a run sign their replica requests and answers with: HMAC(the run's secret,
    "checkpoint replicas" and both hosts' names, sorted). A node's config holds the keys of its own pairs
    only (pair_keys), never the secret: a job that reads its node's config signs as that node and no
    other, so it cannot forge another node's copy to a third (issue 47). One key per sender, derived from
    the secret, would not do: the receiver needs every sender's key to check it, and so would its job."""
    a, b = sorted((one, other))
    return hmac.new(secret.encode(), f"checkpoint replicas\n{a}\n{b}".encode(), hashlib.sha256).hexdigest()


def pair_keys(secret, host, hosts):
    """{peer: pair_key} for `host` and each of `hosts` (itself included: a restore may ask its own listener)."""
    return {peer: pair_key(secret, host, peer) for peer in hosts}


def sender(line):
    """The host a request line says it comes from (its JSON's "from"), before anything is believed: which
    pair key to check it with. None when the line names none."""
    _, _, body = line.rstrip(b"\n").partition(b" ")
    try:
        named = json.loads(body).get("from")
    except (ValueError, RecursionError, AttributeError):
        return None
    return named if isinstance(named, str) else None


def same_address(one, other):
    """Two addresses as the kernel gives them (an IPv4 peer of an IPv6 socket comes as ::ffff:a.b.c.d)."""
    strip = lambda a: a[7:] if isinstance(a, str) and a.startswith("::ffff:") else a  # noqa: E731
    return strip(one) == strip(other)


def request(address, port, key, document, timeout=PROVE_S, source=None):
    """A connection to a peer with the signed request sent, from `source` (this node's own address on the
    job network, so the receiver can check it) where this machine has it, else wherever the route says."""
    try:
        conn = socket.create_connection((address, port), timeout=timeout,
                                        source_address=(source, 0) if source else None)
    except (ConnectionError, socket.timeout):
        raise
    except OSError:  # the bind: an address this machine lacks (NAT), or a name: from wherever the route says
        if not source:
            raise
        conn = socket.create_connection((address, port), timeout=timeout)
    conn.sendall(frame(key, document))
    return conn


def answer(conn, key, deadline):
    line, rest = read_line(conn, deadline)
    found = unframe(key, line)
    if found is None:
        raise Failed("refused", "an answer that is not signed with this pair of nodes' key")
    return found, rest


def link_rate(default=BANDWIDTH):
    """A quarter of the fastest link's speed (bytes/s) as /sys/class/net says it, else `default`."""
    speeds = []
    try:
        for name in os.listdir("/sys/class/net"):
            try:
                with open(f"/sys/class/net/{name}/speed") as f:
                    speeds.append(int(f.read().strip()))
            except (OSError, ValueError):
                pass
    except OSError:
        pass
    fastest = max([s for s in speeds if s > 0] or [0])
    return fastest * 1_000_000 // 8 // 4 if fastest else default
