"""Private registries on the rehearsal cluster (issue 26): registries that want a login
(htpasswd), one over TLS with a private CA and one over plain HTTP that the engines do not
list as insecure (clusterctl/sandbox/auth_registry.py).

Each node's ssh.user has its own Docker config (`Node.docker_config_dir`, what `docker login`
there writes); node2's uses a credential helper (`docker-credential-cctest` on its PATH, the
helper protocol: server on stdin, JSON on stdout). Every case ends in a pull or in its one-line
cause and fix, and the password appears nowhere clusterctl writes.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pytest
from clusterctl_helpers import Cli, checks_named, container_of, docker_client, variant

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

NODES = ("node1", "node2", "node3")
HELPER = "cctest"


@pytest.fixture(scope="module")
def registries(sandbox):
    from clusterctl.sandbox import auth_registry

    auth_registry.start(sandbox.layout)
    try:
        yield auth_registry
    finally:
        auth_registry.stop(sandbox.layout)
        for name in NODES:
            node = sandbox.node(name)
            shutil.rmtree(node.certs_dir / auth_registry.HTTPS, ignore_errors=True)
            (node.docker_config_dir / "config.json").unlink(missing_ok=True)
            (node.docker_config_dir / "cctest-asked").unlink(missing_ok=True)
            (node.local_bin / f"docker-credential-{HELPER}").unlink(missing_ok=True)


@pytest.fixture
def cli(tmp_path, monkeypatch):
    # this controller's own Docker login is empty: a pull that works used the node's (or the inventory's)
    controller_config = tmp_path / "controller-docker"
    controller_config.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(controller_config))
    return Cli(tmp_path / "state")


def _own(node, path: Path) -> None:
    if node.sudo_user:
        from clusterctl.sandbox.layout import SUDO_UID

        os.chown(path, SUDO_UID, SUDO_UID)


def _login(node, registry: str, password: str, user: str = "ccpull") -> None:
    """What `docker login REGISTRY` as the node's ssh user leaves behind (no credsStore)."""
    node.docker_config_dir.mkdir(parents=True, exist_ok=True)
    _own(node, node.docker_config_dir)
    config = node.docker_config_dir / "config.json"
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    config.write_text(json.dumps({"auths": {registry: {"auth": token}}}))
    config.chmod(0o600)
    _own(node, config)


def _logout(node) -> None:
    (node.docker_config_dir / "config.json").unlink(missing_ok=True)


def _helper_login(node, registry: str, password: str) -> Path:
    """A credential helper on the node's PATH, named by credsStore; it notes each `get` it answers."""
    node.local_bin.mkdir(parents=True, exist_ok=True)
    node.docker_config_dir.mkdir(parents=True, exist_ok=True)
    _own(node, node.docker_config_dir)
    asked = node.docker_config_dir / "cctest-asked"  # writable by the node's ssh user
    asked.unlink(missing_ok=True)
    script = node.local_bin / f"docker-credential-{HELPER}"
    script.write_text("#!/bin/sh\n"
                      '[ "$1" = get ] || exit 1\n'
                      "read server\n"
                      f'echo "$server" >> {asked}\n'
                      f'[ "$server" = "{registry}" ] || {{ echo "credentials not found in native keychain"; exit 1; }}\n'
                      f"printf '{{\"ServerURL\":\"%s\",\"Username\":\"ccpull\",\"Secret\":\"{password}\"}}\\n' \"$server\"\n")
    script.chmod(0o755)
    config = node.docker_config_dir / "config.json"
    config.write_text(json.dumps({"auths": {}, "credsStore": HELPER}))
    _own(node, config)
    return asked


def _trust_ca(sandbox, registries, names=NODES) -> None:
    for name in names:
        target = sandbox.node(name).certs_dir / registries.HTTPS
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(registries.ca_cert(sandbox.layout), target / "ca.crt")


def _distrust_ca(sandbox, registries, names=NODES) -> None:
    for name in names:
        shutil.rmtree(sandbox.node(name).certs_dir / registries.HTTPS, ignore_errors=True)


def _inventory(sandbox, tmp_path, image: str, auth=None) -> Path:
    def change(doc):
        doc["container"]["image"] = image
        doc["container"]["pull"] = "always"
        if auth is not None:
            doc["container"]["registry_auth"] = auth

    return variant(sandbox, tmp_path / "inventory.yaml", change)


def _no_secret_written(cli, password: str, *documents) -> None:
    needle = password.encode()
    for document in documents:
        assert password not in json.dumps(document)
    for path in Path(cli.state_dir).rglob("*"):
        if path.is_file():
            assert needle not in path.read_bytes(), f"{path} holds the registry password"


def _image_checks(document) -> dict:
    return {host: (c["status"], c["detail"], c["fix"]) for host, c in checks_named(document, "image_pull").items()}


