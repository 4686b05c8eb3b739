"""What the stages need of the Docker SDK besides the client itself, so that only transport/ imports
docker: its errors translated into clusterctl's (`EngineError`, `EngineNotFound`), and the typed
arguments of a container's creation (`ulimit`, `device_request`).

The client is `transport.docker()` (a docker-py client over the host's SSH connection, or the local
socket); a stage wraps its calls in `with translated():` and catches `EngineError`. docker is
imported only when a call is made (its import is most of a cold command's start-up otherwise).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional


class EngineError(Exception):
    """The engine refused a request (docker.errors.APIError): `str()` is what the engine said
    (its explanation), `status_code` the HTTP status where there was one."""

    def __init__(self, message: str, status_code: Optional[int] = None):
        super().__init__(message)
        self.status_code = status_code


class EngineNotFound(EngineError):
    """No such container or image (docker.errors.NotFound, ImageNotFound)."""


@contextmanager
def translated() -> Iterator[None]:
    """Docker's API errors raised inside become EngineError (EngineNotFound for a 404), the original
    kept as `__cause__`; anything else (a lost connection: requests' ConnectionError) passes."""
    import docker

    try:
        yield
    except docker.errors.APIError as exc:
        kind = EngineNotFound if isinstance(exc, docker.errors.NotFound) else EngineError
        raise kind(str(getattr(exc, "explanation", None) or exc).strip(), exc.status_code) from exc


def ulimit(name: str, soft: int, hard: int):
    """A container's ulimit as docker-py's create wants it."""
    from docker.types import Ulimit

    return Ulimit(name=name, soft=soft, hard=hard)


def device_request(count: int, device_ids, capabilities):
    """A container's GPU request as docker-py's create wants it."""
    from docker.types import DeviceRequest

    return DeviceRequest(count=count, device_ids=device_ids, capabilities=capabilities)
