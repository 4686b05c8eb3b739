"""The relay: what moves an image between two nodes, and the commands that run it there.

A transfer is `docker save IMAGE` on the sender piped into a one-connection TCP server (RELAY, a
Python program of the standard library run by the node's python3, bound to the sender's address on
the job network), and on the receiver the relay's client piped into `docker load` (`pipe`: loading
while passing every byte on to the next node of a chain). The relay's server accepts one client that
sends the transfer's token, within ACCEPT_S, and ends with the stream; every relay also ends the
moment its SSH session does (it watches the session's stdin, which clusterctl holds open).

Layers a node has are not sent again: `held_chains` reads the layer chains a node's engine holds
(every image's diff IDs, as OCI chain IDs) and `layers_to_skip` the image's lowest layers the
receiver holds on the same layers below. Pure, but for the commands it builds. Who sends to whom,
and when: peers.py.
"""
from __future__ import annotations

import hashlib
import json

from clusterctl.models import Command

ACCEPT_S = 60

RELAY = r'''
import hmac, os, socket, sys, threading, time
role, address, port, token = sys.argv[1], sys.argv[2], int(sys.argv[3]), (sys.argv[4] + "\n").encode()


def orphaned(fd):
    # fd: the SSH session's stdin, kept open by clusterctl (stdin_open) while it waits for this
    # transfer: its end (Ctrl-C, a killed clusterctl, a lost connection) ends this relay at once,
    # not after the accept/connect timeouts; the pipes around it then end docker save/load
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        return  # not given (run by hand): nothing to watch
    os._exit(3)


if os.environ.get("CLUSTERCTL_RELAY_WATCH"):
    threading.Thread(target=orphaned, args=(int(os.environ["CLUSTERCTL_RELAY_WATCH"]),), daemon=True).start()
total, chunk = 0, 1 << 20


def listen(address, port, timeout):
    server = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address, port))
    server.listen(4)
    server.settimeout(timeout)
    return server


def accept(server, token):
    # the first connection that presents the token; raises socket.timeout when none comes in time
    while True:
        conn, _ = server.accept()
        conn.settimeout(30)
        got = b""
        while len(got) < len(token):
            part = conn.recv(len(token) - len(got))
            if not part:
                break
            got += part
        if hmac.compare_digest(got, token):
            server.close()
            return conn
        conn.close()


class Counted:
    def __init__(self, conn):
        self.conn, self.total = conn, 0

    def write(self, data):
        self.conn.sendall(data)
        self.total += len(data)
        return len(data)


def copy(read, write):
    copied = 0
    while True:
        data = read(chunk)
        if not data:
            return copied
        write(data)
        copied += len(data)


def without_layers(stream, sink, skip):
    # `docker save`'s tar minus the layers in `skip` (hex digests of uncompressed layer tars, the
    # image's diff IDs): `docker load` reads a layer's file only where the engine lacks that layer.
    # OCI layout (Docker 25+): blobs/sha256/<digest>, named by it. Classic layout: <v1 id>/layer.tar,
    # named by an ID that is not the digest: spooled while hashed, then sent or dropped.
    import hashlib, tarfile, tempfile
    out = tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT)
    dropped = 0
    for member in stream:
        if not member.isfile():
            out.addfile(member)
            continue
        data = stream.extractfile(member)
        if member.name.startswith("blobs/sha256/") and member.name[13:] in skip:
            dropped += 1
            continue
        if member.name.endswith("/layer.tar"):
            spool, digest = tempfile.SpooledTemporaryFile(64 << 20), hashlib.sha256()
            copy(data.read, lambda part: (digest.update(part), spool.write(part)))
            if digest.hexdigest() in skip:
                dropped += 1
                continue
            spool.seek(0)
            data = spool
        out.addfile(member, data)
    out.close()
    return dropped


if role == "send":
    try:
        conn = accept(listen(address, port, float(sys.argv[5])), token)
    except socket.timeout:
        sys.exit("clusterctl-relay: no receiver came")
    source, skip = sys.stdin.buffer, set(filter(None, sys.argv[6].split(","))) if len(sys.argv) > 6 else set()
    if skip:
        import tarfile
        sink = Counted(conn)
        print("skipped %d" % without_layers(tarfile.open(fileobj=source, mode="r|"), sink, skip))
        total = sink.total
    else:
        total = copy(source.read, conn.sendall)
    conn.shutdown(socket.SHUT_WR)
    conn.close()
    print("sent %d" % total)
else:
    downstream = server = None
    if role == "pipe":  # receive from upstream into stdout, and pass every byte on to one downstream node
        # the next node connects as it starts; a dead one must not hold the chain long
        server = listen(sys.argv[6], int(sys.argv[7]), 15.0)
    deadline = time.monotonic() + float(sys.argv[5])
    while True:
        try:
            conn = socket.create_connection((address, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit("clusterctl-relay: cannot reach %s:%d" % (address, port))
            time.sleep(0.2)
    conn.settimeout(30)  # a stream silent this long: its sender is gone (a node cut off)
    conn.sendall(token)
    if server is not None:  # the downstream node first (it connects as soon as this listens): no byte is lost
        try:
            downstream = accept(server, (sys.argv[8] + "\n").encode())
        except socket.timeout:
            server.close()
            sys.stderr.write("clusterctl-relay: no downstream node came; loading here only\n")
    out = sys.stdout.buffer
    while True:
        data = conn.recv(chunk)
        if not data:
            break
        out.write(data)
        total += len(data)
        if downstream is not None:
            try:
                downstream.sendall(data)
            except OSError:  # the next node went away: this one still loads the image
                sys.stderr.write("clusterctl-relay: the downstream node went away\n")
                downstream = None
    out.flush()
    if downstream is not None:
        downstream.shutdown(socket.SHUT_WR)
        downstream.close()
    sys.stderr.write("received %d\n" % total)
'''

