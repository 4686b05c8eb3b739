"""`container.distribute: peers` on the rehearsal cluster (issue 22): with the image gone from node2
(reached as the sudo user) and node3 (behind the bastion), `up` gets it to them from node1, node to
node on the job network, verified by image ID, and says where each node's image came from; no relay
is left. (The sandbox's image is small: the bytes and the speed are measured by bench/, not here.)"""
from __future__ import annotations

import pytest

from clusterctl_helpers import Cli, docker_client, load_inventory, processes_with, variant

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]


def test_up_with_peers_brings_the_image_to_the_nodes_without_it_from_a_node_that_has_it(sandbox, tmp_path):
    cli = Cli(tmp_path / "state")
    inventory = variant(sandbox, tmp_path / "peers.yaml", lambda doc: doc["container"].update(distribute="peers"))
    image = load_inventory(sandbox)["container"]["image"]
    code, doc = cli.json("up", str(inventory))
    assert code == 0, doc
    try:
        code, _ = cli.json("down", "-i", str(inventory))
        assert code == 0
        for node in ("node2", "node3"):
            docker_client(sandbox, node).images.remove(image, force=True)
        code, doc = cli.json("up", str(inventory))
        assert code == 0 and doc["ok"], doc
        sources = {name: host["distribute"]["source"] for name, host in doc["hosts"].items()}
        assert sources["node1"] == "present", sources
        assert sources["node2"].startswith("peer:") and sources["node3"].startswith("peer:"), sources
        ids = {docker_client(sandbox, node).images.get(image).id for node in ("node1", "node2", "node3")}
        assert len(ids) == 1 and doc["hosts"]["node2"]["distribute"]["image_id"] in ids
        assert doc["hosts"]["node3"]["distribute"]["bytes"] > 0
        assert not processes_with("clusterctl-send") and not processes_with("clusterctl-receive")
    finally:
        cli.json("down", "-i", str(inventory))


def _build_on(sandbox, node: str, base: str, tag: str, size: int) -> str:
    """`base` plus one layer of `size` random bytes, built on `node`'s engine and pushed; its image ID."""
    import io
    import os
    import tarfile

    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", f"FROM {base}\nCOPY blob /blob-{tag.rsplit(':', 1)[-1]}\n".encode()),
                           ("blob", os.urandom(size))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    client = docker_client(sandbox, node)
    image, _ = client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)
    client.images.push(tag)  # the registry has it, as in real use; node1 (holding it) is the seed
    return image.id


def test_after_an_image_update_up_sends_the_nodes_only_the_layer_they_lack(sandbox, tmp_path):
    """v1 = the sandbox image + 8 MB, on node1 only: the others receive all of it. v2 = v1 + 1 MB, on node1
    only: the others receive that layer and keep the ones below it; every node ends with v2's ID."""
    cli = Cli(tmp_path / "state")
    base = load_inventory(sandbox)["container"]["image"]
    repository = base.rsplit(":", 1)[0]
    v1, v2 = f"{repository}:layers-v1", f"{repository}:layers-v2"
    nodes = ("node1", "node2", "node3")
    try:
        _build_on(sandbox, "node1", base, v1, 8 << 20)
        first = variant(sandbox, tmp_path / "v1.yaml",
                        lambda doc: doc["container"].update(image=v1, distribute="peers", pull="missing"))
        code, doc = cli.json("up", str(first))
        assert code == 0 and doc["ok"], doc
        assert all(doc["hosts"][n]["distribute"]["bytes"] > 8 << 20 for n in ("node2", "node3")), doc["hosts"]
        cli.json("down", "-i", str(first))
        v2_id = _build_on(sandbox, "node1", v1, v2, 1 << 20)
        second = variant(sandbox, tmp_path / "v2.yaml",
                         lambda doc: doc["container"].update(image=v2, distribute="peers", pull="missing"))
        code, doc = cli.json("up", str(second))
        assert code == 0 and doc["ok"], doc
        for node in ("node2", "node3"):
            got = doc["hosts"][node]["distribute"]
            assert got["source"].startswith("peer:") and got["image_id"] == v2_id, got
            assert (1 << 20) < got["bytes"] < (2 << 20) and got["layers_kept"] >= 2, got
        assert {docker_client(sandbox, n).images.get(v2).id for n in nodes} == {v2_id}
        assert not processes_with("clusterctl-send") and not processes_with("clusterctl-receive")
    finally:
        cli.json("down", "-i", str(tmp_path / "v2.yaml") if (tmp_path / "v2.yaml").exists() else str(sandbox))
        for node in nodes:
            for tag in (v2, v1):
                try:
                    docker_client(sandbox, node).images.remove(tag, force=True)
                except Exception:  # noqa: BLE001 - not there: nothing to clean
                    pass


