"""The image crosses the registry's link once: nodes that have it send it to nodes that do not,
node to node over the cluster network (`container.distribute: peers`; `auto`: from 4 nodes up).

How, and why this way:
- One seed has the image: a node that already holds the tag (`container.pull: missing`), else the
  first node, which pulls it from the registry as `docker.pull` would.
- Then a chain: seed -> n1 -> n2 -> ..., every node loading the image while it passes each byte on to
  the next, all at once (each link carries the image once, and no node waits for another to finish).
  Then, for the nodes the chain did not serve (a node that died cuts it), rounds: every node that has
  the image sends it to one that has not, all pairs at once, so the holders double each round. A transfer is
  `docker save IMAGE` on the sender piped into a one-connection TCP server (RELAY, Python's standard
  library on the host, bound to the sender's address on the job network), and on the receiver the
  relay's client piped into `docker load`. Nothing is relayed through this controller, whose link is
  as narrow as the registry's; only the commands go over SSH.
- Why not a registry on the seed: an engine pulls from a plain-HTTP registry only where its
  daemon.json lists it as insecure (a change to every node's engine config), and the classic image
  store keeps unpacked layers, so a seed's registry would recompress every layer anyway
  (distribution#1100). `docker save | docker load` needs nothing but the docker CLI and python3.
- Layers a node has are not sent again (moby#247's complaint about save/load): each node says which
  layer chains its engine holds (every image's diff IDs); the sender drops from the saved tar the
  image's lowest layers that the receiver holds on the same layers below (a chain ID match), and
  `docker load` reads a layer's file only where the engine lacks that chain. An image update that
  adds a layer sends that layer. In the chain pass the layers dropped are those every node of it
  holds. Where a load of the trimmed tar fails other than by a stream cut short (an engine that
  wants every file: the containerd image store), the node's next try gets the whole image. A node with the same image ID receives
  nothing.
- Verified: after `docker load` the receiver's image ID must equal the seed's (the config digest the
  registry's manifest names); else the tag is removed there and the node fails, named. `docker load`
  tags only a complete image, so a transfer cut short leaves no tag. A node whose transfer failed is
  retried from another holder in the next round, then left to `docker.pull` (the registry).
- The relay's server accepts one client that sends the transfer's token, within ACCEPT_S, and
  ends with the stream. Every relay also ends the moment its SSH session does (it watches the
  session's stdin, which clusterctl holds open): after Ctrl-C or a killed `up` nothing listens or
  loads on, and a cut `docker load` tags nothing.
"""
from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Optional

from clusterctl.models import Command, Host, HostResult, HostStatus, Inventory

PORT_OFFSET = 2  # the relay listens on rendezvous.port + 2 (up runs no job: the rendezvous ports are free)
PEERS_FROM = 4  # `auto`: peers from this many nodes up
ACCEPT_S = 60
MAX_TRIES = 2

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


def peers_apply(inventory: Inventory, node_count: int) -> bool:
    """Whether `up` distributes the image between the nodes (else every node pulls it)."""
    if not inventory.uses_container:
        return False
    mode = inventory.container.distribute
    return mode == "peers" or (mode == "auto" and node_count >= PEERS_FROM)


@dataclass
class Holding:
    """Where one node's image came from, for `up`'s result (and --json)."""
    source: str  # present | registry | peer:NODE
    image_id: str
    bytes: int = 0
    seconds: float = 0.0
    layers_kept: int = 0  # layers the node already had (on the same layers below), not sent again

    def to_json(self) -> dict:
        rate = round(self.bytes / self.seconds / 1e6, 1) if self.seconds > 0 and self.bytes else None
        return {"source": self.source, "image_id": self.image_id, "bytes": self.bytes,
                "seconds": round(self.seconds, 2), "mb_per_s": rate, "layers_kept": self.layers_kept}


