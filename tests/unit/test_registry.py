"""Private registries without a cluster: the failure classifier over real engine messages,
Docker's credential lookup, `container.registry_auth` in the inventory, masking, and the
pull / pull check talking to a fake engine (what travels in the request, and what never
reaches a message)."""
from __future__ import annotations

import base64
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from clusterctl.errors import InventoryError
from clusterctl.inventory.load import parse_inventory
from clusterctl.models import CheckStatus, CommandResult, HostStatus, secret_values
from clusterctl.registry import credentials
from clusterctl.registry.pull_errors import PullContext, diagnose_pull

REF = "172.31.0.182/system_containers/wan2-2:1014"
NODE = PullContext(host="accnode1", user="ops")
SENT = replace(NODE, sent_credentials=True, source="auths in ~/.docker/config.json on accnode1 for ops")

# --------------------------------------------------------------------------- the classifier, real strings

REAL = [
    # the rehearsal of issue 26
    ('Head "http://198.18.7.1:5000/v2/acc/base/manifests/1": no basic auth credentials', NODE, "registry_no_credentials"),
    # https://github.com/navikt/mock-oauth2-server/issues/8
    (("Get https://docker.pkg.github.com/v2/navikt/mock-oauth2-server/mock-oauth2-server/manifests/0.1.35: "
     "no basic auth credentials"), NODE, "registry_no_credentials"),
    # https://github.com/firstbatchxyz/dkn-compute-launcher/issues/1 (a stale login sent)
    (('Head "https://registry-1.docker.io/v2/firstbatch/dkn-compute-node/manifests/latest": unauthorized: '
     "incorrect username or password"), SENT, "registry_wrong_credentials"),
    # https://github.com/ciiiii/cloudflare-docker-proxy/issues/132 (nothing sent)
    ("unauthorized: authentication required", NODE, "registry_no_credentials"),
    ("unauthorized: authentication required", SENT, "registry_wrong_credentials"),
    # https://github.com/jadolg/DockerImageSave/issues/9
    ("manifest for guamulo/dockerimagesave:latest not found: manifest unknown: manifest unknown", NODE,
     "image_not_found"),
    # https://github.com/distribution/distribution/issues/2394
    ("manifest for <imagename>:<tagname> not found", NODE, "image_not_found"),
    # https://github.com/docker/docs/issues/15142
    ('Get "https://registry-1.docker.io/v2/": x509: certificate signed by unknown authority.', NODE,
     "registry_tls_unknown_ca"),
    # https://github.com/distribution/distribution/issues/2458
    (("Get https://37lk3.cn:20000/v1/users/: x509: certificate signed by unknown authority (possibly because of "
     '"crypto/rsa: verification error" while trying to verify candidate authority certificate "37lk3.cn")'), NODE,
     "registry_tls_unknown_ca"),
    # https://github.com/AliyunContainerService/pouch/issues/1018
    (("failed to do request: Head https://xxxx.aliyun.com:5000/v2/bbb/agent/manifests/latest: http: server gave "
     "HTTP response to HTTPS client"), NODE, "registry_plain_http"),
    # https://github.com/docker/cli/issues/3811
    ("Get https://registry-1.docker.io/v2/: http: server gave HTTP response to HTTPS client", NODE,
     "registry_plain_http"),
    # https://github.com/kodekloudhub/kodekloud-engineer/issues/58
    (("toomanyrequests: You have reached your pull rate limit. You may increase the limit by authenticating and "
     "upgrading: https://www.docker.com/increase-rate-limit"), NODE, "registry_rate_limited"),
    # https://github.com/docker/docs/issues/13915
    ("Get http://localhost:5000/v2/: dial tcp [::1]:5000: connect: connection refused", NODE, "registry_unreachable"),
    # https://github.com/moby/moby/issues/28831
    ("Get https://XX.XX.XX.XXX/v1/users/: dial tcp xx.xx.xx.xxx:443: getsockopt: connection refused", NODE,
     "registry_unreachable"),
    # https://github.com/docker/for-mac/issues/1317
    (("Get https://registry-1.docker.io/v2/: dial tcp: lookup registry-1.docker.io on 192.168.65.1:53: server "
     "misbehaving"), NODE, "registry_unreachable"),
    # https://github.com/docker/for-win/issues/3047
    (("Get https://registry-1.docker.io/v2/: net/http: request canceled while waiting for connection "
     "(Client.Timeout exceeded while awaiting headers)"), NODE, "registry_unreachable"),
    # https://github.com/docker/for-linux/issues/754: a mirror configured, Hub unreachable behind it
    (("Get https://registry-1.docker.io/v2/: dial tcp: lookup registry-1.docker.io on 10.16.10.98:53: read udp "
     "10.0.28.17:38377->10.16.10.98:53: i/o timeout"), replace(NODE, mirrors=("http://10.16.2.206:8003/",)),
     "registry_mirror_unreachable"),
    # https://github.com/docker/for-mac/issues/7445
    (('error getting credentials - err: exec: "docker-credential-desktop": executable file not found in $PATH, '
     "out: ``"), NODE, "registry_credential_helper"),
    (("pull access denied for foo/bar, repository does not exist or may require 'docker login': denied: "
     "requested access to the resource is denied"), NODE, "registry_denied"),
]