def test_each_node_pulls_with_its_own_login_and_helper(sandbox, registries, cli, tmp_path):
    image = f"{registries.HTTPS}/{registries.REPOSITORY}"
    _trust_ca(sandbox, registries)
    _login(sandbox.node("node1"), registries.HTTPS, registries.PASSWORD)
    asked = _helper_login(sandbox.node("node2"), registries.HTTPS, registries.PASSWORD)  # ccops, sudo node
    _login(sandbox.node("node3"), f"https://{registries.HTTPS}/v1/", registries.PASSWORD)  # a URL key, as old CLIs wrote
    inventory = _inventory(sandbox, tmp_path, image)
    code, check = cli.json("check", "-i", str(inventory))
    assert {h: s for h, (s, _, _) in _image_checks(check).items()} == {n: "pass" for n in NODES}, check
    code, doc = cli.json("up", "-i", str(inventory))
    assert code == 0, doc
    # asked by `check`, by up's pull check and by its pull: the helper ran as ccops on node2 each time
    assert asked.read_text().split() == [registries.HTTPS] * 3
    for name in NODES:
        client = docker_client(sandbox, name)
        try:
            assert client.images.list(name=image), f"{name} has no {image}"
        finally:
            client.close()
        assert container_of(sandbox, name, "cc-sandbox").attrs["Config"]["Image"] == image
    _no_secret_written(cli, registries.PASSWORD, check, doc)


@pytest.mark.parametrize("case", ["no_login", "wrong_password", "missing_tag", "private_ca", "plain_http"])
def test_each_failure_is_one_line_with_its_cause_and_fix(sandbox, registries, cli, tmp_path, case):
    image = f"{registries.HTTPS}/{registries.REPOSITORY}"
    _trust_ca(sandbox, registries)
    for name in NODES:
        _login(sandbox.node(name), registries.PLAIN if case == "plain_http" else registries.HTTPS, registries.PASSWORD)
    expected, fix = {
        "no_login": ("registry_no_credentials", f"`docker login {registries.HTTPS}` on node2 as ccops"),
        "wrong_password": ("registry_wrong_credentials", f"`docker login {registries.HTTPS}` on node2 as ccops"),
        "missing_tag": ("image_not_found", "check container.image"),
        "private_ca": ("registry_tls_unknown_ca", f"/etc/docker/certs.d/{registries.HTTPS}/ca.crt on node2"),
        "plain_http": ("registry_plain_http", f'"insecure-registries": ["{registries.PLAIN}"]'),
    }[case]
    if case == "no_login":
        _logout(sandbox.node("node2"))
    elif case == "wrong_password":
        _login(sandbox.node("node2"), registries.HTTPS, "not-the-password")
    elif case == "missing_tag":
        image = f"{registries.HTTPS}/sandbox/base:no-such-tag"
    elif case == "private_ca":
        _distrust_ca(sandbox, registries, ["node2"])
    elif case == "plain_http":
        image = f"{registries.PLAIN}/{registries.REPOSITORY}"
    inventory = _inventory(sandbox, tmp_path, image)
    code, check = cli.json("check", "-i", str(inventory))
    status, detail, given_fix = _image_checks(check)["node2"]
    assert code == 1 and status == "fail" and detail.startswith(expected), check
    assert fix in given_fix and "\n" not in detail + given_fix
    _no_secret_written(cli, registries.PASSWORD, check)


def test_a_node_that_cannot_pull_stops_up_before_any_container_is_replaced(sandbox, registries, cli, tmp_path):
    image = f"{registries.HTTPS}/{registries.REPOSITORY}"
    _trust_ca(sandbox, registries)
    for name in NODES:
        _login(sandbox.node(name), registries.HTTPS, registries.PASSWORD)
    inventory = _inventory(sandbox, tmp_path, image)
    code, doc = cli.json("up", "-i", str(inventory))
    assert code == 0, doc
    before = {n: container_of(sandbox, n, "cc-sandbox").id for n in NODES}
    _login(sandbox.node("node2"), registries.HTTPS, "not-the-password")
    changed = variant(sandbox, tmp_path / "changed.yaml", lambda d: (
        d["container"].update(image=image, pull="always"), d["container"].setdefault("env", {}).update(CC_NEW="1")))
    code, doc = cli.json("up", "-i", str(changed))
    assert code == 1
    assert doc["hosts"]["node2"]["detail"].startswith("image_pull: registry_wrong_credentials"), doc
    assert "stopped before changing anything: node2" in doc["hosts"]["node1"]["detail"]
    assert {n: container_of(sandbox, n, "cc-sandbox").id for n in NODES} == before  # nothing replaced
    _no_secret_written(cli, registries.PASSWORD, doc)


def test_controller_credentials_reach_nodes_only_in_the_request(sandbox, registries, cli, tmp_path, monkeypatch):
    image = f"{registries.HTTPS}/{registries.REPOSITORY}"
    _trust_ca(sandbox, registries)
    for name in NODES:
        _logout(sandbox.node(name))
    monkeypatch.setenv("CC_REGISTRY_PASSWORD", registries.PASSWORD)
    inventory = _inventory(sandbox, tmp_path, image, {"username": "ccpull", "password_env": "CC_REGISTRY_PASSWORD"})
    code, doc = cli.json("up", "-i", str(inventory))
    assert code == 0, doc
    for name in NODES:  # nothing written on the nodes
        assert not (sandbox.node(name).docker_config_dir / "config.json").exists()
    _no_secret_written(cli, registries.PASSWORD, doc)
    # the controller's own login, as `docker login` on this controller writes it
    (Path(os.environ["DOCKER_CONFIG"]) / "config.json").write_text(json.dumps({"auths": {registries.HTTPS: {
        "auth": base64.b64encode(f"ccpull:{registries.PASSWORD}".encode()).decode()}}}))
    monkeypatch.delenv("CC_REGISTRY_PASSWORD")
    inventory = _inventory(sandbox, tmp_path, image, {"from": "docker-config"})
    code, doc = cli.json("up", "-i", str(inventory))
    assert code == 0, doc
    _no_secret_written(cli, registries.PASSWORD, doc)