@dataclass
class Plan:
    """The rounds so far: who holds the image, who still needs it, who gave up."""
    expected_id: str
    holders: list[str]
    needing: list[str]
    tries: dict[str, int] = field(default_factory=dict)
    whole: set[str] = field(default_factory=set)  # nodes sent every layer from now on (a trimmed load failed)

    def load_failed(self, node: str, detail: str) -> None:
        """A failed receive: unless its stream was only cut short (a node before it in the chain went
        away), the engine may want every layer's file (the containerd image store): send it all next."""
        if not cut_short(detail):
            self.whole.add(node)

    def pairs(self) -> list[tuple[str, str]]:
        """(sender, receiver) for the next round: each holder sends to one node that needs the image."""
        return list(zip(self.holders, self.needing))

    def received(self, node: str) -> None:
        self.needing.remove(node)
        self.holders.append(node)

    def failed(self, node: str) -> bool:
        """One more failed try for `node`; True when it is given up (left to the registry pull)."""
        self.tries[node] = self.tries.get(node, 0) + 1
        if self.tries[node] >= MAX_TRIES:
            self.needing.remove(node)
            return True
        self.needing.remove(node)
        self.needing.append(node)  # behind the others: another holder may send to it next round
        return False


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


def transfer_failure(receiver: str, sender: str, result: HostResult, got_id: Optional[str], expected: str) -> str:
    if result.succeeded and got_id and got_id != expected:
        return (f"the image {receiver} loaded from {sender} is {got_id[:19]}, not {expected[:19]} (the seed's, "
                "which the registry's manifest names); its tag was removed there")
    return f"from {sender}: {result.detail or 'the transfer failed'}"


def new_token() -> str:
    return secrets.token_hex(16)


def now() -> float:
    return time.monotonic()


def unreachable(result: HostResult) -> bool:
    return result.status is HostStatus.UNREACHABLE


def holding_result(host: Host, holding: Holding) -> HostResult:
    data = {"distribute": holding.to_json()}
    if holding.source == "present":
        return HostResult(host.name, HostStatus.OK, "", data=data)
    rate = holding.to_json()["mb_per_s"]
    how = f"{holding.bytes / 1e6:.0f} MB in {holding.seconds:.1f}s ({rate} MB/s)" if holding.bytes else "pulled"
    if holding.layers_kept:
        how += f", {holding.layers_kept} layer(s) it had not sent again"
    return HostResult(host.name, HostStatus.CHANGED, f"image from {holding.source}: {how}", data=data)


# --------------------------------------------------------------------------- the rounds (I/O)

def send_on(transport, host: Host, command: Command) -> HostResult:
    """One sending end (a round's sender, the chain's seed): how many bytes went."""
    sent = transport.run(command)
    status = HostStatus.OK if sent.exit_code == 0 else HostStatus.FAILED
    return HostResult(host.name, status, sent.stderr.strip()[-300:], data={"bytes": parse_sent(sent.stdout)})


def receive_on(transport, host: Host, command: Command, image: str, expected: str) -> HostResult:
    """One receiving end (`docker load` from a relay): the image ID it ended with; a loaded image that is
    not `expected` is untagged at once (the caller fails the node, named)."""
    started = now()
    got = transport.run(command)
    seconds = now() - started
    found = transport.run(image_id_command(image)).stdout.strip()
    if got.exit_code != 0:
        return HostResult(host.name, HostStatus.FAILED, (got.stderr.strip() or got.stdout.strip())[-300:],
                          data={"image_id": found})
    if found != expected:
        transport.run(untag_command(image))
    return HostResult(host.name, HostStatus.OK, data={"image_id": found, "seconds": seconds})