@pytest.mark.parametrize("message,ctx,cause", REAL, ids=[f"{c}-{i}" for i, (_, _, c) in enumerate(REAL)])
def test_each_real_failure_is_named_with_its_cause(message, ctx, cause):
    ref = "ubuntu:22.04" if "docker.io" in message and cause == "registry_mirror_unreachable" else REF
    problem = diagnose_pull(ref, message, ctx)
    assert problem.cause == cause
    assert "\n" not in problem.text and problem.fix


def test_fixes_are_the_ones_that_work():
    registry = "172.31.0.182"
    tls = diagnose_pull(REF, "x509: certificate signed by unknown authority", NODE)
    assert f"/etc/docker/certs.d/{registry}/ca.crt on accnode1" in tls.fix
    http = diagnose_pull(REF, "http: server gave HTTP response to HTTPS client", NODE)
    assert f'"insecure-registries": ["{registry}"]' in http.fix and "accnode1" in http.fix
    none = diagnose_pull(REF, "no basic auth credentials", NODE)
    assert f"`docker login {registry}` on accnode1 as ops" in none.fix
    # credentials sent from the controller: node logins are not the fix
    password = replace(SENT, mode="password", password_env="REGISTRY_PASSWORD")
    wrong = diagnose_pull(REF, "unauthorized: authentication required", password)
    assert "$REGISTRY_PASSWORD on this controller" in wrong.fix and "on accnode1 as" not in wrong.fix
    config = diagnose_pull(REF, "unauthorized: authentication required", replace(SENT, mode="docker-config"))
    assert "on this controller" in config.fix
    mirror = diagnose_pull("ubuntu:22.04", "dial tcp: i/o timeout", replace(NODE, mirrors=("https://m.example/",)))
    assert "registry-mirrors" in mirror.fix and "https://m.example/v2/" in mirror.fix
    rate = diagnose_pull("ubuntu:22.04", "toomanyrequests: You have reached your pull rate limit", NODE)
    assert "registry-mirrors" in rate.fix


def test_an_unknown_message_is_quoted_with_a_way_to_see_more():
    problem = diagnose_pull(REF, "something new", NODE)
    assert problem.cause == "image_pull_failed" and "something new" in problem.what
    assert f"docker pull {REF}" in problem.fix


# --------------------------------------------------------------------------- Docker's credential lookup


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _no_helper(name, server):
    raise AssertionError("no helper should run")


def test_auths_entries_are_decoded_and_url_keys_match_their_host():
    config = json.dumps({"auths": {"https://198.18.7.1:5000/v1/": {"auth": _b64("alice:s3cret:with:colons")}}})
    found = credentials.resolve(config, "198.18.7.1:5000", _no_helper, "on n1")
    assert (found.credentials.username, found.credentials.secret) == ("alice", "s3cret:with:colons")
    assert found.credentials.auth_config("198.18.7.1:5000") == {
        "username": "alice", "password": "s3cret:with:colons", "serveraddress": "198.18.7.1:5000"}
    assert credentials.resolve(config, "other:5000", _no_helper, "").credentials.present is False


def test_docker_hub_uses_the_index_key_and_identity_tokens_are_sent_as_such():
    config = json.dumps({"auths": {credentials.INDEX_SERVER: {"auth": _b64("bob:"), "identitytoken": "tok-123"}}})
    found = credentials.resolve(config, "docker.io", _no_helper, "")
    assert found.credentials.auth_config(credentials.INDEX_SERVER) == {
        "identitytoken": "tok-123", "serveraddress": credentials.INDEX_SERVER}


