"""Registry credentials as `docker pull` finds them, from a Docker config.json and its helpers.

The Docker CLI resolves credentials on the client side and hands them to the engine inside
the pull request (the X-Registry-Auth header); the engine keeps nothing. clusterctl pulls
through the engine API too, so it does the CLI's part itself, with the same rules
(docker/cli's configfile and credentials packages):

1. `credHelpers[<registry>]` names a helper for that registry, else `credsStore` one for all;
   the helper is `docker-credential-<name> get`, fed the server address on stdin, which prints
   `{"ServerURL", "Username", "Secret"}` (a Username of `<token>` means an identity token), or
   `credentials not found` (no login: an anonymous pull).
2. Otherwise `auths[<registry>]`: `auth` is base64 `user:password`, `identitytoken` a token;
   keys written as URLs (`https://host/v1/`) match by their host.
Docker Hub's key is `https://index.docker.io/v1/`.

Where the config and the helper are read is the caller's: on the node over SSH as ssh.user
(the node's own login), or on this controller (`registry_auth: {from: docker-config}`).
Nothing here writes a file, and a secret is never part of an argv or of a message.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from clusterctl.models import Command, CommandResult

INDEX_SERVER = "https://index.docker.io/v1/"
TOKEN_USER = "<token>"  # the helper protocol's username for an identity token
# $DOCKER_CONFIG as the CLI reads it; `cat` of a missing file is no config (anonymous)
CONFIG_COMMAND = Command(("sh", "-c", 'cat -- "${DOCKER_CONFIG:-$HOME/.docker}/config.json"'), timeout=30)
CONFIG_NAME = "~/.docker/config.json"
HELPER_TIMEOUT_S = 60.0  # a helper that waits for a passphrase (pass, gpg-agent) must not hang `up`

# (exit code, stdout, stderr) of `docker-credential-<name> get` with the server on stdin
HelperRunner = Callable[[str, str], CommandResult]


@dataclass(frozen=True)
class Credentials:
    """What a pull authenticates with. `secret` is a password or an identity token; it is kept out
    of repr (and so out of tracebacks and logs)."""

    username: str = ""
    secret: str = field(default="", repr=False)
    identity_token: bool = False
    source: str = "none"  # where they came from, for messages: never the secret

    @property
    def present(self) -> bool:
        return bool(self.secret)

    def auth_config(self, server: str) -> dict:
        """docker-py's auth_config. {} for an anonymous pull: None would make docker-py send this
        controller's own Docker login instead (the bug that made node logins useless)."""
        if not self.secret:
            return {}
        if self.identity_token:
            return {"identitytoken": self.secret, "serveraddress": server}
        return {"username": self.username, "password": self.secret, "serveraddress": server}


NO_CREDENTIALS = Credentials()


@dataclass(frozen=True)
class Resolved:
    """The credentials for one registry, or why none could be had (`problem`: the helper is
    missing or failed; `docker pull` on that machine fails the same way)."""

    credentials: Credentials = NO_CREDENTIALS
    problem: str = ""
    helper: str = ""  # the helper's name, when one was asked


@dataclass(frozen=True)
class ConfigLookup:
    """What a config.json says for one registry: ask `helper`, or use `inline` (maybe none)."""

    helper: str = ""
    inline: Credentials = NO_CREDENTIALS
    note: str = ""  # the config could not be read as JSON: said, and the pull is anonymous


def auth_key(registry: str) -> str:
    """The config.json key (and helper server address) of a registry."""
    return INDEX_SERVER if registry in ("docker.io", "index.docker.io", "registry-1.docker.io") else registry


def _hostname(key: str) -> str:
    """docker/cli ConvertToHostname: `https://host:5000/v1/` -> `host:5000`."""
    for scheme in ("http://", "https://"):
        key = key.removeprefix(scheme)
    return key.split("/", 1)[0]


def lookup(config_text: str, registry: str, where: str = CONFIG_NAME) -> ConfigLookup:
    """Which helper to ask, or which stored login to use, for `registry`; never raises."""
    if not config_text.strip():
        return ConfigLookup()
    try:
        config = json.loads(config_text)
    except (ValueError, RecursionError):
        return ConfigLookup(note=f"{where} is not valid JSON (docker ignores it too)")
    if not isinstance(config, dict):
        return ConfigLookup(note=f"{where} is not a JSON object")
    key = auth_key(registry)
    helpers = config.get("credHelpers")
    if isinstance(helpers, dict) and isinstance(helpers.get(key), str) and helpers[key]:
        return ConfigLookup(helper=helpers[key])
    store = config.get("credsStore")
    if isinstance(store, str) and store:
        return ConfigLookup(helper=store)
    auths = config.get("auths")
    if not isinstance(auths, dict):
        return ConfigLookup()
    entry = auths.get(key)
    if entry is None:
        entry = next((v for k, v in auths.items() if isinstance(k, str) and _hostname(k) == key), None)
    return ConfigLookup(inline=_stored_login(entry, f"auths in {where}"))


