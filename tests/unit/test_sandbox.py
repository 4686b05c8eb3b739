"""The rehearsal cluster is made of real parts: real sshd with strict host keys, real
Docker Engines, a real registry, a real network that can be cut."""
from __future__ import annotations

import pytest

from clusterctl.errors import SandboxError
from clusterctl.sandbox import image as sandbox_image
from clusterctl.sandbox import python_volumes
from clusterctl.sandbox.layout import Layout
from clusterctl.sandbox.sshd import config_text


# --------------------------------------------------------------------------- pure parts


def test_layers_are_deterministic_so_repushing_is_a_no_op():
    assert sandbox_image.base_layer().digest == sandbox_image.base_layer().digest
    assert sandbox_image.files_layer({"/a/b": b"x"}).digest == sandbox_image.files_layer({"a/b": b"x"}).digest


def test_the_base_image_carries_the_hosts_alternatives_so_borrowed_usr_links_resolve(tmp_path):
    import gzip
    import io
    import os
    import tarfile

    os.symlink("/usr/bin/g++", tmp_path / "c++")
    os.symlink("relative", tmp_path / "odd")  # only absolute targets: what update-alternatives writes
    (tmp_path / "README").write_text("not a link")
    assert sandbox_image.host_alternatives(tmp_path) == {"c++": "/usr/bin/g++"}
    assert sandbox_image.host_alternatives(tmp_path / "absent") == {}
    layer = sandbox_image.base_layer({"c++": "/usr/bin/g++"})
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer.blob))) as tar:
        link = tar.getmember("etc/alternatives/c++")
    assert link.issym() and link.linkname == "/usr/bin/g++"


def test_image_files_cannot_escape_the_root():
    with pytest.raises(SandboxError):
        sandbox_image.files_layer({"../etc/passwd": b"x"})


def test_references_outside_the_sandbox_registry_are_refused():
    assert sandbox_image.split_reference("198.18.0.1:5000/sandbox/base:1") == ("198.18.0.1:5000", "sandbox/base", "1")
    assert sandbox_image.split_reference("198.18.0.1:5000/x/y")[2] == "latest"
    with pytest.raises(SandboxError):
        sandbox_image.split_reference("docker.io/library/python:3")


def test_python_volumes_are_read_only_and_not_nested():
    volumes = python_volumes()
    sources = [v.split(":")[0] for v in volumes]
    assert "/usr" in sources and all(v.endswith(":ro") for v in volumes)
    assert not any(a != b and a.startswith(b.rstrip("/") + "/") for a in sources for b in sources)


def test_sshd_config_hardens_and_points_docker_at_the_node_engine(tmp_path):
    layout = Layout(tmp_path)
    text = config_text(layout, layout.node(1), docker=True)
    for line in ("Port 22", "ListenAddress 198.18.0.11", "PermitRootLogin prohibit-password", "PasswordAuthentication no",
                 "UsePAM no", "MaxStartups 100:30:200", "MaxSessions 64",
                 f"AuthorizedKeysFile {layout.authorized_keys}"):
        assert line in text.splitlines()
    assert f'DOCKER_HOST="unix://{tmp_path}/node1/docker.sock"' in text
    assert "DOCKER_HOST" not in config_text(layout, layout.node(1), docker=False)
    sudo_node = config_text(layout, layout.node(2), docker=True).splitlines()  # the non-root user's node
    for line in ("Port 2222", "ListenAddress 198.18.0.12", "PermitRootLogin no",
                 f"AuthorizedKeysFile {tmp_path}/node2/home/ccops/.ssh/authorized_keys"):
        assert line in sudo_node
    assert "ListenAddress 198.19.0.13" in config_text(layout, layout.node(3), docker=True).splitlines()  # bastion only


def test_only_the_packages_of_missing_binaries_are_installed(monkeypatch):
    from clusterctl.sandbox import system

    monkeypatch.setattr(system, "which", lambda binary: None if binary in ("dockerd", "ibstat") else "/bin/x")
    assert system.missing_packages(docker=False) == ["infiniband-diags"]
    assert system.missing_packages(docker=True) == ["docker.io", "infiniband-diags"]
