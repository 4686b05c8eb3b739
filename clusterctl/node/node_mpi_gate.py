"""`job.launcher: mpirun` on the nodes (shipped into the run's .files by the runner; standard library only).

Nobody gets SSH keys: mpirun starts its remote daemons (orted) through clusterctl's own relay, as
Kubeflow's MPI operator does through `kubectl exec`. Four roles, one program:

- `gate ADDRESS PORT MASTER WAIT_S RANK_DIRS`: every node but the master runs it as its process. It
  listens on the node's plan address, closes at once a connection from anywhere but MASTER_ADDR (so
  a stranger on the job network cannot hold the gate through a handshake's wait), proves the others
  side by side under listener.py's discipline (HANDSHAKE_S for the whole handshake, HANDSHAKES at once,
  a newcomer dropping the oldest: idle connections from the master's own address cannot keep its agent
  out), takes the FIRST connection that proves the run's secret (HMAC-SHA256 of a fresh nonce and the
  command), runs the command (Open MPI's rsh launch line, `... orted ...`) through `sh -c` in a
  process group of its own, relays its output, and ends with its exit code; when the connection drops
  it kills the group. Nobody within WAIT_S -> it ends with a line naming the master. Exit code:
  orted's, else the first rank failure of this node.
- `agent HOST WORDS...`: mpirun's `plm_rsh_agent` on the master: connects to HOST's gate from
  MASTER_ADDR (where that is this machine's own address), proves the secret, sends the words joined
  by spaces (as ssh does), relays, ends with the remote code. Killed by mpirun, it closes the connection, which stops the gate's group.
- `launch RUN_DIR HOSTFILE_TEXT MPIRUN_ARGV...`: the master's process: writes the hostfile and the
  secret (0600) into its private run dir, then becomes mpirun.
- `rank LOGS RUN_ID ARGV...`: what mpirun starts for each rank: RANK/WORLD_SIZE/LOCAL_RANK/
  LOCAL_WORLD_SIZE from Open MPI's OMPI_COMM_WORLD_*; the rank's output into the torchrun-like rank
  dir on its node (`LOGS/<host>/<run id>_mpirun/attempt_0/<local rank>/{stdout,stderr}.log`) and,
  with the `[host rankN]: ` prefix, into its node's agent.log (as torchrun's --tee does), so the live
  log, collect and the first failure read it as a torchrun rank's. A failed rank leaves torchrun's
  `failed (exitcode: N) local_rank: L (pid: P)` line there, stamped to the microsecond.

The secret comes in the node's private env file as CLUSTERCTL_MPI_SECRET and is taken out of the
environment at once: no orted or rank inherits it.
"""
import datetime
import errno
import glob
import hashlib
import hmac
import os
import secrets
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

if __package__:  # imported by the controller
    from clusterctl.node.layout import ranks_dir
    from clusterctl.node.listener import RefusalLog, Slots, first_proven
else:  # run on a node, layout.py and listener.py shipped beside it
    from layout import ranks_dir
    from listener import RefusalLog, Slots, first_proven

RUNS_ON_NODES = True
SECRET_VAR, KEYFILE_VAR, PORT_VAR = "CLUSTERCTL_MPI_SECRET", "CLUSTERCTL_MPI_KEYFILE", "CLUSTERCTL_MPI_GATE_PORT"
HELLO = b"clusterctl-mpi-gate 1 "
MAX_COMMAND = 65536  # bytes: Open MPI's orted line is a few KiB
MAX_LINE = 256  # a handshake line
HANDSHAKE_S = 10.0  # a connected peer that has not proven the secret this long after connecting is dropped
HANDSHAKES = 8  # unproven connections side by side (all from the master's address): a newcomer drops the oldest
CONNECT_S = 60.0  # the agent retries a gate that is not up yet for this long
KILL_GRACE_S = 3.0
STOPPED = (-15, -1)  # SIGTERM, SIGHUP: a rank that was stopped did not fail
OUT, ERR, EXIT = 1, 2, 3


# --------------------------------------------------------------------------- the protocol


def mac(key: bytes, nonce: bytes, command: bytes) -> str:
    return hmac.new(key, nonce + b"\n" + command, hashlib.sha256).hexdigest()


def frame(channel: int, data: bytes) -> bytes:
    return struct.pack("!BI", channel, len(data)) + data


def read_line(conn: socket.socket, deadline: float) -> bytes:
    """One `\\n`-ended line of at most MAX_LINE bytes, before `deadline` (time.monotonic)."""
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the peer said nothing in time")
        conn.settimeout(left)
        chunk = conn.recv(1)
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        data += chunk
        if len(data) > MAX_LINE:
            raise ValueError("a handshake line is too long")
    return data[:-1]


