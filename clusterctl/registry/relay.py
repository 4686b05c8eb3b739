"""The relay: what moves an image between two nodes, and the commands that run it there.

A transfer is `docker save IMAGE` on the sender piped into a TCP server (RELAY, a Python program of
the standard library run by the node's python3, bound to the sender's address on the job network),
and on the receiver the relay's client piped through the check (loadcheck.CHECK) into `docker load`
(`pipe`: loading while passing every byte on to the next node of a chain). Both ends of every
transfer hold its key (32 random bytes, on their SSH sessions' stdin, never on a command line) and
prove it to each other over fresh nonces (HMAC-SHA256, compared in constant time) before any image
byte flows. The server takes the first client that proves the key within ACCEPT_S under the one
listener discipline of every node port (node/listener.py, whose text the relay carries in front of
its own): up to 32 unproven connections side by side (8 per address), 5 s each for the whole
handshake, a newcomer dropping the oldest, so neither idle nor trickling connections hold up or
keep out the receiver; a peer silent for 30 s mid-stream ends the transfer. Every relay also ends the moment its SSH
session does (it watches the session's stdin, which clusterctl holds open).

Layers a node has are not sent again: `held_chains` reads the layer chains a node's engine holds
(every image's diff IDs, as OCI chain IDs) and `layers_to_skip` the image's lowest layers the
receiver holds on the same layers below. Pure, but for the commands it builds. Who sends to whom,
and when: peers.py.
"""
from __future__ import annotations

import hashlib
import json
import secrets

from clusterctl.models import Command
from clusterctl.node import source
from clusterctl.registry.loadcheck import CHECK, check_args, save_reference

ACCEPT_S = 60