def distribute(hosts: list[Host], inventory: Inventory, connections, pull_seed, on_event=None) -> dict[str, HostResult]:
    """Every node ends with the image (or a failure that names it, or is left to the registry pull:
    OK with a detail that says so). `pull_seed`: the HostAction that pulls from the registry (docker.pull's)."""
    from clusterctl.executor import Event, for_each_host
    from clusterctl.preflight import facts

    image, always = inventory.container.image, inventory.container.pull == "always"
    port = inventory.rendezvous.port + PORT_OFFSET
    master_address = inventory.rendezvous_address
    by_name = {h.name: h for h in hosts}
    note = on_event or (lambda event: None)

    def look(transport, host: Host) -> HostResult:
        found = transport.run(image_id_command(image))
        route = transport.run(facts.route_get_command(master_address))
        info = facts.parse_route_get(route.stdout)
        address = master_address if info.local or not info.src else info.src
        held = held_chains(transport.run(held_layers_command()).stdout)
        return HostResult(host.name, HostStatus.OK, data={"image_id": found.stdout.strip(), "address": address,
                                                          "held": held})

    looked = for_each_host(hosts, look, connections)
    results: dict[str, HostResult] = {n: r for n, r in looked.items() if not r.succeeded}
    alive = [h for h in hosts if h.name not in results]
    if not alive:
        return results
    ids = {h.name: looked[h.name].data["image_id"] for h in alive}
    address = {h.name: looked[h.name].data["address"] for h in alive}
    holdings: dict[str, Holding] = {}
    present = [n for n, i in ids.items() if i]
    seed = present[0] if present and not always else alive[0].name
    if seed in present and not always:
        holdings[seed] = Holding("present", ids[seed])
    else:
        started = now()
        pulled = for_each_host([by_name[seed]], pull_seed, connections)[seed]
        if not pulled.succeeded:
            results[seed] = pulled
            # the seed could not pull: every other node is left to its own pull (which says why)
            return {**results, **{h.name: HostResult(h.name, HostStatus.OK, "no seed: left to the registry pull")
                                  for h in alive if h.name != seed}}
        holdings[seed] = Holding("registry", pulled.data.get("image_id", ""), seconds=now() - started)
    expected = holdings[seed].image_id

    def seed_layers(transport, host: Host) -> HostResult:
        listed = transport.run(image_layers_command(image)).stdout.strip()
        return HostResult(host.name, HostStatus.OK, data={"layers": parse_layer_list(listed)})

    layers = for_each_host([by_name[seed]], seed_layers, connections)[seed].data.get("layers") or []

    def skip_for(names) -> tuple[str, ...]:
        """The layers every one of `names` holds already; none for a node whose trimmed load failed."""
        if plan.whole & set(names):
            return ()
        common = [set(layers_to_skip(layers, looked[name].data["held"])) for name in names]
        return tuple(sorted(set.intersection(*common))) if common else ()
    for name in ids:  # same image already there: nothing to send
        if name != seed and ids[name] == expected:
            holdings[name] = Holding("present", expected)
    plan = Plan(expected, [n for n in holdings], [h.name for h in alive if h.name not in holdings])
    note(Event("note", text=f"image to {len(plan.needing)} node(s) from peers, seeded by {seed} "
                            f"({holdings[seed].source})"))
    if len(plan.needing) >= 2:
        _chain(plan, seed, image, address, port, by_name, connections, holdings, results, note,
               skip_for(plan.needing))
    while plan.pairs():
        pairs = plan.pairs()
        token = {receiver: new_token() for _, receiver in pairs}
        role = {sender: ("send", receiver) for sender, receiver in pairs}
        role.update({receiver: ("receive", sender) for sender, receiver in pairs})
        skip = {receiver: skip_for([receiver]) for _, receiver in pairs}

        def transfer(transport, host: Host) -> HostResult:
            kind, other = role[host.name]
            if kind == "send":
                return send_on(transport, host, send_command(image, address[host.name], port, token[other], skip[other]))
            return receive_on(transport, host, receive_command(address[other], port, token[host.name]), image, expected)

        # a pair's two ends side by side, and all in flight at once: a sender waits for its receiver
        in_round = [by_name[name] for pair in pairs for name in pair]
        done = for_each_host(in_round, transfer, connections, width=len(in_round))
        for sender, receiver in pairs:
            got, sent = done[receiver], done[sender]
            if unreachable(got):
                results[receiver] = got
                plan.needing.remove(receiver)
                continue
            if unreachable(sent):
                results[sender] = sent
                plan.holders.remove(sender)
            if got.succeeded and got.data.get("image_id") == expected:
                holdings[receiver] = Holding(f"peer:{sender}", expected, sent.data.get("bytes", 0),
                                             got.data.get("seconds", 0.0), len(skip[receiver]))
                plan.received(receiver)
                note(Event("note", receiver, f"image from {sender}: {holdings[receiver].to_json()['mb_per_s']} MB/s"))
                continue
            why = transfer_failure(receiver, sender, got, got.data.get("image_id"), expected)
            if got.succeeded:  # a different image arrived: that node fails, named
                results[receiver] = HostResult(receiver, HostStatus.FAILED, why, data={"image": image})
                plan.needing.remove(receiver)
                continue
            plan.load_failed(receiver, got.detail)
            if plan.failed(receiver):
                results[receiver] = HostResult(receiver, HostStatus.OK, f"peers failed ({why}); the registry pull "
                                                                        "follows",
                                               data={"distribute": {"source": None, "peers_failed": why}})
    for name, holding in holdings.items():
        results.setdefault(name, holding_result(by_name[name], holding))
    return {h.name: results[h.name] for h in hosts if h.name in results}


