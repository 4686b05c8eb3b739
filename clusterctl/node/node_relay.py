"""The image relay's node side (registry/relay.py builds the commands that run it, peers.py decides who
sends to whom): `docker save`'s stream from the sender's stdin to the first receiver that proves the
transfer's key, and on each receiver from its upstream into stdout (the check, then `docker load`) and on
to the next node of a chain. Under the one listener discipline of every node port (listener.py, loaded
beside it): handshakes side by side, HANDSHAKE_S each, PENDING unproven connections (PER_ADDRESS of one
address), a newcomer dropping the oldest. Run as the one inline program of a command (node
`inline_argv`): `python3 -I -S -c TEXT send|recv|pipe ADDRESS PORT WAIT_S ...`, the keys on the first line
of fd CLUSTERCTL_RELAY_WATCH (the SSH session's stdin, never a command line), which it watches for the
session's end. Stdlib only."""
import hashlib
import hmac
import os
import socket
import sys
import threading
import time

if __package__:  # imported by the controller's tests
    from clusterctl.node.listener import Slots, first_proven
else:  # loaded beside listener.py (node inline_program)
    from listener import Slots, first_proven

RUNS_ON_NODES = True
HELLO = b"clusterctl-relay/2\n"
HANDSHAKE_S, IDLE_S, PENDING, PER_ADDRESS = 5.0, 30.0, 32, 8
CHUNK = 1 << 20


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
        data = read(CHUNK)
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
        data = conn.recv(CHUNK)
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


def main(argv):
    role, address, port = argv[1], argv[2], int(argv[3])
    watch = int(os.environ.get("CLUSTERCTL_RELAY_WATCH") or sys.exit("clusterctl-relay: run by clusterctl only"))
    keys = session_keys(watch)
    threading.Thread(target=orphaned, args=(watch,), daemon=True).start()
    try:
        if role == "send":
            try:
                conn = accept(listen(address, port), keys[0], float(argv[4]))
            except socket.timeout:
                sys.exit("clusterctl-relay: no receiver came (none proved the transfer's key)")
            total = send(conn, set(filter(None, argv[5].split(","))) if len(argv) > 5 else set())
            print("sent %d" % total)
        else:
            # a chain's node listens first (the next node connects as it starts), then takes its upstream,
            # then the next node (a dead one must not hold the chain long): no byte is lost
            server = listen(argv[5], int(argv[6])) if role == "pipe" else None
            conn, downstream = connect(address, port, keys[0], float(argv[4])), None
            if server is not None:
                try:
                    downstream = accept(server, keys[1], 15.0)
                except socket.timeout:
                    sys.stderr.write("clusterctl-relay: no downstream node came; loading here only\n")
            sys.stderr.write("received %d\n" % receive(conn, downstream))
    except OSError as exc:  # a peer gone or silent for IDLE_S: one line, the check and docker load see a cut stream
        sys.exit("clusterctl-relay: %s" % (exc.strerror or str(exc) or exc.__class__.__name__))
    return 0