# $1 image, $2 relay code, $3 address, $4 port, $5 token, $6 accept timeout
# $7: the layers not to send (comma-separated hex diff IDs; empty: all)
_WATCH = 'exec 3<&0; export CLUSTERCTL_RELAY_WATCH=3; '  # the relay watches the session's stdin (RELAY)
_SEND = (_WATCH + '{ docker save "$1" 3<&- || echo "clusterctl: docker save failed" >&2; } | '
         'python3 -c "$2" send "$3" "$4" "$5" "$6" "$7"')
# $1 relay code, $2 sender address, $3 port, $4 token, $5 connect timeout; docker load's own output names the image
_RECEIVE = _WATCH + 'python3 -c "$1" recv "$2" "$3" "$4" "$5" | docker load -q 3<&-'
# $1 image: its ID, or nothing
_IMAGE_ID = 'docker image inspect -f "{{.Id}}" "$1" 2>/dev/null || true'
# $1 image: its layers' diff IDs, as a JSON list (or nothing)
_IMAGE_LAYERS = 'docker image inspect -f "{{json .RootFS.Layers}}" "$1" 2>/dev/null || true'
# every image's layers on the node, one JSON list a line: the layer chains its engine holds
_HELD_LAYERS = ('docker image ls -q --no-trunc | sort -u | xargs -r docker image inspect -f "{{json .RootFS.Layers}}" '
                '2>/dev/null || true')
# $1 image: untag a copy that is not the expected image (what `docker load` tagged)
# (The docker CLI runs as the SSH user, as every docker command here: sudo would drop the session's
# DOCKER_HOST, and a user who may not use the engine cannot run `up` at all.)
_UNTAG = 'docker rmi "$1" >/dev/null 2>&1 || true'


def image_id_command(image: str) -> Command:
    return Command(("sh", "-c", _IMAGE_ID, "clusterctl-image-id", image), timeout=60)


def send_command(image: str, address: str, port: int, token: str, skip: tuple[str, ...] = ()) -> Command:
    """`docker save` into the relay, without the layers in `skip` (diff IDs the receiver's engine has)."""
    return Command(("sh", "-c", _SEND, "clusterctl-send", image, RELAY, address, str(port), token, str(ACCEPT_S),
                    ",".join(d.split(":")[-1] for d in skip)), timeout=None, stdin_open=True)


def image_layers_command(image: str) -> Command:
    return Command(("sh", "-c", _IMAGE_LAYERS, "clusterctl-image-layers", image), timeout=60)


def held_layers_command() -> Command:
    return Command(("sh", "-c", _HELD_LAYERS), timeout=120)


def parse_layer_list(line: str) -> list[str]:
    """`{{json .RootFS.Layers}}` -> the diff IDs (nothing for anything else)."""
    try:
        layers = json.loads(line)
    except ValueError:
        return []
    if not isinstance(layers, list) or not all(isinstance(d, str) and d.startswith("sha256:") for d in layers):
        return []
    return layers


def chain_ids(diff_ids: list[str]) -> list[str]:
    """The engine's key for each prefix of an image's layers (the OCI image spec's ChainID): a layer is
    reused only on top of the same layers below it."""
    chains: list[str] = []
    for diff_id in diff_ids:
        chains.append(diff_id if not chains else
                      "sha256:" + hashlib.sha256(f"{chains[-1]} {diff_id}".encode()).hexdigest())
    return chains


def held_chains(stdout: str) -> set[str]:
    """The layer chains a node's engine holds, from _HELD_LAYERS' output."""
    return {chain for line in stdout.splitlines() for chain in chain_ids(parse_layer_list(line.strip()))}


def layers_to_skip(image_layers: list[str], held: set[str]) -> tuple[str, ...]:
    """The diff IDs a node need not be sent: the image's lowest layers, as far as the node holds that
    very chain, less any that a layer above them (not held) repeats."""
    chains = chain_ids(image_layers)
    present = 0
    while present < len(chains) and chains[present] in held:
        present += 1
    return tuple(sorted(set(image_layers[:present]) - set(image_layers[present:])))



def receive_command(address: str, port: int, token: str) -> Command:
    return Command(("sh", "-c", _RECEIVE, "clusterctl-receive", RELAY, address, str(port), token, str(ACCEPT_S)),
                   timeout=None, stdin_open=True)


# $1 relay code, upstream $2 address $3 port $4 token, $5 timeout, downstream $6 own address $7 port $8 token
_PIPE = _WATCH + 'python3 -c "$1" pipe "$2" "$3" "$4" "$5" "$6" "$7" "$8" | docker load -q 3<&-'


def pipe_command(upstream: str, port: int, token: str, own_address: str, downstream_token: str) -> Command:
    """Load the image from upstream while passing every byte on to the next node of the chain."""
    return Command(("sh", "-c", _PIPE, "clusterctl-receive", RELAY, upstream, str(port), token, str(ACCEPT_S),
                    own_address, str(port), downstream_token), timeout=None, stdin_open=True)


def untag_command(image: str) -> Command:
    return Command(("sh", "-c", _UNTAG, "clusterctl-untag", image), timeout=60)


def cut_short(detail: str) -> bool:
    """A receive that failed because its stream ended early or never came (docker load's "unexpected
    EOF" on a truncated tar, the relay's own complaints), not because of what the stream held."""
    return "unexpected EOF" in detail or "clusterctl-relay" in detail


def parse_sent(stdout: str) -> int:
    for line in stdout.splitlines():
        if line.startswith("sent ") and line[5:].strip().isdigit():
            return int(line[5:].strip())
    return 0