# The relay's own part; it runs after node/listener.py's text (RELAY below), the discipline every node port keeps
_RELAY = r'''
import hashlib, hmac, os, socket, sys, threading, time
role, address, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
HELLO = b"clusterctl-relay/2\n"
HANDSHAKE_S, IDLE_S, PENDING, PER_ADDRESS = 5.0, 30.0, 32, 8


def session_keys(fd):
    # the transfer's keys (hex, one line) come first on the SSH session's stdin: never on the command
    # line or in the environment, which `ps` and /proc show every local user
    line = b""
    while not line.endswith(b"\n"):
        part = os.read(fd, 1)
        if not part or len(line) > 1024:
            sys.exit("clusterctl-relay: no transfer key on the session's stdin")
        line += part
    try:
        return [bytes.fromhex(key) for key in line.decode().split()]
    except ValueError:
        sys.exit("clusterctl-relay: the transfer key is not hex")


def orphaned(fd):
    # fd: the SSH session's stdin, kept open by clusterctl (stdin_open) while it waits for this
    # transfer: its end (Ctrl-C, a killed clusterctl, a lost connection) ends this relay at once,
    # not after the accept/connect timeouts; the pipes around it then end docker save/load
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass
    os._exit(3)


watch = int(os.environ.get("CLUSTERCTL_RELAY_WATCH") or sys.exit("clusterctl-relay: run by clusterctl only"))
keys = session_keys(watch)
threading.Thread(target=orphaned, args=(watch,), daemon=True).start()
total, chunk = 0, 1 << 20


def listen(address, port):
    server = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address, port))
    server.listen(64)
    server.settimeout(0.2)
    return server


def read_exactly(conn, size):
    got = b""
    while len(got) < size:
        part = conn.recv(size - len(got))
        if not part:
            raise ConnectionError("closed before the handshake ended")
        got += part
    return got


def mac(key, side, nonces):
    return hmac.new(key, side + nonces, hashlib.sha256).digest()


def prove_sender(conn, key):
    # both ends prove the transfer's key over fresh nonces of both, before any image byte: the
    # receiver's nonce, then ours with our proof, then the receiver's proof (each side's own label,
    # so neither proof can be played back as the other)
    conn.settimeout(HANDSHAKE_S)
    hello = read_exactly(conn, len(HELLO) + 32)
    if hello[:len(HELLO)] != HELLO:
        raise ConnectionError("not a relay")
    nonces = hello[len(HELLO):] + os.urandom(32)
    conn.sendall(nonces[32:] + mac(key, b"sender", nonces))
    if not hmac.compare_digest(read_exactly(conn, 32), mac(key, b"receiver", nonces)):
        raise ConnectionError("wrong key")
    conn.settimeout(IDLE_S)  # a receiver that stops reading this long: the send fails, named


def prove_receiver(conn, key, where):
    conn.settimeout(HANDSHAKE_S)
    mine = os.urandom(32)
    conn.sendall(HELLO + mine)
    answer = read_exactly(conn, 64)
    nonces = mine + answer[:32]
    if not hmac.compare_digest(answer[32:], mac(key, b"sender", nonces)):
        sys.exit("clusterctl-relay: %s did not prove the transfer's key (not the sending node's relay): "
                 "nothing received" % where)
    conn.sendall(mac(key, b"receiver", nonces))
    conn.settimeout(IDLE_S)  # a stream silent this long: its sender is gone (a node cut off)


def accept(server, key, timeout):
    # the first connection that proves the key (listener.py's first_proven, whose text precedes this
    # one: each handshake on its own thread within HANDSHAKE_S of its accept, a newcomer dropping the
    # oldest unproven one); raises socket.timeout when none does in time
    won = first_proven(server, lambda conn: prove_sender(conn, key), timeout, Slots(HANDSHAKE_S, PER_ADDRESS, PENDING))
    if won is None:
        raise socket.timeout()
    return won[0]


def connect(address, port, key, timeout):
    # the sender, once it proves the key; a refused or dropped connection is tried again until `timeout`
    deadline, where = time.monotonic() + timeout, "%s:%d" % (address, port)
    while True:
        try:
            conn = socket.create_connection((address, port), timeout=5)
            prove_receiver(conn, key, where)
            return conn
        except OSError:
            if time.monotonic() > deadline:
                sys.exit("clusterctl-relay: cannot reach %s" % where)
            time.sleep(0.2)


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
    import tarfile, tempfile
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


def send(conn, skip):
    source, sink = sys.stdin.buffer, Counted(conn)
    if skip:
        import tarfile
        print("skipped %d" % without_layers(tarfile.open(fileobj=source, mode="r|"), sink, skip))
    else:
        copy(source.read, sink.write)
    conn.shutdown(socket.SHUT_WR)
    conn.close()
    return sink.total


def receive(conn, downstream):
    # every byte from upstream into stdout (docker load, through the check), and on to `downstream`
    received, out = 0, sys.stdout.buffer
    while True:
        data = conn.recv(chunk)
        if not data:
            break
        out.write(data)
        received += len(data)
        if downstream is not None:
            try:
                downstream.sendall(data)
            except OSError:  # the next node went away or stopped reading: this one still loads the image
                sys.stderr.write("clusterctl-relay: the downstream node went away\n")
                downstream = None
    out.flush()
    if downstream is not None:
        downstream.shutdown(socket.SHUT_WR)
        downstream.close()
    return received


try:
    if role == "send":
        try:
            conn = accept(listen(address, port), keys[0], float(sys.argv[4]))
        except socket.timeout:
            sys.exit("clusterctl-relay: no receiver came (none proved the transfer's key)")
        total = send(conn, set(filter(None, sys.argv[5].split(","))) if len(sys.argv) > 5 else set())
        print("sent %d" % total)
    else:
        # a chain's node listens first (the next node connects as it starts), then takes its upstream,
        # then the next node (a dead one must not hold the chain long): no byte is lost
        server = listen(sys.argv[5], int(sys.argv[6])) if role == "pipe" else None
        conn, downstream = connect(address, port, keys[0], float(sys.argv[4])), None
        if server is not None:
            try:
                downstream = accept(server, keys[1], 15.0)
            except socket.timeout:
                sys.stderr.write("clusterctl-relay: no downstream node came; loading here only\n")
        sys.stderr.write("received %d\n" % receive(conn, downstream))
except OSError as exc:  # a peer gone or silent for IDLE_S: one line, the check and docker load see a cut stream
    sys.exit("clusterctl-relay: %s" % (exc.strerror or str(exc) or exc.__class__.__name__))
'''
RELAY = source("listener.py").decode() + _RELAY  # one program on the node, shipped as `python3 -c` text