@pytest.mark.heavy
def test_a_node_cut_off_in_the_middle_of_the_chain_is_named_and_the_node_after_it_still_gets_the_image(
        sandbox, tmp_path):
    """node1 holds the image and sends it down the chain node1 -> node2 -> node3 at 16 Mbit/s; node2 is cut
    off the network mid-transfer: `up` names node2 unreachable (exit 3) and node3 gets the image from
    node1 in the rounds, verified by its ID."""
    import os
    import time

    from clusterctl_helpers import wait_until

    repository = load_inventory(sandbox)["container"]["image"].rsplit(":", 1)[0]
    image = f"{repository}:peers-cut"
    sandbox.push_image(image, {"/opt/blob.bin": os.urandom(32 << 20)})
    inventory = variant(sandbox, tmp_path / "cut.yaml", lambda doc: doc["container"].update(
        image=image, name="cc-peers-cut", distribute="peers", pull="missing"))
    seed = docker_client(sandbox, "node1").images.pull(image)
    for node in ("node2", "node3"):
        try:
            docker_client(sandbox, node).images.remove(image, force=True)
        except Exception:  # noqa: BLE001 - not there
            pass
    cli = Cli(tmp_path / "state")
    fabric = sandbox.node("node1").fabric_ifname
    sandbox.ns_exec("node1", ["tc", "qdisc", "replace", "dev", fabric, "root", "tbf", "rate", "16mbit", "burst", "64kb",
                              "latency", "500ms"])
    proc = None
    try:
        proc = cli.popen("up", str(inventory))
        wait_until(lambda: processes_with("\0pipe\0"), 60, what="node2 passing the image on")
        time.sleep(2)
        sandbox.cut_network("node2")
        code, doc, _ = Cli.finish(proc, timeout=240)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        sandbox.restore_network("node2")
        sandbox.ns_exec("node1", ["tc", "qdisc", "del", "dev", fabric, "root"], check=False)
    try:
        assert code == 3, doc
        assert doc["hosts"]["node2"]["status"] == "unreachable", doc["hosts"]["node2"]
        node3 = doc["hosts"]["node3"]
        assert node3["status"] in ("ok", "changed") and node3["distribute"]["source"] == "peer:node1", node3
        assert docker_client(sandbox, "node3").images.get(image).id == seed.id
    finally:
        cli.json("down", "-i", str(inventory))
        for node in ("node1", "node2", "node3"):
            try:
                docker_client(sandbox, node).images.remove(image, force=True)
            except Exception:  # noqa: BLE001 - not there
                pass


