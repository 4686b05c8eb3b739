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
- Verified: the receiver's check (loadcheck.CHECK, between the relay and `docker load`) passes on
  only a stream that holds the seed's image (its config digest, which the registry's manifest names)
  with no tag but the one asked for; anything else ends broken, so `docker load` keeps nothing.
  After the load the receiver's image ID must equal the seed's; else the tag is removed there and
  the node fails, named. `docker load` tags only a complete image, so a transfer cut short leaves
  no tag. A node whose transfer failed is retried from another holder in the next round, then left
  to `docker.pull` (the registry).
- Both ends of every transfer prove its key (32 random bytes, new for each transfer, on each node's
  SSH session stdin, never a command line) to each other before any byte of the image flows: a
  local user who reads `ps` on the sender, or anyone on the job network, can neither receive the
  image nor feed a receiver. The relay's server takes the first client that proves the key, within
  ACCEPT_S, and ends with the stream. Every relay also ends the moment its SSH session does (it
  watches the session's stdin, which clusterctl holds open): after Ctrl-C or a killed `up` nothing
  listens or loads on, and a cut `docker load` tags nothing.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Optional

from clusterctl.documents import parts
from clusterctl.documents.convert import plain
from clusterctl.models import Command, Host, HostResult, HostStatus, Inventory
# the relay and its commands (relay.py), importable from here as before the split
from clusterctl.registry.relay import (ACCEPT_S, RELAY, _HELD_LAYERS, _WATCH, chain_ids, cut_short,  # noqa: F401
                                       held_chains, held_layers_command, image_id_command, image_layers_command,
                                       layers_to_skip, new_key, parse_layer_list, parse_sent, pipe_command,
                                       receive_command, send_command, untag_command)

PORT_OFFSET = 2  # the relay listens on rendezvous.port + 2 (up runs no job: the rendezvous ports are free)
PEERS_FROM = 4  # `auto`: peers from this many nodes up
MAX_TRIES = 2


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

    @property
    def mb_per_s(self) -> Optional[float]:
        return round(self.bytes / self.seconds / 1e6, 1) if self.seconds > 0 and self.bytes else None

    def to_json(self) -> dict:
        return plain(parts.ImageSent(source=self.source, image_id=self.image_id, bytes=self.bytes,
                                        seconds=round(self.seconds, 2), mb_per_s=self.mb_per_s,
                                        layers_kept=self.layers_kept))


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


def transfer_failure(receiver: str, sender: str, result: HostResult, got_id: Optional[str], expected: str) -> str:
    if result.succeeded and got_id and got_id != expected:
        return (f"the image {receiver} loaded from {sender} is {got_id[:19]}, not {expected[:19]} (the seed's, "
                "which the registry's manifest names); its tag was removed there")
    return f"from {sender}: {result.detail or 'the transfer failed'}"


def now() -> float:
    return time.monotonic()


def unreachable(result: HostResult) -> bool:
    return result.status is HostStatus.UNREACHABLE


def holding_result(host: Host, holding: Holding) -> HostResult:
    data = {"distribute": holding.to_json()}
    if holding.source == "present":
        return HostResult(host.name, HostStatus.OK, "", data=data)
    rate = holding.mb_per_s
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
        key = {receiver: new_key() for _, receiver in pairs}  # one per transfer, to its two ends only
        role = {sender: ("send", receiver) for sender, receiver in pairs}
        role.update({receiver: ("receive", sender) for sender, receiver in pairs})
        skip = {receiver: skip_for([receiver]) for _, receiver in pairs}

        def transfer(transport, host: Host) -> HostResult:
            kind, other = role[host.name]
            if kind == "send":
                return send_on(transport, host, send_command(image, address[host.name], port, key[other], skip[other]))
            return receive_on(transport, host, receive_command(address[other], port, key[host.name], image, expected),
                              image, expected)

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
                note(Event("note", receiver, f"image from {sender}: {holdings[receiver].mb_per_s} MB/s"))
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
                                               data={"distribute": plain(parts.PeersFailed(None, why))})
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
    key = {name: new_key() for name in chain[1:]}  # the key of the connection into that node

    def link(transport, host: Host) -> HostResult:
        i = chain.index(host.name)
        if i == 0:
            return send_on(transport, host, send_command(image, address[seed], port, key[chain[1]], skip))
        upstream, expected = address[chain[i - 1]], plan.expected_id
        command = (receive_command(upstream, port, key[host.name], image, expected) if i == len(chain) - 1 else
                   pipe_command(upstream, port, key[host.name], address[host.name], key[chain[i + 1]], image,
                                expected))
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