def read_exact(conn: socket.socket, size: int, deadline: float) -> bytes:
    """`size` bytes before `deadline` (time.monotonic; None: no limit)."""
    data = b""
    while len(data) < size:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError("the peer said nothing in time")
        conn.settimeout(left)
        chunk = conn.recv(min(65536, size - len(data)))
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        data += chunk
    return data


def receive_command(conn: socket.socket, key: bytes, timeout: float = HANDSHAKE_S, confirm: bool = True) -> bytes:
    """The gate's side of the handshake: a nonce out; `<mac> <length>` and the command in; `ok` out
    (with `confirm`; else the caller says it once it took this connection).
    Raises PermissionError (wrong secret), ValueError (malformed, too long), TimeoutError."""
    deadline = time.monotonic() + timeout
    nonce = secrets.token_hex(16).encode()
    conn.sendall(HELLO + nonce + b"\n")
    fields = read_line(conn, deadline).split(b" ")
    if len(fields) != 2 or not fields[1].isdigit():
        raise ValueError("a malformed request")
    size = int(fields[1])
    if size > MAX_COMMAND:
        raise ValueError(f"a command of {size} bytes (at most {MAX_COMMAND})")
    command = read_exact(conn, size, deadline)
    if not hmac.compare_digest(fields[0], mac(key, nonce, command).encode()):
        raise PermissionError("the peer does not hold this run's secret")
    if confirm:
        conn.sendall(b"ok\n")
    return command


def send_command(conn: socket.socket, key: bytes, command: bytes, timeout: float = HANDSHAKE_S) -> None:
    """The agent's side: read the nonce, send the proof and the command, wait for `ok`."""
    deadline = time.monotonic() + timeout
    hello = read_line(conn, deadline)
    if not hello.startswith(HELLO):
        raise ConnectionError("not a clusterctl mpi gate")
    nonce = hello[len(HELLO):]
    conn.sendall(mac(key, nonce, command).encode() + b" " + str(len(command)).encode() + b"\n" + command)
    if read_line(conn, deadline) != b"ok":
        raise PermissionError("the gate refused the command")


# --------------------------------------------------------------------------- gate


def say(role: str, text: str) -> None:
    print(f"clusterctl mpi {role} on {os.environ.get('CLUSTERCTL_HOST', socket.gethostname())}: {text}",
          file=sys.stderr, flush=True)


def addresses_of(name: str) -> frozenset:
    """The IP addresses `name` resolves to; empty when it does not (then only the secret is checked)."""
    try:
        return frozenset(info[4][0] for info in socket.getaddrinfo(name, None)) if name else frozenset()
    except OSError:
        return frozenset()


def accept_one(server: socket.socket, key: bytes, wait_s: float, allowed: frozenset = frozenset()):
    """The first connection that proves the secret, with its command; None when WAIT_S passed. A peer
    outside `allowed` (the master's addresses, when known) is closed before any handshake; the others
    prove themselves side by side (listener.first_proven), each within HANDSHAKE_S."""
    slots = Slots(HANDSHAKE_S, HANDSHAKES, HANDSHAKES, RefusalLog(lambda line: say("gate", line.rstrip())))
    won = first_proven(server, lambda conn: receive_command(conn, key, confirm=False), wait_s, slots, allowed)
    if won is None:
        return None
    conn, command = won
    try:
        conn.sendall(b"ok\n")
    except OSError:  # gone between its proof and our answer: as if it never came
        conn.close()
        return None
    return conn, command