def test_cred_helpers_win_over_creds_store_and_get_the_server_on_stdin():
    asked = []

    def helper(name, server):
        asked.append((name, server))
        return CommandResult(0, json.dumps({"ServerURL": server, "Username": "AWS", "Secret": "ecr-token"}))

    config = json.dumps({"credsStore": "pass", "credHelpers": {"123.dkr.ecr.us-east-1.amazonaws.com": "ecr-login"},
                         "auths": {"123.dkr.ecr.us-east-1.amazonaws.com": {}}})
    found = credentials.resolve(config, "123.dkr.ecr.us-east-1.amazonaws.com", helper, "on n1")
    assert asked == [("ecr-login", "123.dkr.ecr.us-east-1.amazonaws.com")]
    assert found.credentials.username == "AWS" and found.credentials.secret == "ecr-token"
    assert "docker-credential-ecr-login" in found.credentials.source
    found = credentials.resolve(config, "ghcr.io", helper, "on n1")
    assert asked[-1] == ("pass", "ghcr.io")


def test_a_helper_token_and_a_helper_without_login():
    token = credentials.helper_answer("gcr", CommandResult(0, '{"Username": "<token>", "Secret": "t"}'), "")
    assert token.credentials.identity_token and token.credentials.auth_config("gcr.io")["identitytoken"] == "t"
    # the helper protocol's "not logged in": docker pulls anonymously
    missing = credentials.helper_answer("pass", CommandResult(1, "credentials not found in native keychain\n"), "")
    assert missing.problem == "" and not missing.credentials.present


def test_a_missing_or_failing_helper_is_a_problem_that_names_it():
    gone = credentials.helper_answer("desktop", CommandResult(127, "", "sh: 1: docker-credential-desktop: not found"),
                                     "on n1 for ops")
    assert "docker-credential-desktop is not on PATH on n1 for ops" in gone.problem
    assert diagnose_pull(REF, gone.problem, NODE).cause == "registry_credential_helper"
    broken = credentials.helper_answer("pass", CommandResult(1, "", "gpg: decryption failed: No secret key"), "")
    assert "exited 1" in broken.problem and "gpg" in broken.problem
    slow = credentials.helper_answer("pass", CommandResult(None, timed_out=True), "")
    assert "passphrase" in slow.problem


def test_a_config_that_is_not_json_or_absent_means_an_anonymous_pull():
    assert credentials.resolve("", "r:5000", _no_helper, "").credentials == credentials.NO_CREDENTIALS
    assert credentials.resolve("{not json", "r:5000", _no_helper, "").credentials.present is False
    assert credentials.lookup("[1]", "r:5000").note


def test_the_secret_is_never_in_repr_and_anonymous_is_an_empty_auth_config():
    creds = credentials.Credentials("alice", "hunter2-secret", source="x")
    assert "hunter2-secret" not in repr(creds) and "hunter2-secret" not in repr(credentials.Resolved(creds))
    # {} and not None: None lets docker-py send this controller's own login
    assert credentials.NO_CREDENTIALS.auth_config("r:5000") == {}


# --------------------------------------------------------------------------- the inventory

BASE = "name: t\nhosts: [{name: n1, address: 10.0.0.1}]\ncontainer:\n  image: r:5000/a/b:1\n"


def _inventory(extra: str):
    return parse_inventory(BASE + extra, "inv.yaml")


def test_registry_auth_forms():
    assert _inventory("").container.registry_auth.source == "node"
    assert _inventory("  registry_auth: {from: docker-config}\n").container.registry_auth.source == "docker-config"
    auth = _inventory("  registry_auth: {username: bot, password_env: REG_PW}\n").container.registry_auth
    assert (auth.source, auth.username, auth.password_env) == ("password", "bot", "REG_PW")


