"""The keys of `job:` that make a run heal itself (issue 35; clusterctl/ground/healing.py has the table):

    job:
      nodes: 3              # hosts a run uses (the first 3); the inventory's other hosts are spares
      restarts: 2           # relaunches after a failure a relaunch can cure (default 0: fail fast)
      min_nodes: 2          # without a spare, go on with fewer nodes, down to this (planned again)
      checkpoint: {dir: /data/ckpt, complete: COMPLETE}   # the latest complete one -> {checkpoint}
      # with node-local disks: replicas: 1 (each node's new complete step copied to 1 peer), keep: 2,
      # bandwidth: 200m (bytes a second; default a quarter of the link)
      heal: {killed_by_signal: job, nccl_timeout_slow_rank: node}   # override a cause's response
      lost_after: 15        # a detached run: seconds without a node's keeper report before it is lost
"""
from __future__ import annotations

from typing import Any

from clusterctl.inventory.values import (Doc, describe, did_you_mean, expect_int, expect_number, expect_remote_dir,
                                         expect_size, expect_text, parse_size)
from clusterctl.ground.healing import RESPONSES, TABLE
from clusterctl.models import CheckpointSpec, HealingSpec

HEALING_KEYS = ("nodes", "restarts", "min_nodes", "checkpoint", "heal", "lost_after")
LOST_AFTER_MIN_S = 3.0  # a keeper reports every second: a shorter window would lose nodes that are only busy
CHECKPOINT_KEYS = ("dir", "complete", "replicas", "keep", "bandwidth")
REQUIRED_CHECKPOINT_KEYS = ("dir", "complete")


def healing_settings(doc: Doc, spec: dict, path: tuple, host_count: int) -> HealingSpec:
    """`spec`: the job: mapping; `host_count`: the inventory's hosts (0 where a scheduler grants them)."""
    nodes = doc.value(spec, "nodes", path, expect_int)
    if nodes is not None and host_count and nodes > host_count:
        doc.fail(path + ("nodes",), f"job.nodes is {nodes} but the inventory lists {host_count} host(s)",
                 f"use at most {host_count}, or add hosts")
    min_nodes = doc.value(spec, "min_nodes", path, expect_int)
    most = nodes or host_count
    if min_nodes is not None and most and min_nodes > most:
        doc.fail(path + ("min_nodes",), f"job.min_nodes is {min_nodes}, more than the {most} node(s) a run uses",
                 f"use at most {most}")
    checkpoint = doc.value(spec, "checkpoint", path, _expect_checkpoint)
    if checkpoint and checkpoint.replicas and most and checkpoint.replicas >= most:
        doc.fail(path + ("checkpoint", "replicas"), f"job.checkpoint.replicas is {checkpoint.replicas}, but a run "
                 f"uses {most} node(s): each node's steps go to that many OTHER nodes", f"use at most {most - 1}")
    return HealingSpec(nodes=nodes, restarts=doc.value(spec, "restarts", path, _expect_restarts, 0),
                       min_nodes=min_nodes, checkpoint=checkpoint,
                       heal=doc.value(spec, "heal", path, _expect_heal, ()),
                       lost_after=doc.value(spec, "lost_after", path, _expect_lost_after, HealingSpec().lost_after))


def _expect_lost_after(doc: Doc, value: Any, path: tuple) -> float:
    return expect_number(doc, value, path, low=LOST_AFTER_MIN_S, strict=False)


def _expect_restarts(doc: Doc, value: Any, path: tuple) -> int:
    return expect_int(doc, value, path, low=0, high=100)


def _expect_checkpoint(doc: Doc, value: Any, path: tuple) -> CheckpointSpec:
    entry = doc.mapping(value, path, CHECKPOINT_KEYS)
    for key in REQUIRED_CHECKPOINT_KEYS:
        if key not in entry:
            doc.fail(path, f"job.checkpoint needs {key}:", "write checkpoint: {dir: /data/ckpt, complete: COMPLETE} "
                     "(complete: the file, or a glob, that a finished checkpoint directory holds)")
    complete = expect_text(doc, entry["complete"], path + ("complete",))
    if "/" in complete or complete in (".", ".."):
        doc.fail(path + ("complete",), f"job.checkpoint.complete is a name inside a checkpoint's directory, "
                 f"got {complete!r}", "write the marker file's name (COMPLETE) or a glob (*.done)")
    replicas = expect_int(doc, entry["replicas"], path + ("replicas",), low=0, high=8) if "replicas" in entry else 0
    keep = expect_int(doc, entry["keep"], path + ("keep",), low=1, high=100) if "keep" in entry else 2
    bandwidth = _bandwidth(doc, entry["bandwidth"], path + ("bandwidth",)) if "bandwidth" in entry else None
    return CheckpointSpec(dir=expect_remote_dir(doc, entry["dir"], path + ("dir",)), complete=complete,
                          replicas=replicas, keep=keep, bandwidth=bandwidth)


def _bandwidth(doc: Doc, value: Any, path: tuple) -> int:
    """job.checkpoint.bandwidth: a size a second (200m, 1g/s), in bytes a second."""
    text = str(value).strip()
    text = text[:-2] if text.endswith("/s") else text
    expect_size(doc, text if isinstance(value, str) else value, path)
    return parse_size(text)


def _expect_heal(doc: Doc, value: Any, path: tuple) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not value:
        doc.fail(path, f"job.heal must map causes to node, job or transient, got {describe(value)}",
                 "write heal: {killed_by_signal: job}")
    rows = []
    for cause, response in value.items():
        where = path + (cause,)
        if cause not in TABLE:
            doc.fail(where, f"unknown cause '{cause}'{did_you_mean(str(cause), tuple(TABLE))}",
                     "use a cause of the README's table (`clusterctl diagnose` names them)")
        if response not in RESPONSES:
            doc.fail(where, f"job.heal.{cause} must be node, job or transient, got {describe(response)}",
                     f"write {cause}: node (leave the node out), job (end the run) or transient (relaunch as is)")
        rows.append((cause, response))
    return tuple(rows)
