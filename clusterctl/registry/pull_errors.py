"""A failed pull (or manifest check), named by its cause with a fix that works on that node.

One pure function over the engine's words: the same text comes from `docker pull`, from the
engine API's pull stream and from `GET /distribution/<ref>/json` (the pull check), since all
go through the node's engine and its registry settings (insecure-registries, certs.d,
registry-mirrors, proxy). Fixes name the credentials the pull used, because "docker login
on every node" is wrong advice when the controller's login was sent.
"""
from __future__ import annotations

from dataclasses import dataclass

# Each cause, matched in this order on the lowercased message: TLS and HTTP before reachability
# (their messages carry the URL too), rate limits and credentials before "not found".
_TLS_UNKNOWN_CA = ("x509: certificate signed by unknown authority", "certificate signed by unknown authority")
_TLS_OTHER = ("x509:", "tls: failed to verify certificate", "remote error: tls")
_PLAIN_HTTP = ("server gave http response to https client",)
_RATE = ("toomanyrequests", "too many requests", "pull rate limit")
_NO_CREDS = ("no basic auth credentials",)
_UNAUTHORIZED = ("unauthorized", "authentication required", "incorrect username or password",
                 "authentication failure")
_DENIED = ("denied: requested access to the resource is denied", "requested access to the resource is denied",
           "insufficient_scope", "access to the requested resource is not authorized")
_NOT_FOUND = ("manifest unknown", "name unknown", "not found", "does not exist", "repository name not known")
_UNREACHABLE = ("connection refused", "no such host", "i/o timeout", "network is unreachable", "no route to host",
                "tls handshake timeout", "connection reset", "dial tcp", "client.timeout exceeded",
                "context deadline exceeded", "server misbehaving", "request canceled while waiting for connection")
_HELPER = ("error getting credentials",)


@dataclass(frozen=True)
class PullContext:
    """What the fix depends on: the node, the user whose login is used, and whose credentials were sent."""

    host: str
    user: str = "the ssh user"
    mode: str = "node"  # node | password | docker-config (RegistryAuth.source)
    sent_credentials: bool = False
    source: str = ""  # where the sent credentials came from
    password_env: str = ""
    mirrors: tuple[str, ...] = ()  # the engine's registry-mirrors (they serve Docker Hub images only)


@dataclass(frozen=True)
class PullProblem:
    cause: str
    what: str  # one line: what failed, quoting the engine's words
    fix: str

    @property
    def text(self) -> str:
        return f"{self.what}. fix: {self.fix}"


def failure_line(ref: str, problem: "PullProblem") -> str:
    """A failed pull as one line of `up`: the cause, what happened, the fix."""
    return f"pull of {ref} failed: {problem.cause}: {problem.what.removeprefix(ref + ': ')}. fix: {problem.fix}"


def registry_of(ref: str) -> str:
    """The registry an image reference pulls from (Docker's rule: a first part with . or : or localhost)."""
    first = ref.split("/", 1)[0]
    return first if "/" in ref and ("." in first or ":" in first or first == "localhost") else "docker.io"


def _login_fix(registry: str, ctx: PullContext) -> str:
    """How to give this pull working credentials, for the way it gets them."""
    if ctx.mode == "password":
        return (f"check container.registry_auth.username and the password in ${ctx.password_env} on this controller "
                f"(`docker login {registry}` with them must succeed)")
    if ctx.mode == "docker-config":
        return (f"`docker login {registry}` on this controller (container.registry_auth: {{from: docker-config}} "
                "sends this controller's login)")
    return (f"`docker login {registry}` on {ctx.host} as {ctx.user} (clusterctl pulls with that user's "
            "~/.docker/config.json and credential helpers there), or send this controller's login with "
            "container.registry_auth: {from: docker-config}")