def run_gate(address: str, port: int, master: str, wait_s: float, rank_dirs: str) -> int:
    key = os.environ.pop(SECRET_VAR, "").encode()
    if not key:
        say("gate", f"no {SECRET_VAR} in the environment")
        return 2
    if shutil.which("orted") is None:
        say("gate", "Open MPI's orted is not installed: apt-get install openmpi-bin in the image (or on the node)")
        return 127
    try:
        server = socket.create_server((address, port), family=socket.AF_INET6 if ":" in address else socket.AF_INET)
    except OSError as exc:
        say("gate", f"cannot listen on {address}:{port} (rendezvous port + 3): {exc}")
        return 1
    accepted = accept_one(server, key, wait_s, addresses_of(os.environ.get("MASTER_ADDR", "")))
    server.close()
    if accepted is None:
        say("gate", f"mpirun on {master} did not connect to {address}:{port} within {wait_s:g}s: "
                    f"see {master}'s log")
        return 1
    conn, command = accepted
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    child = subprocess.Popen(["sh", "-c", command.decode("utf-8", "surrogateescape")], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # stopped (`clusterctl stop`): orted's group too
        signal.signal(sig, lambda number, _frame: (stop_group(child), os._exit(128 + number)))
    code = relay_child(conn, child)
    if code is None:
        stop_group(child)
        say("gate", f"lost the connection to mpirun's agent on {master}: stopped this node's orted and ranks")
        return 1
    conn.close()
    return code if code != 0 else rank_failure(rank_dirs)


def relay_child(conn: socket.socket, child: subprocess.Popen):
    """Child output to the agent until the child ends (its code) or the connection drops (None)."""
    sel = selectors.DefaultSelector()
    sel.register(child.stdout, selectors.EVENT_READ, OUT)
    sel.register(child.stderr, selectors.EVENT_READ, ERR)
    sel.register(conn, selectors.EVENT_READ, 0)
    conn.setblocking(True)
    conn.settimeout(None)
    open_pipes = 2
    try:
        while open_pipes:
            for key, _ in sel.select():
                if key.data == 0:  # the agent sends nothing after the command: data or EOF both end it
                    return None
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fileobj)
                    open_pipes -= 1
                    continue
                conn.sendall(frame(key.data, data))
        code = child.wait()
        conn.sendall(frame(EXIT, str(code).encode()))
        return code
    except OSError:
        return None


