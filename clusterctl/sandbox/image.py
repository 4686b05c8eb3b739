"""The sandbox's base image, pushed straight to the registry: no build engine, no download.

The image is a tiny root filesystem (`bin lib lib64 sbin -> usr/...`, /etc/passwd, ...)
whose /usr and Python environment come from the host through read-only volumes
(`python_volumes()`): a real container running the host's Python and torch.
Layers are built deterministically (fixed mtimes, gzip without timestamp), so pushing the
same content twice gives the same digests and `up` stays idempotent.
"""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import os
import platform
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Mapping

from clusterctl.errors import SandboxError
from clusterctl.sandbox.layout import REGISTRY
from clusterctl.sandbox.registry import OPENER
from clusterctl.sandbox.system import SYSTEM_PATH

MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_V1 = "application/vnd.docker.container.image.v1+json"
LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
EPOCH = "1970-01-01T00:00:00Z"

_DIRS = {"etc": 0o755, "tmp": 0o1777, "workspace": 0o755, "root": 0o700, "usr": 0o755, "proc": 0o555,
         "sys": 0o555, "dev": 0o755, "run": 0o755, "var": 0o755, "var/tmp": 0o1777, "home": 0o755,
         "opt": 0o755, "mnt": 0o755}
_LINKS = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}
_FILES = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "etc/group": "root:x:0:\nnogroup:x:65534:\n",
    "etc/hosts": "127.0.0.1\tlocalhost\n",  # replaced by the engine at run time
    "etc/hostname": "",
    "etc/resolv.conf": "",
    "etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n",
}


@dataclass(frozen=True)
class Layer:
    blob: bytes  # gzip-compressed tar
    diff_id: str  # digest of the uncompressed tar

    @property
    def digest(self) -> str:
        return _digest(self.blob)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(build) -> Layer:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        build(tar)
    data = raw.getvalue()
    return Layer(gzip.compress(data, mtime=0), _digest(data))