def diagnose_pull(ref: str, message: str, ctx: PullContext) -> PullProblem:
    """The engine's or registry's refusal -> cause, what happened and the fix. Never raises."""
    registry, text = registry_of(ref), " ".join(str(message).split())
    lowered = text.lower()
    on = f"on {ctx.host}"
    daemon_json = f"/etc/docker/daemon.json on {ctx.host}"

    def has(markers) -> bool:
        return any(m in lowered for m in markers)

    if has(_HELPER):
        return PullProblem("registry_credential_helper", f"{ref}: {text}",
                           f"install that credential helper on PATH for {ctx.user} {on}, or fix credsStore/"
                           "credHelpers in that user's ~/.docker/config.json (`docker pull` fails there the same way)")
    if has(_TLS_UNKNOWN_CA):
        return PullProblem("registry_tls_unknown_ca",
                           f"{ref}: {registry}'s TLS certificate is signed by a CA the engine {on} does not trust ({text})",
                           f"copy the registry's CA certificate to /etc/docker/certs.d/{registry}/ca.crt {on} "
                           "(read at every pull: no restart)")
    if has(_PLAIN_HTTP):
        return PullProblem("registry_plain_http",
                           f"{ref}: {registry} speaks plain HTTP and the engine {on} insists on HTTPS ({text})",
                           f'add "insecure-registries": ["{registry}"] to {daemon_json} and restart docker there '
                           "(or give the registry a TLS certificate)")
    if has(_TLS_OTHER):
        return PullProblem("registry_tls", f"{ref}: TLS with {registry} failed {on} ({text})",
                           f"give {registry} a certificate valid for that name (the name in container.image), "
                           f"or put its CA at /etc/docker/certs.d/{registry}/ca.crt {on}")
    if has(_RATE):
        return PullProblem("registry_rate_limited", f"{ref}: {registry} is rate-limiting pulls from {ctx.host} ({text})",
                           "wait and rerun; pull with a login (limits are higher: " + _login_fix(registry, ctx)
                           + f"), or serve the image from your own registry or a mirror (registry-mirrors in {daemon_json})")
    if has(_NO_CREDS) or (has(_UNAUTHORIZED) and not ctx.sent_credentials):
        return PullProblem("registry_no_credentials",
                           f"{ref}: {registry} wants a login and {ctx.host} sent none ({text})", _login_fix(registry, ctx))
    if has(_UNAUTHORIZED):
        return PullProblem("registry_wrong_credentials",
                           f"{ref}: {registry} refused the credentials from {ctx.source or 'the login'} ({text})",
                           _login_fix(registry, ctx) + "; if the login itself works, that account may not pull this "
                           "repository: grant it pull rights")
    if has(_DENIED):
        return PullProblem("registry_denied",
                           f"{ref}: {registry} denied access (no such repository, or "
                           f"{'this login' if ctx.sent_credentials else 'an anonymous pull'} may not read it) ({text})",
                           "check container.image's repository name; if it is right, " + _login_fix(registry, ctx))
    if has(_UNREACHABLE):
        if registry == "docker.io" and ctx.mirrors:
            return PullProblem("registry_mirror_unreachable",
                               f"{ref}: neither the registry mirror ({', '.join(ctx.mirrors)}) nor Docker Hub "
                               f"answered {ctx.host} ({text})",
                               f"fix or remove registry-mirrors in {daemon_json} and restart docker; check "
                               f"`curl -v {ctx.mirrors[0].rstrip('/')}/v2/` {on}")
        return PullProblem("registry_unreachable", f"{ref}: registry {registry} is not reachable from {ctx.host} ({text})",
                           f"check that the registry runs and that {ctx.host} reaches it: `curl -v https://{registry}/v2/` "
                           "there (DNS, route, firewall, an HTTP proxy in dockerd's environment); or `docker load` the "
                           "image on every node and set container.pull: never")
    if has(_NOT_FOUND):
        return PullProblem("image_not_found", f"{ref}: {registry} has no such image ({text})",
                           "check container.image (repository and tag) against the registry's tags, or push the image")
    return PullProblem("image_pull_failed", f"{ref}: {text or 'the engine gave no reason'}",
                       f"run `docker pull {ref}` {on} as {ctx.user} to see the engine's whole answer")
