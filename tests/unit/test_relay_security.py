"""Issue 34, finding 3: the peer image relay authenticates both ends, keeps its key off every command
line, and `docker load` keeps only the image asked for. Each test plays the attack that worked on the
relay before (a token in `ps`, an impostor's tar, a tar with another tag, idle connections ahead of
the receiver) with the real relay and check programs as `up` starts them, on loopback."""
from __future__ import annotations

import io

import pytest

from clusterctl.registry import loadcheck


@pytest.mark.parametrize("image, names", [
    ("198.18.0.1:5000/sandbox/base:1", ("198.18.0.1:5000/sandbox/base:1", "198.18.0.1:5000/sandbox/base:1", "1")),
    ("ubuntu", ("ubuntu:latest", "docker.io/library/ubuntu:latest", "latest")),
    ("docker.io/library/ubuntu:22.04", ("ubuntu:22.04", "docker.io/library/ubuntu:22.04", "22.04")),
    ("nvcr.io/nvidia/pytorch:24.01-py3", ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch:24.01-py3",
                                          "24.01-py3")),
    ("me/app:2", ("me/app:2", "docker.io/me/app:2", "2")),
    ("localhost/app", ("localhost/app:latest", "localhost/app:latest", "latest")),
    ("r/a@sha256:" + "1" * 64, ("", "", "")),
])
def test_the_names_a_save_writes_are_docker_s_own_spelling_of_the_image(image, names):
    assert loadcheck.saved_names(image) == names