def _add(tar: tarfile.TarFile, name: str, kind: bytes, mode: int, data: bytes = b"", target: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime, info.linkname = kind, mode, 0, target
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def host_alternatives(root: Path = Path("/etc/alternatives")) -> dict[str, str]:
    """The host's Debian alternatives (name -> absolute target), sorted. The image borrows the host's /usr,
    whose `c++`, `cc`, `awk`... are links through /etc/alternatives: without these, a job compiling an
    extension at run time (DeepSpeed's CPU ops, torch.utils.cpp_extension) found `c++` dangling, as no
    real Debian or Ubuntu image would."""
    try:
        links = {entry.name: os.readlink(entry.path) for entry in os.scandir(root) if entry.is_symlink()}
    except OSError:
        return {}
    return {name: links[name] for name in sorted(links) if links[name].startswith("/")}


def base_layer(alternatives: Mapping[str, str] | None = None) -> Layer:
    alternatives = host_alternatives() if alternatives is None else alternatives

    def build(tar):
        for name, mode in _DIRS.items():
            _add(tar, name, tarfile.DIRTYPE, mode)
        for name, target in _LINKS.items():
            _add(tar, name, tarfile.SYMTYPE, 0o777, target=target)
        for name, text in _FILES.items():
            _add(tar, name, tarfile.REGTYPE, 0o644, text.encode())
        if alternatives:
            _add(tar, "etc/alternatives", tarfile.DIRTYPE, 0o755)
        for name, target in sorted(alternatives.items()):
            _add(tar, f"etc/alternatives/{name}", tarfile.SYMTYPE, 0o777, target=target)
    return _layer(build)


def files_layer(files: Mapping[str, bytes]) -> Layer:
    """A layer adding `files` (container path -> content, mode 0644; parents created)."""
    clean = {}
    for path, data in files.items():
        parts = PurePosixPath("/", path).parts[1:]
        if not parts or ".." in parts:
            raise SandboxError(f"bad path for an image file: {path!r}")
        clean["/".join(parts)] = bytes(data)

    def build(tar):
        parents = sorted({str(p) for name in clean for p in PurePosixPath(name).parents if str(p) != "."})
        for parent in parents:
            if parent not in _LINKS:
                _add(tar, parent, tarfile.DIRTYPE, _DIRS.get(parent, 0o755))
        for name in sorted(clean):
            _add(tar, name, tarfile.REGTYPE, 0o644, clean[name])
    return _layer(build)


def _architecture() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def image_config(layers: list[Layer], label: str) -> bytes:
    python_bin = str(Path(sys.prefix) / "bin")
    config = {
        "architecture": _architecture(),
        "os": "linux",
        "created": EPOCH,
        "config": {
            "Env": [f"PATH={python_bin}:{SYSTEM_PATH}"],
            "Cmd": ["sleep", "infinity"],
            "WorkingDir": "/workspace",
            "Labels": {"org.clusterctl.sandbox": label},
        },
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created": EPOCH, "created_by": f"clusterctl sandbox: {label} layer {i}"}
                    for i in range(len(layers))],
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def split_reference(ref: str) -> tuple[str, str, str]:
    """`198.18.0.1:5000/sandbox/base:1` -> (registry, repository, tag)."""
    registry, _, rest = ref.partition("/")
    if registry != REGISTRY or not rest:
        raise SandboxError(f"{ref!r} is not in the sandbox registry", fix=f"use a reference starting with {REGISTRY}/")
    if "@" in rest:
        raise SandboxError(f"{ref!r}: push by tag, not by digest")
    repository, _, tag = rest.rpartition(":") if ":" in rest else (rest, "", "latest")
    return registry, repository, tag or "latest"


def _request(method: str, url: str, data: bytes | None = None, content_type: str | None = None):
    request = urllib.request.Request(url, data=data, method=method)
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with OPENER.open(request, timeout=60) as response:
            return response.status, response.headers
    except urllib.error.HTTPError as exc:
        if method == "HEAD" and exc.code == 404:
            return 404, exc.headers
        body = exc.read().decode(errors="replace")[:500]
        raise SandboxError(f"registry answered {exc.code} to {method} {url}: {body}") from exc
    except OSError as exc:
        raise SandboxError(f"registry {REGISTRY} unreachable: {exc}") from exc


def _push_blob(base: str, repository: str, data: bytes) -> str:
    digest = _digest(data)
    if _request("HEAD", f"{base}/v2/{repository}/blobs/{digest}")[0] == 200:
        return digest
    _, headers = _request("POST", f"{base}/v2/{repository}/blobs/uploads/", b"")
    location = urllib.parse.urljoin(base + "/", headers["Location"])
    separator = "&" if "?" in location else "?"
    _request("PUT", f"{location}{separator}digest={digest}", data, "application/octet-stream")
    return digest


def push(ref: str, layers: list[Layer], label: str) -> str:
    """Push layers + config + a schema 2 manifest under `ref`; returns the manifest digest."""
    registry, repository, tag = split_reference(ref)
    base = f"http://{registry}"
    config = image_config(layers, label)
    for layer in layers:
        _push_blob(base, repository, layer.blob)
    _push_blob(base, repository, config)
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": MANIFEST_V2,
        "config": {"mediaType": CONFIG_V1, "size": len(config), "digest": _digest(config)},
        "layers": [{"mediaType": LAYER_GZIP, "size": len(l.blob), "digest": l.digest} for l in layers],
    }, indent=3).encode()
    _request("PUT", f"{base}/v2/{repository}/manifests/{tag}", manifest, MANIFEST_V2)
    return _digest(manifest)


def push_base(ref: str) -> str:
    return push(ref, [base_layer()], "base")


def push_variant(ref: str, files: Mapping[str, bytes]) -> str:
    """The base image plus `files`, under any tag of the sandbox registry."""
    return push(ref, [base_layer(), files_layer(files)], "variant")


# --------------------------------------------------------------------------- volumes


def _torch_dir() -> str | None:
    spec = importlib.util.find_spec("torch")  # locates torch without importing it
    if spec is None or not spec.origin:
        return None
    return str(Path(spec.origin).parent.parent)


def python_volumes() -> list[str]:
    """Read-only volumes ("src:dst:ro") giving a container the host's /usr, this Python
    (sys.base_prefix, sys.prefix) and the site-packages holding torch, at the same paths."""
    candidates = ["/usr", sys.base_prefix, sys.prefix, _torch_dir()]
    chosen: list[str] = []
    for path in candidates:
        if not path:
            continue
        for variant in dict.fromkeys([os.path.normpath(path), os.path.realpath(path)]):
            if not any(variant == c or variant.startswith(c.rstrip("/") + "/") for c in chosen):
                chosen.append(variant)
    return [f"{path}:{path}:ro" for path in chosen]