@pytest.mark.parametrize("text,words", [
    ("  registry_auth: {username: bot, password: hunter2}\n", "a secret is never written in the inventory"),
    ("  registry_auth: {username: bot}\n", "no password_env"),
    ("  registry_auth: {password_env: REG_PW}\n", "no username"),
    ("  registry_auth: {from: docker-config, username: bot}\n", "both from"),
    ("  registry_auth: {from: keychain}\n", "must be one of node | docker-config"),
    ("  registry_auth: {username: bot, password_env: 'my password'}\n", "must name an environment variable"),
    ("  registry_auth: docker-config\n", "must be a mapping"),
    ("  registry_auth: {}\n", "registry_auth is empty"),
])
def test_bad_registry_auth_is_one_error_with_its_line_and_fix(text, words):
    with pytest.raises(InventoryError) as caught:
        _inventory(text)
    message = str(caught.value)
    assert words in message and "inv.yaml:5" in message and "hunter2" not in message
    assert caught.value.fix


def test_the_password_from_the_environment_is_masked_where_clusterctl_writes(monkeypatch):
    inventory = _inventory("  registry_auth: {username: bot, password_env: REG_PW}\n")
    monkeypatch.setenv("REG_PW", "pw-0123456")
    assert "pw-0123456" in secret_values(inventory)
    from clusterctl.inventory.dump import dump_inventory

    dumped = json.dumps(dump_inventory(inventory)) if not isinstance(dump_inventory(inventory), str) else dump_inventory(inventory)
    assert "REG_PW" in dumped and "pw-0123456" not in dumped


# --------------------------------------------------------------------------- pull and pull check on a fake engine


class FakeAPI:
    def __init__(self, engine):
        self.engine = engine

    def inspect_distribution(self, ref, auth_config=None):
        import docker

        self.engine.requests.append(("inspect", ref, auth_config))
        if self.engine.refuse:
            raise docker.errors.APIError("500 Server Error", explanation=self.engine.refuse)
        return {"Descriptor": {"digest": "sha256:abc"}}

    def pull(self, repository, tag=None, stream=False, decode=False, auth_config=None):
        self.engine.requests.append(("pull", f"{repository}:{tag}", auth_config))
        self.engine.pulled = True
        return iter([{"id": "l1", "progressDetail": {"current": 5, "total": 10}}])


class FakeEngine:
    def __init__(self, refuse: str = ""):
        self.refuse, self.requests, self.pulled = refuse, [], False
        self.api = FakeAPI(self)
        self.images = SimpleNamespace(get=self._get)

    def _get(self, ref):
        import docker

        if not self.pulled:
            raise docker.errors.ImageNotFound("no")
        return SimpleNamespace(id="sha256:img", attrs={"RepoDigests": []})

    def info(self):
        return {"RegistryConfig": {"Mirrors": []}}


class FakeTransport:
    """A node: its ssh.user's config.json and a credential helper, answered like a shell would."""

    def __init__(self, host, config: dict, helpers: dict | None = None, refuse: str = ""):
        self.host, self.config, self.helpers = host, config, helpers or {}
        self.engine, self.commands = FakeEngine(refuse), []

    def run(self, cmd, on_line=None):
        self.commands.append(cmd)
        if cmd.argv[0] == "sh":
            return CommandResult(0, json.dumps(self.config))
        name = cmd.argv[0].removeprefix("docker-credential-")
        if name not in self.helpers:
            return CommandResult(127, "", f"sh: 1: {cmd.argv[0]}: not found")
        return CommandResult(0, json.dumps({"Username": "helper-user", "Secret": self.helpers[name]}))

    def docker(self):
        return self.engine


def connections_over(transports):  # the executor's own Connections, over fake transports
    from clusterctl.executor import Connections

    return Connections(lambda host: transports[host.name])


def _cluster(tmp_path, nodes: dict, extra: str = ""):
    hosts = "".join(f"  - {{name: {n}, address: 10.0.0.{i + 1}, user: ops}}\n" for i, n in enumerate(nodes))
    inventory = parse_inventory(f"name: t\nhosts:\n{hosts}container:\n  image: r:5000/a/b:1\n{extra}", "inv.yaml")
    transports = {h.name: FakeTransport(h, *nodes[h.name]) for h in inventory.hosts}
    return inventory, transports


def _run_module(name, inventory, transports, **variables):
    from clusterctl import modules
    from clusterctl.executor import ClusterContext, TaskContext, apply_module_output

    module = modules.resolve(name)
    if module.cluster_scope:
        return module(ClusterContext(inventory.hosts, inventory, {}, connections_over(transports), lambda e: None))
    out = {}
    for host in inventory.hosts:
        output = module(TaskContext(host, inventory, {"on_event": lambda e: None, **variables}))
        out[host.name] = apply_module_output(output, transports[host.name], host, lambda e: None, None)
    return out


