"""The relay: what moves an image between two nodes, and the commands that run it there.

A transfer is `docker save IMAGE` on the sender piped into a TCP server (RELAY: node/node_relay.py with
listener.py beside it, run as every node program of one command is, `python3 -I -S -c TEXT`; bound to
the sender's address on the job network),
and on the receiver the relay's client piped through the check (loadcheck.CHECK) into `docker load`
(`pipe`: loading while passing every byte on to the next node of a chain). Both ends of every
transfer hold its key (32 random bytes, on their SSH sessions' stdin, never on a command line) and
prove it to each other over fresh nonces (HMAC-SHA256, compared in constant time) before any image
byte flows. The server takes the first client that proves the key within ACCEPT_S under the one
listener discipline of every node port (node/listener.py): up to 32 unproven connections side by side (8 per address), 5 s each for the whole
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
from clusterctl.node import inline_program
from clusterctl.registry.loadcheck import CHECK, check_args, save_reference

ACCEPT_S = 60

RELAY = inline_program(("listener",), "node_relay", argv0=True)  # the `python3 -I -S -c` text

# The transfer's keys never go on a command line: each relay reads them from the first line of its
# SSH session's stdin (Command.stdin), then watches that stdin for the session's end (RELAY).
# $1 image, $2 relay code, $3 address, $4 port, $5 accept timeout,
# $6: the layers not to send (comma-separated hex diff IDs; empty: all)
_WATCH = 'exec 3<&0; export CLUSTERCTL_RELAY_WATCH=3; '  # the relay reads its key from, and watches, fd 3
_SEND = (_WATCH + '{ docker save "$1" 3<&- </dev/null || echo "clusterctl: docker save failed" >&2; } | '
         'python3 -I -S -c "$2" send "$3" "$4" "$5" "$6"')
# $1 relay code, $2 sender address, $3 port, $4 connect timeout, $5 the check (loadcheck.CHECK), $6-$9 its
# arguments (the expected image ID and names); docker load's own output names the image
_RECEIVE = (_WATCH + 'python3 -I -S -c "$1" recv "$2" "$3" "$4" </dev/null | python3 -c "$5" "$6" "$7" "$8" "$9" 3<&- | '
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
_PIPE = (_WATCH + 'python3 -I -S -c "$1" pipe "$2" "$3" "$4" "$5" "$6" </dev/null | '
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