# The transfer's keys never go on a command line: each relay reads them from the first line of its
# SSH session's stdin (Command.stdin), then watches that stdin for the session's end (RELAY).
# $1 image, $2 relay code, $3 address, $4 port, $5 accept timeout,
# $6: the layers not to send (comma-separated hex diff IDs; empty: all)
_WATCH = 'exec 3<&0; export CLUSTERCTL_RELAY_WATCH=3; '  # the relay reads its key from, and watches, fd 3
_SEND = (_WATCH + '{ docker save "$1" 3<&- </dev/null || echo "clusterctl: docker save failed" >&2; } | '
         'python3 -c "$2" send "$3" "$4" "$5" "$6"')
# $1 relay code, $2 sender address, $3 port, $4 connect timeout, $5 the check (loadcheck.CHECK), $6-$9 its
# arguments (the expected image ID and names); docker load's own output names the image
_RECEIVE = (_WATCH + 'python3 -c "$1" recv "$2" "$3" "$4" </dev/null | python3 -c "$5" "$6" "$7" "$8" "$9" 3<&- | '
            'docker load -q 3<&-')
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


def send_command(image: str, address: str, port: int, key: str, skip: tuple[str, ...] = ()) -> Command:
    """`docker save` into the relay, without the layers in `skip` (diff IDs the receiver's engine has);
    `key` (new_key()) goes on the session's stdin, never the command line."""
    return Command(("sh", "-c", _SEND, "clusterctl-send", save_reference(image), RELAY, address, str(port),
                    str(ACCEPT_S), ",".join(d.split(":")[-1] for d in skip)),
                   timeout=None, stdin=f"{key}\n".encode(), stdin_open=True)


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



def receive_command(address: str, port: int, key: str, image: str, expected_id: str) -> Command:
    """The relay's client into the check into `docker load`: only `expected_id`, tagged `image`, is kept."""
    return Command(("sh", "-c", _RECEIVE, "clusterctl-receive", RELAY, address, str(port), str(ACCEPT_S), CHECK,
                    *check_args(image, expected_id)), timeout=None, stdin=f"{key}\n".encode(), stdin_open=True)


# $1 relay code, upstream $2 address $3 port, $4 timeout, downstream $5 own address $6 port, $7 the check,
# $8-$11 its arguments
_PIPE = (_WATCH + 'python3 -c "$1" pipe "$2" "$3" "$4" "$5" "$6" </dev/null | '
         'python3 -c "$7" "$8" "$9" "${10}" "${11}" 3<&- | docker load -q 3<&-')


def pipe_command(upstream: str, port: int, key: str, own_address: str, downstream_key: str, image: str,
                 expected_id: str) -> Command:
    """Load the image from upstream (checked) while passing every byte on to the next node of the chain
    (which checks it itself)."""
    return Command(("sh", "-c", _PIPE, "clusterctl-receive", RELAY, upstream, str(port), str(ACCEPT_S),
                    own_address, str(port), CHECK, *check_args(image, expected_id)),
                   timeout=None, stdin=f"{key} {downstream_key}\n".encode(), stdin_open=True)


def new_key() -> str:
    """One transfer's key: 32 random bytes, hex (given to its two ends only, on their sessions' stdin)."""
    return secrets.token_hex(32)


def untag_command(image: str) -> Command:
    return Command(("sh", "-c", _UNTAG, "clusterctl-untag", image), timeout=60)


def cut_short(detail: str) -> bool:
    """A receive that failed because its stream ended early or never came (docker load's "unexpected
    EOF" on a truncated tar, the relay's own complaints, the check's "the stream was cut"), not because of
    what the stream held (the check's refusal, a load that wants every layer's file)."""
    return ("unexpected EOF" in detail or "clusterctl-relay" in detail or "the stream was cut" in detail) and \
        "refused the relayed image" not in detail


def parse_sent(stdout: str) -> int:
    for line in stdout.splitlines():
        if line.startswith("sent ") and line[5:].strip().isdigit():
            return int(line[5:].strip())
    return 0
