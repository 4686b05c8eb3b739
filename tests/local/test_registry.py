"""Private registries without a cluster: the failure classifier over real engine messages,
Docker's credential lookup, `container.registry_auth` in the inventory, masking, and the
pull / pull check talking to a fake engine (what travels in the request, and what never
reaches a message)."""
from __future__ import annotations
import json
from clusterctl.registry import credentials

from unit.test_registry import _b64


def test_password_env_and_the_controller_config(monkeypatch, tmp_path):
    monkeypatch.delenv("CC_TEST_REGISTRY_PW", raising=False)
    assert "$CC_TEST_REGISTRY_PW is not set" in credentials.from_password("u", "CC_TEST_REGISTRY_PW").problem
    monkeypatch.setenv("CC_TEST_REGISTRY_PW", "pw-from-env")
    assert credentials.from_password("u", "CC_TEST_REGISTRY_PW").credentials.secret == "pw-from-env"
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"r:5000": {"auth": _b64("ctl:ctlpw")}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    assert credentials.on_controller("r:5000").credentials.secret == "ctlpw"
    helper = tmp_path / "docker-credential-cctest"
    helper.write_text('#!/bin/sh\nread server\nprintf \'{"ServerURL":"%s","Username":"h","Secret":"from-helper"}\' '
                      '"$server"\n')
    helper.chmod(0o755)
    (tmp_path / "config.json").write_text(json.dumps({"credHelpers": {"r:5000": "cctest"}}))
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert credentials.on_controller("r:5000").credentials.secret == "from-helper"
    (tmp_path / "config.json").write_text(json.dumps({"credsStore": "nosuchhelper"}))
    assert "docker-credential-nosuchhelper is not on PATH" in credentials.on_controller("r:5000").problem
