"""The container: image pull, the `--net=host` GPU container, idempotence, removal.

Talks to each node's engine through the Docker SDK over the host's SSH connection
(`transport.docker()`). The container's wanted configuration is computed purely from the
inventory (`wanted_config`), hashed into a label, and compared on every `up`: same hash
and running -> nothing to do; different -> recreate and say which keys changed.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from typing import Any, Optional

from clusterctl.documents.convert import plain
from clusterctl.documents.parts import ImagePulled
from clusterctl.models import Command, ContainerSpec, Host, HostResult, HostStatus, Inventory, Skip
from clusterctl.modules.catalog import module
from clusterctl.registry.docker_replies import (LABEL_CONFIG, api_message, memlock_limit, pull_failure, pull_status,
                                                stored_config)
from clusterctl.registry.pull_errors import failure_line
from clusterctl.registry.peers import peers_apply
from clusterctl.registry.pulling import local_image
from clusterctl.transport.docker_engine import EngineError, EngineNotFound, device_request, translated, ulimit

LABEL_MANAGED = "clusterctl.managed"
LABEL_CLUSTER = "clusterctl.cluster"
LABEL_HASH = "clusterctl.config-hash"
STACK_BYTES = 64 * 1024 * 1024  # NCCL's recommended stack ulimit
NO_CONTAINER = Skip("no container: ranks run on the host")
NO_GPU_RUNTIME_MARKERS = ("could not select device driver", "nvidia-container-cli", "unknown runtime specified nvidia")


def split_image(ref: str) -> tuple[str, str]:
    """'host:5000/a/b:tag' -> ('host:5000/a/b', 'tag'); digests and missing tags handled."""
    if "@" in ref:
        return ref.split("@", 1)[0], ref.split("@", 1)[1]
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        return ref.rsplit(":", 1)[0], ref.rsplit(":", 1)[1]
    return ref, "latest"


def gpu_request(gpus: Any) -> Optional[dict]:
    """inventory gpus -> a DeviceRequest as a plain dict (None for no GPUs)."""
    if gpus in (None, "none", 0):
        return None
    if gpus == "all":
        return {"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]]}
    if isinstance(gpus, int):
        return {"Driver": "", "Count": gpus, "DeviceIDs": None, "Capabilities": [["gpu"]]}
    return {"Driver": "", "Count": 0, "DeviceIDs": [str(g) for g in gpus], "Capabilities": [["gpu"]]}


def wanted_config(inventory: Inventory, host: Host, has_infiniband: bool, memlock: int = -1) -> dict:
    """Everything that defines the container, as JSON-able data (secret values hashed)."""
    spec: ContainerSpec = inventory.container
    gpus = host.gpus if host.gpus is not None else spec.gpus
    env = {e.name: e for e in (*spec.env, *host.env)}
    return {
        "image": spec.image,
        "name": spec.name,
        "command": list(spec.command),
        "network_mode": "host",
        "gpus": gpu_request(gpus),
        "shm_size": None if spec.ipc == "host" else spec.shm_size,
        "ipc_mode": spec.ipc,
        "volumes": sorted(spec.volumes),
        "env": {k: _fingerprint(v.value, f"{inventory.name}/{k}", slow=v.is_secret) for k, v in sorted(env.items())},
        "ulimits": {"memlock": memlock, "stack": STACK_BYTES},
        "infiniband": has_infiniband,
    }


def config_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def changed_keys(old: dict, new: dict) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def _fingerprint(value: str, salt: str, slow: bool = False) -> str:
    """Change detection without storing values. Secret values go through scrypt (salted by
    cluster and name): the label is visible in `docker inspect`, so a fast hash of a weak
    secret could be brute-forced."""
    if slow:
        return "scrypt:" + hashlib.scrypt(value.encode(), salt=salt.encode(), n=1 << 14, r=8, p=1, dklen=12).hex()
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:12]


def create_kwargs(inventory: Inventory, host: Host, config: dict) -> dict:
    """The docker-py `containers.create` arguments for a wanted config."""
    spec = inventory.container
    env = {e.name: e.value for e in (*spec.env, *host.env)}
    labels = {LABEL_MANAGED: "true", LABEL_CLUSTER: inventory.name, LABEL_HASH: config_hash(config),
              LABEL_CONFIG: json.dumps(config, sort_keys=True), **dict(spec.labels)}
    kwargs = dict(
        image=spec.image, command=list(spec.command), name=spec.name, detach=True, network_mode="host",
        environment=env, labels=labels, volumes=list(spec.volumes),
        ulimits=[ulimit("memlock", config["ulimits"]["memlock"], config["ulimits"]["memlock"]),
                 ulimit("stack", STACK_BYTES, STACK_BYTES)],
    )
    if config["gpus"]:
        request = config["gpus"]
        kwargs["device_requests"] = [device_request(request["Count"], request["DeviceIDs"], request["Capabilities"])]
    if spec.ipc == "host":
        kwargs["ipc_mode"] = "host"
    elif spec.shm_size:
        kwargs["shm_size"] = spec.shm_size
    if config["infiniband"]:
        kwargs["devices"] = ["/dev/infiniband:/dev/infiniband"]
        kwargs["cap_add"] = ["IPC_LOCK"]
    return kwargs


# --------------------------------------------------------------------------- modules


@module("docker.pull_check", cluster_scope=True)
def pull_check(ctx):
    """Before anything is stopped: every node asks the registry, through its engine and with the
    credentials it will pull with, for the image's manifest. One node that cannot pull fails
    every node here, so `up` ends before any container is replaced (a half-updated cluster
    runs mixed images, or nothing)."""
    from clusterctl.executor import for_each_host
    from clusterctl.registry.pulling import ask_registry

    if not ctx.inventory.uses_container:
        return {h.name: HostResult(h.name, HostStatus.SKIPPED, NO_CONTAINER.reason) for h in ctx.hosts}
    ask = engine_action(lambda t, h: _as_result(ask_registry(ctx.inventory, t, h)))
    results = for_each_host(list(ctx.hosts), ask, ctx.connections)
    # an unreachable node, or one whose engine does not answer, leaves the play as in every task
    # (it runs no container to replace); a node whose registry answer says it cannot pull stops them all
    failing = [name for name, r in results.items()
               if r.status is HostStatus.FAILED and (r.data or {}).get("engine") != "unreachable"]
    if not failing:
        return results
    stopped = (f"stopped before changing anything: {', '.join(sorted(failing))} cannot pull "
               f"{ctx.inventory.container.image} (see {'its' if len(failing) == 1 else 'their'} image_pull check)")
    return {name: HostResult(name, HostStatus.FAILED, stopped, data=r.data) if r.succeeded else r
            for name, r in results.items()}


def _as_result(check) -> HostResult:
    from clusterctl.models import CheckStatus

    if isinstance(check, HostResult):  # the host was unreachable
        return check
    data = {"checks": [check.to_json()]}
    if check.status is CheckStatus.FAIL:
        return HostResult(check.host, HostStatus.FAILED, f"image_pull: {check.detail}. fix: {check.fix}", data=data)
    return HostResult(check.host, HostStatus.OK, check.detail if check.status is CheckStatus.WARN else "", data=data)


@module("docker.distribute", cluster_scope=True)
def distribute(ctx):
    """`container.distribute: peers` (`auto`: from 4 nodes up): one node has or pulls the image, the
    others get it from nodes that have it, node to node (registry/peers.py says how and why). Else,
    and without a container: nothing here (docker.pull pulls on every node)."""
    from clusterctl.registry import peers

    hosts = list(ctx.hosts)
    if not peers.peers_apply(ctx.inventory, len(ctx.inventory.hosts)) or ctx.inventory.container.pull == "never":
        # no detail: a skipped step must not hide what an earlier one said of the node (a stale rank killed)
        return {h.name: HostResult(h.name, HostStatus.SKIPPED, "") for h in hosts}
    return peers.distribute(hosts, ctx.inventory, ctx.connections, pull(ctx), ctx.on_event)


@module("docker.pull")
def pull(ctx):
    """Pull the image unless present (container.pull: missing), with per-node progress events,
    with the credentials container.registry_auth names (the node's own login by default)."""
    if not ctx.inventory.uses_container:
        return NO_CONTAINER
    spec = ctx.inventory.container
    on_event = ctx.vars.get("on_event")

    def action(transport, host) -> HostResult:
        from clusterctl.registry import pulling

        client = transport.docker()
        changed, resolved = False, None
        try:
            with translated():
                # with peers, `always` was done by docker.distribute (the seed pulled, the others got its image)
                fresh = spec.pull == "always" and not peers_apply(ctx.inventory, len(ctx.inventory.hosts))
                image = None if fresh else local_image(client, spec.image)
                if image is None and spec.pull != "never":
                    resolved = pulling.resolve_for(ctx.inventory, transport, host)
                    if resolved.problem:
                        problem = pulling.credentials_problem(ctx.inventory, host, resolved)
                        return HostResult(host.name, HostStatus.FAILED, failure_line(spec.image, problem),
                                          data={"image": spec.image, "cause": problem.cause})
                    started = time.monotonic()
                    _pull_with_progress(client, spec.image, host.name, on_event, pulling.auth_config(resolved, spec.image))
                    changed, pulled_s = True, time.monotonic() - started
                    image = client.images.get(spec.image)
                if image is None:
                    return HostResult(host.name, HostStatus.FAILED, f"image {spec.image} is not on the node and container.pull is never")
        except EngineError as exc:
            context = pulling.context(ctx.inventory, host, resolved or pulling.credentials.Resolved(),
                                      pulling.mirrors_of(client))
            return HostResult(host.name, HostStatus.FAILED, pull_failure(spec.image, api_message(exc), context),
                              data={"image": spec.image})
        data = {"image": spec.image, "image_id": image.id, "repo_digests": image.attrs.get("RepoDigests", [])}
        if resolved is not None:
            data["credentials"] = resolved.credentials.source  # where from, never what
        if changed:  # where its layers came from (docker.distribute says it for the nodes it served)
            data["distribute"] = plain(ImagePulled("registry", image.id, image.attrs.get("Size"), round(pulled_s, 2)))
        detail = f"pulled {spec.image}" if changed else ""
        return HostResult(host.name, HostStatus.CHANGED if changed else HostStatus.OK, detail, data=data)

    return engine_action(action)


def engine_action(action):
    """Wrap a HostAction that talks to the engine: an engine that does not answer (dockerd stopped,
    socket missing) is a failure that says so, with the fix; a lost SSH connection is left to the
    executor, which reports the host unreachable."""

    def run(transport, host) -> HostResult:
        import requests

        try:
            return action(transport, host)
        except requests.exceptions.ConnectionError as exc:
            if not getattr(transport, "alive", True):
                raise
            probe = transport.run(Command(("docker", "version", "--format", "{{.Server.Version}}"), timeout=20))
            said = (probe.stderr.strip() or probe.stdout.strip()).splitlines()[-1:] or [str(exc)]
            return HostResult(host.name, HostStatus.FAILED,
                              f"docker engine not reachable on {host.name}: {said[0]}. fix: start it on {host.name} "
                              "(`systemctl enable --now docker`), check that `docker info` works there for ssh.user, "
                              "then rerun `clusterctl up`", data={"engine": "unreachable"})

    return run


def _pull_with_progress(client, ref: str, host_name: str, on_event, auth_config: Optional[dict] = None) -> None:
    """The engine's pull, streamed. `auth_config` travels only inside this request (X-Registry-Auth);
    {} is an anonymous pull (None would let docker-py send this controller's own login)."""
    from clusterctl.executor import Event

    repository, tag = split_image(ref)
    layers: dict[str, tuple[int, int]] = {}
    stream = client.api.pull(repository, tag=tag, stream=True, decode=True,
                             auth_config={} if auth_config is None else auth_config)
    for status in stream:
        error = pull_status(status, layers)
        if error is not None:
            raise EngineError(error)
        if on_event and layers:
            done, total = sum(c for c, _ in layers.values()), sum(t for _, t in layers.values())
            on_event(Event("progress", host_name, data={"key": f"pull:{host_name}", "description": f"pull {host_name}",
                                                        "completed": done, "total": total}))


@module("docker.same_image")
def same_image(ctx):
    """Fail the nodes whose image id differs from the majority's (same tag, different content)."""
    if not ctx.inventory.uses_container:
        return NO_CONTAINER
    report = ctx.vars.get("report")
    ids = {name: r.data.get("image_id") for name, r in (report.hosts.items() if report else []) if r.data.get("image_id")}
    if not ids:
        return HostResult(ctx.host.name, HostStatus.SKIPPED, "no image facts")
    counts: dict[str, int] = {}
    for image_id in ids.values():
        counts[image_id] = counts.get(image_id, 0) + 1
    majority = max(counts, key=lambda i: (counts[i], ids[ctx.inventory.master.name] == i if ctx.inventory.master.name in ids else False))
    mine = ids.get(ctx.host.name)
    if mine is None or mine == majority:
        return HostResult(ctx.host.name, HostStatus.OK)
    holders = ", ".join(n for n, i in ids.items() if i == majority)
    return HostResult(
        ctx.host.name, HostStatus.FAILED,
        f"image {ctx.inventory.container.image} differs on this node: {mine} here, {majority} on {holders}. "
        "fix: set container.pull: always (or `docker pull` it on this node) so every node runs the same image",
        data={"image_id": mine, "expected_image_id": majority},
    )


@module("docker.container")
def container(ctx, force: bool = False):
    """Start (or keep, if already right) the --net=host container with GPUs."""
    if not ctx.inventory.uses_container:
        return NO_CONTAINER
    force = force or bool(ctx.vars.get("force"))
    inventory = ctx.inventory

    def action(transport, host) -> HostResult:
        client = transport.docker()
        node = transport.run(Command(("sh", "-c", "test -d /dev/infiniband && echo ib; ulimit -H -l"), timeout=30))
        lines = node.stdout.split()
        config = wanted_config(inventory, host, "ib" in lines, memlock_limit(lines[-1] if lines else ""))
        try:
            with translated():
                existing = _existing(client, inventory.container.name)
                if existing is not None:
                    keep = _keep_or_remove(existing, config, inventory, force, client)
                    if isinstance(keep, HostResult):
                        return replace(keep, host=host.name)
                    if keep is True:
                        return _ensure_running(existing, host)
                    reason = keep
                else:
                    reason = "created"
                return _create_and_start(client, inventory, host, config, reason)
        except EngineError as exc:
            return HostResult(host.name, HostStatus.FAILED, f"docker: {api_message(exc)}")

    return engine_action(action)


def _existing(client, name: str):
    try:
        with translated():
            return client.containers.get(name)
    except EngineNotFound:
        return None


def _keep_or_remove(existing, config: dict, inventory: Inventory, force: bool, client):
    """True to keep; a reason string after removing it; a HostResult to stop with."""
    labels = existing.labels or {}
    if labels.get(LABEL_MANAGED) != "true" or labels.get(LABEL_CLUSTER) != inventory.name:
        if not force:
            return HostResult("", HostStatus.FAILED,
                              f"a container named {existing.name} exists and was not started by clusterctl for "
                              f"cluster {inventory.name} (image {existing.attrs['Config'].get('Image')}): not touching it. "
                              "fix: rename container.name in the inventory, or rerun with --force to replace it")
        existing.remove(force=True)
        return "replaced a foreign container (--force)"
    image_now = local_image(client, config["image"])
    if labels.get(LABEL_HASH) == config_hash(config) and (image_now is None or existing.image.id == image_now.id):
        return True
    keys = changed_keys(stored_config(labels), config)
    if image_now is not None and existing.image.id != image_now.id and "image" not in keys:
        keys.append("image content")
    existing.remove(force=True)
    return "recreated: changed " + ", ".join(keys)


def _ensure_running(existing, host: Host) -> HostResult:
    if existing.status == "running":
        return HostResult(host.name, HostStatus.OK, "", data={"container_id": existing.id[:12]})
    existing.start()
    return HostResult(host.name, HostStatus.CHANGED, f"started the stopped container {existing.name}",
                      data={"container_id": existing.id[:12]})


def _create_and_start(client, inventory: Inventory, host: Host, config: dict, reason: str) -> HostResult:
    kwargs = create_kwargs(inventory, host, config)
    kwargs.pop("detach")
    created = client.containers.create(**kwargs)
    try:
        with translated():
            created.start()
    except EngineError as exc:
        message = api_message(exc)
        inspected = client.api.inspect_container(created.id)["HostConfig"]
        created.remove(force=True)  # never leave a half-created container behind
        data = {"device_requests": inspected.get("DeviceRequests"), "network_mode": inspected.get("NetworkMode")}
        if config["gpus"] and any(marker in message for marker in NO_GPU_RUNTIME_MARKERS):
            return HostResult(
                host.name, HostStatus.FAILED,
                "docker_no_gpu_runtime: the container asks for GPUs but this Docker engine has no NVIDIA runtime "
                f"({message}). fix: install nvidia-container-toolkit on {host.name} and run "
                "`nvidia-ctk runtime configure --runtime=docker && systemctl restart docker`, "
                "or set container.gpus: none (or gpus: none on this host) for CPU-only nodes",
                data={**data, "cause": "docker_no_gpu_runtime"},
            )
        return HostResult(host.name, HostStatus.FAILED, f"container failed to start: {message}", data=data)
    if config["ulimits"]["memlock"] != -1:
        reason += (f"; memlock capped at {config['ulimits']['memlock'] // 1024} KiB by the node's hard limit "
                   "(NCCL over InfiniBand wants unlimited: LimitMEMLOCK=infinity for dockerd)")
    return HostResult(host.name, HostStatus.CHANGED, reason, data={"container_id": created.id[:12]})


@module("docker.remove")
def remove(ctx):
    """Remove the cluster's container (only one clusterctl started for this cluster)."""
    if not ctx.inventory.uses_container:
        return NO_CONTAINER
    inventory, force = ctx.inventory, bool(ctx.vars.get("force"))

    def action(transport, host) -> HostResult:
        existing = _existing(transport.docker(), inventory.container.name)
        if existing is None:
            return HostResult(host.name, HostStatus.OK, "no container")
        if (existing.labels or {}).get(LABEL_CLUSTER) != inventory.name:
            return HostResult(host.name, HostStatus.SKIPPED, f"{existing.name} is not this cluster's container: left alone")
        from clusterctl.modules.process import live_runs

        live, _ = live_runs(transport, inventory, host, set(), force) if not force else ({}, [])
        if live:  # issue 48: a run of anyone still beats in it
            return HostResult(host.name, HostStatus.SKIPPED, f"container {existing.name} kept: run(s) "
                              f"{', '.join(sorted(live))} still run in it; `clusterctl down --force` removes it")
        existing.remove(force=True)
        return HostResult(host.name, HostStatus.CHANGED, f"removed container {existing.name}")

    return engine_action(action)


@module("docker.inspect")
def inspect(ctx):
    """Container state and image for `status`."""
    if not ctx.inventory.uses_container:
        return NO_CONTAINER
    inventory = ctx.inventory

    def action(transport, host) -> HostResult:
        existing = _existing(transport.docker(), inventory.container.name)
        if existing is None:
            return HostResult(host.name, HostStatus.OK, data={"container": "absent"})
        image = existing.attrs["Config"].get("Image", "")
        return HostResult(host.name, HostStatus.OK, data={"container": existing.status, "image": image,
                                                          "container_id": existing.id[:12]})

    return engine_action(action)
