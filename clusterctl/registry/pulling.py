"""One node's pull, as the pull check and `docker.pull` both make it: whose credentials, and
whether the registry gives that node the image's manifest with them.

The check asks the node's engine (`GET /distribution/<ref>/json`), not the registry directly:
the engine is what pulls, through its own insecure-registries, certs.d, mirrors and proxy,
so an answer here is the answer the pull will get.
"""
from __future__ import annotations

from clusterctl.models import CheckResult, CheckStatus, Host, Inventory
from clusterctl.registry.docker_replies import api_message
from clusterctl.registry import credentials
from clusterctl.transport.docker_engine import EngineError, EngineNotFound, translated
from clusterctl.registry.pull_errors import (
    PullContext,
    PullProblem,
    diagnose_pull,
    registry_of,
)

CHECK = "image_pull"


def resolve_for(inventory: Inventory, transport, host: Host) -> credentials.Resolved:
    """The credentials this node pulls with, per container.registry_auth."""
    auth, registry = inventory.container.registry_auth, registry_of(inventory.container.image)
    if auth.source == "password":
        return credentials.from_password(auth.username or "", auth.password_env or "")
    if auth.source == "docker-config":
        return credentials.on_controller(registry)
    return credentials.on_node(transport, registry, f"on {host.name} for {_user(host)}")


def _user(host: Host) -> str:
    return host.ssh.user or "the ssh user"


def context(inventory: Inventory, host: Host, resolved: credentials.Resolved,
            mirrors: tuple[str, ...] = ()) -> PullContext:
    auth = inventory.container.registry_auth
    return PullContext(host=host.name, user=_user(host), mode=auth.source,
                       sent_credentials=resolved.credentials.present, source=resolved.credentials.source,
                       password_env=auth.password_env or "", mirrors=mirrors)


def credentials_problem(inventory: Inventory, host: Host, resolved: credentials.Resolved) -> PullProblem:
    """No credentials could be had at all (a helper missing or failing, $VAR unset)."""
    ctx = context(inventory, host, resolved)
    if inventory.container.registry_auth.source == "password":
        return PullProblem("registry_no_credentials", f"{inventory.container.image}: {resolved.problem}",
                           f"export {ctx.password_env}=... in the shell that runs clusterctl (never in the inventory)")
    return diagnose_pull(inventory.container.image, resolved.problem, ctx)


def mirrors_of(client) -> tuple[str, ...]:
    try:
        found = ((client.info() or {}).get("RegistryConfig") or {}).get("Mirrors") or ()
    except Exception:  # only to word a failure better; the failure is reported either way
        return ()
    return tuple(str(m) for m in found if isinstance(m, str))


def check_node(inventory: Inventory, transport, host: Host) -> CheckResult:
    """`image_pull` for one node: can it pull container.image, with the credentials it will use?"""
    import requests

    try:
        return ask_registry(inventory, transport, host)
    except requests.exceptions.ConnectionError as exc:
        if not getattr(transport, "alive", True):
            raise
        return CheckResult(host.name, CHECK, CheckStatus.FAIL, f"docker engine not reachable on {host.name}: {exc}",
                           f"start it (`systemctl enable --now docker`) and check `docker info` there as {_user(host)}")


def ask_registry(inventory: Inventory, transport, host: Host) -> CheckResult:
    """check_node's work; an engine that does not answer raises requests' ConnectionError (`up`
    reports it as every engine step does: modules/docker.engine_action)."""
    spec = inventory.container
    client = transport.docker()
    present = local_image(client, spec.image) is not None
    if spec.pull == "never":
        if present:
            return CheckResult(host.name, CHECK, CheckStatus.PASS, f"{spec.image} is on the node (container.pull: never)")
        return CheckResult(host.name, CHECK, CheckStatus.FAIL,
                           f"{spec.image} is not on the node and container.pull is never",
                           f"`docker load` it on {host.name}, or set container.pull: missing")
    resolved = resolve_for(inventory, transport, host)
    if resolved.problem:
        return _verdict(host, credentials_problem(inventory, host, resolved), present and spec.pull == "missing")
    try:
        with translated():
            answer = client.api.inspect_distribution(spec.image, auth_config=auth_config(resolved, spec.image))
    except EngineError as exc:
        problem = diagnose_pull(spec.image, api_message(exc), context(inventory, host, resolved, mirrors_of(client)))
        return _verdict(host, problem, present and spec.pull == "missing")
    digest = ((answer or {}).get("Descriptor") or {}).get("digest", "")
    who = resolved.credentials.source if resolved.credentials.present else "no login (anonymous)"
    return CheckResult(host.name, CHECK, CheckStatus.PASS,
                       f"the registry gives {host.name} the manifest of {spec.image}"
                       + (f" ({digest})" if digest else "") + f" with {who}")


def _verdict(host: Host, problem: PullProblem, has_image: bool) -> CheckResult:
    """A node that already has the image and pulls only when it is missing still starts: warn."""
    if has_image:
        return CheckResult(host.name, CHECK, CheckStatus.WARN,
                           f"{problem.cause}: {problem.what}; the node has the image, so `up` does not pull it",
                           problem.fix)
    return CheckResult(host.name, CHECK, CheckStatus.FAIL, f"{problem.cause}: {problem.what}", problem.fix)


def auth_config(resolved: credentials.Resolved, ref: str):
    """What goes into the engine's request for `ref` (X-Registry-Auth): the resolved credentials
    under the key Docker files that registry's login under."""
    return resolved.credentials.auth_config(credentials.auth_key(registry_of(ref)))


def local_image(client, ref: str):
    """The node's image `ref`, or None."""
    try:
        with translated():
            return client.images.get(ref)
    except EngineNotFound:
        return None