def stop_group(child: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        try:
            child.wait(KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def rank_failure(rank_dirs: str) -> int:
    """orted ended well: the exit code of a rank of this node that failed by its own fault, else 0."""
    for path in sorted(glob.glob(os.path.join(rank_dirs, "*", "exit"))):
        try:
            with open(path) as f:
                code = int(f.read(16).strip())
        except (OSError, ValueError):
            continue
        if code != 0 and code not in STOPPED:
            return code if code > 0 else 128 - code
    return 0


# --------------------------------------------------------------------------- agent


def connect(host: str, port: int) -> socket.socket:
    """To HOST's gate from MASTER_ADDR, the one address the gate takes; retried while gates come up."""
    deadline = time.monotonic() + CONNECT_S
    source = os.environ.get("MASTER_ADDR") or None
    while True:
        try:
            return socket.create_connection((host, port), timeout=HANDSHAKE_S,
                                            source_address=(source, 0) if source else None)
        except OSError as exc:
            if source and exc.errno == errno.EADDRNOTAVAIL:  # not this machine's address (NAT): the gate says so
                say("agent", f"MASTER_ADDR {source} is not an address of this machine; connecting from any")
                source = None
                continue
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def run_agent(argv: list) -> int:
    words = list(argv)
    while words and words[0].startswith("-"):  # an rsh agent's options, if Open MPI ever passes some
        words.pop(0)
    if len(words) < 2:
        say("agent", "usage: agent HOST COMMAND...")
        return 2
    host, command = words[0], " ".join(words[1:]).encode("utf-8", "surrogateescape")
    port = int(os.environ.get(PORT_VAR, "0"))
    try:
        with open(os.environ[KEYFILE_VAR], "rb") as f:
            key = f.read().strip()
        conn = connect(host, port)
        send_command(conn, key, command)
    except (OSError, KeyError, PermissionError, TimeoutError) as exc:
        say("agent", f"could not start the command on {host}:{port}: {exc}")
        return 255
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: (conn.close(), os._exit(1)))
    return relay_frames(conn, host)


def relay_frames(conn: socket.socket, host: str) -> int:
    conn.settimeout(None)
    out = {OUT: sys.stdout.buffer, ERR: sys.stderr.buffer}
    deadline = None  # the run's own length: the gate's end or the connection's is the bound
    try:
        while True:
            channel, size = struct.unpack("!BI", read_exact(conn, 5, deadline))
            if size > 1 << 20:
                raise ValueError("a frame over 1 MiB")
            data = read_exact(conn, size, deadline)
            if channel == EXIT:
                return int(data)
            out[channel].write(data)
            out[channel].flush()
    except (OSError, ValueError, KeyError) as exc:
        say("agent", f"lost the gate on {host}: {exc}")
        return 255


# --------------------------------------------------------------------------- launch (the master)


def run_launch(run_dir: str, hostfile: str, mpirun_argv: list) -> int:
    key = os.environ.pop(SECRET_VAR, "")
    # Debian's mpirun is an alternatives link through /etc, which an image sharing the host's /usr lacks
    found = [name for name in (mpirun_argv[0], "mpirun.openmpi", "orterun") if shutil.which(name)]
    if not found:
        say("launch", f"{mpirun_argv[0]} is not installed: apt-get install openmpi-bin in the image (or on the node)")
        return 127
    mpirun_argv = [found[0]] + list(mpirun_argv[1:])
    old = os.umask(0o077)
    try:
        with open(os.path.join(run_dir, "mpi.key"), "w") as f:
            f.write(key)
        with open(os.path.join(run_dir, "hostfile"), "w") as f:
            f.write(hostfile)
    finally:
        os.umask(old)
    os.environ[KEYFILE_VAR] = os.path.join(run_dir, "mpi.key")
    sys.stdout.flush()
    os.execvp(mpirun_argv[0], mpirun_argv)
    return 127


# --------------------------------------------------------------------------- rank


class Tee:
    """A rank's stream: whole lines into its own file and, prefixed, into the node's agent.log."""

    def __init__(self, path: str, log, prefix: bytes):
        self.file, self.log, self.prefix, self.partial = open(path, "wb"), log, prefix, b""  # a relaunch starts anew

    def feed(self, data: bytes) -> None:
        self.file.write(data)
        self.file.flush()
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        if len(self.partial) > 65536:  # an endless line goes out in pieces
            lines.append(self.partial)
            self.partial = b""
        if lines:
            self.log.write(b"".join(self.prefix + line + b"\n" for line in lines))
            self.log.flush()

    def close(self) -> None:
        if self.partial:
            self.feed(b"\n")
        self.file.close()


def rank_env(environ: dict) -> dict:
    """torch's env:// variables from Open MPI's (the node's own NODE_RANK/MASTER_* are kept)."""
    names = {"RANK": "OMPI_COMM_WORLD_RANK", "WORLD_SIZE": "OMPI_COMM_WORLD_SIZE",
             "LOCAL_RANK": "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_WORLD_SIZE": "OMPI_COMM_WORLD_LOCAL_SIZE"}
    env = dict(environ)
    env.update({ours: environ[theirs] for ours, theirs in names.items() if theirs in environ})
    env.pop(SECRET_VAR, None)
    env.pop(KEYFILE_VAR, None)
    return env


def glog_failed(code: int, local_rank: str, pid: int, binary: str) -> bytes:
    """torchrun's own line for a failed worker (watch/torchrun_report.py reads it)."""
    now = datetime.datetime.now()
    return (f"E{now:%m%d %H:%M:%S.%f} {os.getpid()} clusterctl/node_mpi_gate.py:1] failed (exitcode: {code}) "
            f"local_rank: {local_rank} (pid: {pid}) of binary: {binary}\n").encode()


def run_rank(logs: str, run_id: str, argv: list) -> int:
    env = rank_env(dict(os.environ))
    host, rank, local = env.get("CLUSTERCTL_HOST", "?"), env.get("RANK", "?"), env.get("LOCAL_RANK", "0")
    run_dir = os.path.join(logs, host)
    rank_dir = os.path.join(ranks_dir(run_dir, run_id, "mpirun"), local)
    os.makedirs(rank_dir, exist_ok=True)
    if os.path.exists(os.path.join(rank_dir, "exit")):  # an earlier attempt's (a run that heals itself)
        os.unlink(os.path.join(rank_dir, "exit"))
    prefix = f"[{host} rank{rank}]: ".encode()
    with open(os.path.join(run_dir, "agent.log"), "ab") as log:
        child = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda number, _frame: child.send_signal(number))
        tees = {child.stdout: Tee(os.path.join(rank_dir, "stdout.log"), log, prefix),
                child.stderr: Tee(os.path.join(rank_dir, "stderr.log"), log, prefix)}
        sel = selectors.DefaultSelector()
        for pipe in tees:
            sel.register(pipe, selectors.EVENT_READ)
        while sel.get_map():
            for key, _ in sel.select():
                data = os.read(key.fd, 65536)
                if data:
                    tees[key.fileobj].feed(data)
                else:
                    sel.unregister(key.fileobj)
        for tee in tees.values():
            tee.close()
        code = child.wait()
        with open(os.path.join(rank_dir, "exit"), "w") as f:
            f.write(f"{code}\n")
        if code != 0:
            log.write(prefix + f"clusterctl: the job exited with code {code}\n".encode())
            log.write(glog_failed(code, local, child.pid, argv[0]))
    if code < 0:  # die of the same signal, so mpirun reports it as such
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def main(argv: list) -> int:
    role, rest = (argv[0], argv[1:]) if argv else ("", [])
    if role == "gate" and len(rest) == 5:
        return run_gate(rest[0], int(rest[1]), rest[2], float(rest[3]), rest[4])
    if role == "agent":
        return run_agent(rest)
    if role == "launch" and len(rest) >= 3:
        return run_launch(rest[0], rest[1], rest[2:])
    if role == "rank" and len(rest) >= 3:
        return run_rank(rest[0], rest[1], rest[2:])
    print("usage: node_mpi_gate.py gate|agent|launch|rank ...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