def _stored_login(entry, source: str) -> Credentials:
    if not isinstance(entry, dict):
        return NO_CREDENTIALS
    username, password = entry.get("username") or "", entry.get("password") or ""
    encoded = entry.get("auth")
    if isinstance(encoded, str) and encoded:
        try:
            username, _, password = base64.b64decode(encoded, validate=False).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return NO_CREDENTIALS
    token = entry.get("identitytoken")
    if isinstance(token, str) and token:
        return Credentials(str(username), token, identity_token=True, source=source)
    if isinstance(username, str) and isinstance(password, str) and password:
        return Credentials(username, password, source=source)
    return NO_CREDENTIALS


def helper_argv(name: str) -> tuple[str, ...]:
    return (f"docker-credential-{name}", "get")


def helper_answer(name: str, result: CommandResult, where: str) -> Resolved:
    """A helper's reply to `get` -> credentials, none (not logged in) or the problem. The reply's
    text is quoted only when it is not a credential (a failure's message)."""
    program = f"docker-credential-{name}"
    said = (result.stdout.strip() or result.stderr.strip()).splitlines()
    first = said[0][:200] if said else ""
    if result.timed_out:
        return Resolved(problem=f"{program} get did not answer within {HELPER_TIMEOUT_S:g} s {where} "
                                "(is it waiting for a passphrase or a GPG agent?)", helper=name)
    if result.exit_code == 0:
        try:
            reply = json.loads(result.stdout)
        except (ValueError, RecursionError):
            reply = None
        if not isinstance(reply, dict):
            return Resolved(problem=f"{program} get printed something other than JSON {where}", helper=name)
        username, secret = str(reply.get("Username") or ""), str(reply.get("Secret") or "")
        if not secret:
            return Resolved(helper=name)
        source = f"credential helper {program} {where}"
        if username == TOKEN_USER:
            return Resolved(Credentials("", secret, identity_token=True, source=source), helper=name)
        return Resolved(Credentials(username, secret, source=source), helper=name)
    if "credentials not found" in (result.stdout + result.stderr).lower():
        return Resolved(helper=name)  # not logged in: docker pulls anonymously
    if result.exit_code == 127 or ("not found" in first.lower() and program in first):
        return Resolved(problem=f"error getting credentials: {program} is not on PATH {where} "
                                f"(config.json names it as credsStore/credHelpers)", helper=name)
    return Resolved(problem=f"error getting credentials: {program} get exited {result.exit_code} {where}"
                            + (f": {first}" if first else ""), helper=name)


def resolve(config_text: str, registry: str, run_helper: HelperRunner, where: str,
            config_name: str = CONFIG_NAME) -> Resolved:
    """Docker's whole lookup for `registry` over a config.json's text and a way to run helpers."""
    found = lookup(config_text, registry, f"{config_name} {where}")
    if found.helper:
        return helper_answer(found.helper, run_helper(found.helper, auth_key(registry)), where)
    return Resolved(found.inline)


# --------------------------------------------------------------------------- where they are read


def on_node(transport, registry: str, where: str) -> Resolved:
    """The ssh.user's login on a node: its config.json and helpers, run as that user over SSH.
    Through `transport.run` directly: the executor's step logs never see a helper's reply."""
    config = transport.run(CONFIG_COMMAND)

    def run_helper(name: str, server: str) -> CommandResult:
        return transport.run(Command(helper_argv(name), stdin=server.encode(), timeout=HELPER_TIMEOUT_S))

    return resolve(config.stdout if config.ok else "", registry, run_helper, where)


def controller_config_path() -> str:
    return os.path.join(os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker"), "config.json")


def on_controller(registry: str) -> Resolved:
    """This controller's login (`registry_auth: {from: docker-config}`)."""
    path = controller_config_path()
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        text = ""

    def run_helper(name: str, server: str) -> CommandResult:
        try:
            done = subprocess.run(list(helper_argv(name)), input=server, capture_output=True, text=True, check=False,
                                  timeout=HELPER_TIMEOUT_S)
        except FileNotFoundError:
            return CommandResult(127, "", f"docker-credential-{name}: not found")
        except subprocess.TimeoutExpired:
            return CommandResult(None, timed_out=True)
        return CommandResult(done.returncode, done.stdout, done.stderr)

    return resolve(text, registry, run_helper, "on this controller", config_name=path)


def from_password(username: str, password_env: str) -> Resolved:
    """`registry_auth: {username, password_env}`: the password from this controller's environment."""
    secret = os.environ.get(password_env, "")
    if not secret:
        return Resolved(problem=f"${password_env} is not set on this controller "
                                "(container.registry_auth.password_env names it)")
    return Resolved(Credentials(username, secret, source=f"container.registry_auth (username {username}, "
                                                         f"password from ${password_env})"))