def test_the_pull_sends_each_nodes_own_login_and_nothing_else(tmp_path):
    inventory, transports = _cluster(tmp_path, {
        "n1": ({"auths": {"r:5000": {"auth": _b64("alice:pw-of-n1")}}},),
        "n2": ({"credsStore": "cctest"}, {"cctest": "pw-of-n2"}),
        "n3": ({},),
    })
    results = _run_module("docker.pull", inventory, transports)
    assert all(r.status is HostStatus.CHANGED for r in results.values()), results
    sent = {n: t.engine.requests[-1][2] for n, t in transports.items()}
    assert sent["n1"] == {"username": "alice", "password": "pw-of-n1", "serveraddress": "r:5000"}
    assert sent["n2"] == {"username": "helper-user", "password": "pw-of-n2", "serveraddress": "r:5000"}
    assert sent["n3"] == {}  # anonymous, never the controller's own login
    helper_run = next(c for c in transports["n2"].commands if c.argv[0] != "sh")
    assert helper_run.argv == ("docker-credential-cctest", "get") and helper_run.stdin == b"r:5000"
    text = json.dumps([{"detail": r.detail, "data": r.data} for r in results.values()], default=str)
    assert "pw-of-n1" not in text and "pw-of-n2" not in text


def test_one_node_that_cannot_pull_stops_every_node_before_anything_changes(tmp_path):
    inventory, transports = _cluster(tmp_path, {
        "n1": ({"auths": {"r:5000": {"auth": _b64("alice:pw-of-n1")}}},),
        "n2": ({}, {}, 'Head "http://r:5000/v2/a/b/manifests/1": no basic auth credentials'),
    })
    results = _run_module("docker.pull_check", inventory, transports)
    assert results["n2"].status is HostStatus.FAILED
    assert "registry_no_credentials" in results["n2"].detail and "`docker login r:5000` on n2 as ops" in results["n2"].detail
    assert results["n1"].status is HostStatus.FAILED and "stopped before changing anything: n2" in results["n1"].detail
    assert results["n1"].data["checks"][0]["status"] == "pass"
    assert not any(t.engine.pulled for t in transports.values())
    assert "pw-of-n1" not in json.dumps([r.data for r in results.values()]) + results["n1"].detail


def test_a_node_that_has_the_image_only_warns(tmp_path):
    inventory, transports = _cluster(tmp_path, {"n1": ({}, {}, "dial tcp 10.0.0.9:5000: connect: connection refused")})
    transports["n1"].engine.pulled = True  # the image is there already
    [check] = [c for c in _checks(inventory, transports)]
    assert check.status is CheckStatus.WARN and "registry_unreachable" in check.detail


def test_controller_credentials_reach_the_node_only_inside_the_request(tmp_path, monkeypatch):
    monkeypatch.setenv("REG_PW", "controller-pw")
    inventory, transports = _cluster(tmp_path, {"n1": ({"auths": {"r:5000": {"auth": _b64("n:node-pw")}}},)},
                                     "  registry_auth: {username: bot, password_env: REG_PW}\n")
    results = _run_module("docker.pull", inventory, transports)
    assert results["n1"].status is HostStatus.CHANGED
    assert transports["n1"].engine.requests[-1][2]["password"] == "controller-pw"
    assert all("controller-pw" not in " ".join(c.argv) and not c.stdin for c in transports["n1"].commands)
    assert transports["n1"].commands == []  # the node's config is not even read
    monkeypatch.delenv("REG_PW")
    transports["n1"].engine.pulled = False  # a node without the image
    [check] = _checks(inventory, transports)
    assert check.status is CheckStatus.FAIL and "export REG_PW=" in check.fix


def _checks(inventory, transports):
    from clusterctl.registry.image_pull import image_pull_checks

    return image_pull_checks(inventory, list(inventory.hosts), connections_over(transports))


def test_pull_never_checks_only_that_the_image_is_there(tmp_path):
    inventory, transports = _cluster(tmp_path, {"n1": ({},)}, "  pull: never\n")
    [check] = _checks(inventory, transports)
    assert check.status is CheckStatus.FAIL and "docker load" in check.fix
    assert transports["n1"].engine.requests == []