def _serve_once(port: int, payload: bytes, key=None):
    """On the controller's bridge address: the relay's real sender holding `key` (a node that sends what it
    likes) fed `payload`, or, with no key, an impostor that answers any client with a made-up proof and
    then `payload`."""
    import os
    import socket
    import subprocess
    import sys
    import threading

    from clusterctl.registry import peers

    if key is None:
        server = socket.create_server(("198.18.0.1", port))

        def serve():
            with server:
                conn, _ = server.accept()
                with conn:
                    conn.settimeout(30)
                    conn.recv(51)
                    try:
                        conn.sendall(os.urandom(64) + payload)
                    except OSError:
                        pass
        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        return thread
    read_end, write_end = os.pipe()
    os.write(write_end, key.encode() + b"\n")
    proc = subprocess.Popen([sys.executable, "-c", peers.RELAY, "send", "198.18.0.1", str(port), "60"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(read_end,),
                            env={**os.environ, "CLUSTERCTL_RELAY_WATCH": str(read_end)})
    os.close(read_end)
    threading.Thread(target=lambda: (proc.communicate(payload), os.close(write_end)), daemon=True).start()
    return proc


def _line_with(text: str, word: str) -> str:
    return next((line for line in text.splitlines() if word in line), text.strip()[:150])


def test_a_receiving_node_keeps_nothing_from_an_impostor_or_from_a_tar_with_another_tag(sandbox, tmp_path, reliability):
    """node2 runs `up`'s real receive command (relay, check, docker load) against a relay on the controller's
    bridge address: an impostor without the key, then a sender with the key whose tar adds a tag, then the
    image as node1's engine saved it. Only the last is loaded; the engine keeps nothing of the first two."""
    import io
    import json
    import os
    import socket
    import tarfile

    from clusterctl.inventory.load import load_inventory as load
    from clusterctl.registry import peers
    from clusterctl.transport import connect

    row = reliability("on the rehearsal cluster, node2's real receive (relay, check, `docker load`) from an impostor "
                      "relay, then from a keyed sender whose tar adds the tag `198.18.0.1:5000/evil:1`",
                      "both refused: node2's engine holds neither the image, nor its tag, nor the extra tag; the "
                      "image as saved passes", section="Hostile input")
    repository = load_inventory(sandbox)["container"]["image"].rsplit(":", 1)[0]
    image, evil = f"{repository}:relay-check", "198.18.0.1:5000/evil:1"
    sandbox.push_image(image, {"/opt/relay-check": os.urandom(1 << 20)})
    node1, node2 = docker_client(sandbox, "node1"), docker_client(sandbox, "node2")
    expected = node1.images.pull(image).id
    saved = b"".join(node1.api.get_image(image))
    host = next(h for h in load(sandbox.inventory_path).hosts if h.name == "node2")

    def gone() -> bool:
        names = {tag for i in node2.images.list() for tag in i.tags}
        return image not in names and evil not in names and expected not in {i.id for i in node2.images.list()}

    def receive(payload: bytes, keyed: bool):
        with socket.socket() as s:
            s.bind(("198.18.0.1", 0))
            port = s.getsockname()[1]
        key = peers.new_key()
        _serve_once(port, payload, key if keyed else None)
        transport = connect(host)
        try:
            return transport.run(peers.receive_command("198.18.0.1", port, key, image, expected))
        finally:
            transport.close()

    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(saved)) as source, tarfile.open(fileobj=out, mode="w") as target:
        for member in source:
            data = source.extractfile(member).read() if member.isfile() else None
            if member.name == "manifest.json":
                manifest = json.loads(data)
                manifest[0]["RepoTags"].append(evil)
                data = json.dumps(manifest).encode()
                member.size = len(data)
            target.addfile(member, io.BytesIO(data) if data is not None else None)
    try:
        for name in (image, evil):
            try:
                node2.images.remove(name, force=True)
            except Exception:  # noqa: BLE001 - not there
                pass
        assert gone()
        impostor = receive(saved, keyed=False)
        assert impostor.exit_code != 0 and "did not prove the transfer's key" in impostor.stderr, impostor
        assert gone()
        tagged = receive(out.getvalue(), keyed=True)
        assert tagged.exit_code != 0 and "carries other tags" in tagged.stderr, tagged
        assert gone()
        honest = receive(saved, keyed=True)
        assert honest.exit_code == 0, honest
        assert node2.images.get(image).id == expected
        row.observe(f"impostor: exit {impostor.exit_code}, '{impostor.stderr.strip().splitlines()[0][:120]}'; extra tag: "
                    f"exit {tagged.exit_code}, '{_line_with(tagged.stderr, 'clusterctl-check')[:150]}'; node2's engine held "
                    f"neither image nor tag after both; the {len(saved) / 1e6:.1f} MB tar as node1 saved it then loaded "
                    "with the expected ID")
    finally:
        for client in (node1, node2):
            for name in (image, evil):
                try:
                    client.images.remove(name, force=True)
                except Exception:  # noqa: BLE001 - not there
                    pass