def _chain(plan: Plan, seed: str, image: str, address: dict, port: int, by_name: dict, connections,
           holdings: dict, results: dict, note, skip: tuple[str, ...]) -> None:
    """First pass: one chain, seed -> n1 -> n2 -> ..., every node loading the image while it passes each
    byte on to the next, all at once: the image crosses each link once and no node waits for a round.
    A node the chain did not serve stays in `plan.needing` for the rounds (a node that died cuts the
    chain: the ones after it are sent the image again from holders)."""
    from clusterctl.executor import Event, for_each_host

    chain = [seed, *plan.needing]
    token = {name: new_token() for name in chain[1:]}  # the token of the connection into that node

    def link(transport, host: Host) -> HostResult:
        i = chain.index(host.name)
        if i == 0:
            return send_on(transport, host, send_command(image, address[seed], port, token[chain[1]], skip))
        upstream = address[chain[i - 1]]
        command = (receive_command(upstream, port, token[host.name]) if i == len(chain) - 1 else
                   pipe_command(upstream, port, token[host.name], address[host.name], token[chain[i + 1]]))
        return receive_on(transport, host, command, image, plan.expected_id)

    # every node of the chain in flight at once (one stream through all of them), whatever the pool's width
    done = for_each_host([by_name[name] for name in chain], link, connections, width=len(chain))
    size = done[seed].data.get("bytes", 0) if done[seed].data else 0
    for i, name in enumerate(chain[1:], 1):
        got = done[name]
        if unreachable(got):
            results[name] = got
            plan.needing.remove(name)
        elif got.succeeded and got.data.get("image_id") == plan.expected_id:
            holdings[name] = Holding(f"peer:{chain[i - 1]}", plan.expected_id, size, got.data.get("seconds", 0.0),
                                     len(skip))
            plan.received(name)
        elif got.succeeded:  # a different image arrived: that node fails, named
            results[name] = HostResult(name, HostStatus.FAILED, transfer_failure(
                name, chain[i - 1], got, got.data.get("image_id"), plan.expected_id), data={"image": image})
            plan.needing.remove(name)
        else:
            plan.tries[name] = plan.tries.get(name, 0) + 1
            plan.load_failed(name, got.detail)
    served = sum(1 for name in chain[1:] if name in holdings)
    note(Event("note", text=f"image passed along a chain of {len(chain)} node(s): {served} of {len(chain) - 1} "
                            "loaded it" + ("" if served == len(chain) - 1 else "; the others get it in rounds")))
