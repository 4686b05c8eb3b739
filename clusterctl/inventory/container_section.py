"""The inventory's `container:` section (and its `registry_auth:`) -> `ContainerSpec`: the image, the
container's name, volumes, IPC, labels, and whose credentials pull the image. load.py reads the
other sections and what spans them."""
from __future__ import annotations

import posixpath
import re
from typing import Any, Optional

from clusterctl.inventory.values import (Doc, describe, expect_choice, expect_env, expect_gpus, expect_size,
                                         expect_text, expect_text_list)
from clusterctl.models import ContainerSpec, RegistryAuth

CONTAINER_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")
CONTAINER_KEYS = ("image", "name", "runtime", "gpus", "shm_size", "ipc", "volumes", "env", "command", "pull", "distribute",
                  "labels", "registry_auth")
REGISTRY_AUTH_KEYS = ("from", "username", "password_env")
REGISTRY_AUTH_FROM = ("node", "docker-config")


def container_section(doc: Doc, data: Any) -> Optional[ContainerSpec]:
    if data is None:
        return None
    path, default = ("container",), ContainerSpec(image="")
    spec = doc.mapping(data, path, CONTAINER_KEYS)
    runtime = doc.value(spec, "runtime", path, lambda d, v, p: expect_choice(d, v, p, ("docker", "host")), "docker")
    image = doc.value(spec, "image", path, _image, "")
    if runtime == "docker" and not image:
        doc.fail(path + ("image",), "container has no image", "add image: registry/name:tag, or runtime: host to "
                 "run on the bare host")
    shm_size, ipc = doc.value(spec, "shm_size", path, expect_size), doc.value(spec, "ipc", path, _ipc)
    if shm_size and ipc:
        doc.fail(path + ("ipc",), "shm_size and ipc: host both set; with ipc: host docker ignores shm_size",
                 "keep one: shm_size: 16g (private /dev/shm) or ipc: host (the host's /dev/shm)")
    return ContainerSpec(
        image=image, runtime=runtime, shm_size=shm_size, ipc=ipc,
        name=doc.value(spec, "name", path, _container_name, default.name),
        gpus=doc.value(spec, "gpus", path, expect_gpus, default.gpus),
        volumes=doc.value(spec, "volumes", path, _volumes, ()),
        env=doc.value(spec, "env", path, expect_env, ()),
        command=doc.value(spec, "command", path, expect_text_list, default.command),
        pull=doc.value(spec, "pull", path, lambda d, v, p: expect_choice(d, v, p, ("missing", "always", "never")),
                       default.pull),
        distribute=doc.value(spec, "distribute", path,
                             lambda d, v, p: expect_choice(d, v, p, ("registry", "peers", "auto")), default.distribute),
        labels=doc.value(spec, "labels", path, _labels, ()),
        registry_auth=doc.value(spec, "registry_auth", path, _registry_auth, RegistryAuth()),
    )


def _registry_auth(doc: Doc, value: Any, path: tuple) -> RegistryAuth:
    """`{from: node}` (the default), `{from: docker-config}` or `{username: NAME, password_env: VAR}`.
    A password is never written here: the inventory is read, copied and shown (`inventory show`)."""
    forms = ("registry_auth: {from: node} (each node's own `docker login`), "
             "{from: docker-config} (this controller's), or {username: NAME, password_env: VAR}")
    if isinstance(value, dict):
        for key in value:
            if str(key).lower() in ("password", "secret", "token", "auth"):
                doc.fail(path + (key,), f"registry_auth.{key}: a secret is never written in the inventory",
                         "put it in an environment variable of this controller and name it: "
                         "registry_auth: {username: NAME, password_env: REGISTRY_PASSWORD}")
    auth = doc.mapping(value, path, REGISTRY_AUTH_KEYS)
    if not auth:
        doc.fail(path, "registry_auth is empty", forms)
    source = doc.value(auth, "from", path, lambda d, v, p: expect_choice(d, v, p, REGISTRY_AUTH_FROM))
    username = doc.value(auth, "username", path, expect_text)
    password_env = doc.value(auth, "password_env", path, _env_name)
    if source is not None and (username or password_env):
        doc.fail(path + ("username" if username else "password_env",),
                 f"registry_auth has both from: {source} and a username/password_env", f"keep one: {forms}")
    if source is not None:
        return RegistryAuth(source=source)
    if not username or not password_env:
        missing = "password_env" if username else "username"
        doc.fail(path, f"registry_auth has {'username' if username else 'password_env'} but no {missing}",
                 "write registry_auth: {username: NAME, password_env: REGISTRY_PASSWORD} "
                 "(the password is read from $REGISTRY_PASSWORD on this controller)")
    return RegistryAuth(source="password", username=username, password_env=password_env)


def _env_name(doc: Doc, value: Any, path: tuple) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        doc.fail(path, f"password_env must name an environment variable, got {describe(value)}",
                 "write password_env: REGISTRY_PASSWORD (the variable's name, not its value)")
    return value


def _image(doc: Doc, value: Any, path: tuple) -> str:
    text = expect_text(doc, value, path)
    if re.search(r"\s", text) or text.startswith("-"):
        doc.fail(path, f"image '{text}' is not an image reference", "write image: registry/name:tag")
    return text


def _ipc(doc: Doc, value: Any, path: tuple) -> str:
    return expect_choice(doc, value, path, ("host",))


def _container_name(doc: Doc, value: Any, path: tuple) -> str:
    if not isinstance(value, str) or not CONTAINER_NAME_RE.fullmatch(value):
        doc.fail(path, f"container name {describe(value)} is not valid for docker ([a-zA-Z0-9][a-zA-Z0-9_.-]+)",
                 "use letters, digits, _ . - (at least 2 characters), e.g. name: wan22")
    return value


def _volumes(doc: Doc, value: Any, path: tuple) -> tuple[str, ...]:
    items = expect_text_list(doc, value if isinstance(value, list) else [value], path)
    targets: dict[str, int] = {}
    for index, volume in enumerate(items):
        target = _volume(doc, volume, path + (index,))
        if target in targets:
            doc.fail(path + (index,), f"two volumes mount on {target}", "mount each container path once")
        targets[target] = index
    return items


def _volume(doc: Doc, volume: str, path: tuple) -> str:
    parts = volume.split(":")
    fix = 'write "HOST_PATH:CONTAINER_PATH" or "HOST_PATH:CONTAINER_PATH:ro", e.g. "/data/models:/models:ro"'
    if len(parts) not in (2, 3) or not all(parts):
        doc.fail(path, f"volume '{volume}' is not src:dst[:ro|rw]", fix)
    source, target = parts[0], parts[1]
    if len(parts) == 3 and parts[2] not in ("ro", "rw"):
        doc.fail(path, f"volume '{volume}' has mode '{parts[2]}'; the mode is ro or rw", fix)
    if not target.startswith("/") or posixpath.normpath(target) == "/":
        doc.fail(path, f"volume '{volume}': the container path '{target}' must be absolute and not /", fix)
    if not source.startswith("/") and not CONTAINER_NAME_RE.fullmatch(source):
        doc.fail(path, f"volume '{volume}': the host path '{source}' is neither absolute nor a volume name "
                 "(no shell expands ~, $HOME or $(pwd) here)", fix)
    return posixpath.normpath(target)


def _labels(doc: Doc, value: Any, path: tuple) -> tuple[tuple[str, str], ...]:
    labels = doc.mapping(value, path, tuple(value) if isinstance(value, dict) else ())
    return tuple((str(k), expect_text(doc, v, path + (k,))) for k, v in labels.items())
