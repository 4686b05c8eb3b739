"""The inventory's `scheduler:` section (issue #20): the job runs on a Slurm allocation.

    scheduler: {type: slurm, partition: gpu, nodes: 2, time: "02:00:00", account: proj,
                gpus_per_node: 8, extra_args: [--qos=high]}

Every key but `type` may be left out, and Slurm's default applies (its default partition,
one node, the partition's default time limit). Options that clusterctl sets from these keys
or needs for itself are refused in `extra_args`, naming the key to use instead: given twice,
which one Slurm takes depends on the command, and a run would not be what its plan says.
"""
from __future__ import annotations

import re
from typing import Any, Optional

from clusterctl.inventory.values import Doc, expect_choice, expect_int, expect_text, expect_text_list
from clusterctl.models import SchedulerSpec
from clusterctl.inventory import timelimit

SCHEDULER_KEYS = ("type", "partition", "nodes", "time", "account", "gpus_per_node", "extra_args")
SCHEDULER_TYPES = ("slurm",)
# Slurm names: partitions and accounts are words, no spaces or shell characters.
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# option (as written before `=`) -> the key that says it, or why clusterctl owns it
_OWNED = {
    "-p": "partition", "--partition": "partition", "-N": "nodes", "--nodes": "nodes", "-t": "time",
    "--time": "time", "-A": "account", "--account": "account", "--gpus-per-node": "gpus_per_node",
    "-J": None, "--job-name": None, "-n": None, "--ntasks": None, "--ntasks-per-node": None,
    "-w": None, "--nodelist": None, "-o": None, "--output": None, "-e": None, "--error": None,
    "--container-image": None,
}


def scheduler_spec(doc: Doc, data: Any) -> Optional[SchedulerSpec]:
    if data is None:
        return None
    path = ("scheduler",)
    spec = doc.mapping(data, path, SCHEDULER_KEYS)
    if spec.get("type") is None:
        doc.fail(path + ("type",), "scheduler has no type", "add type: slurm")
    return SchedulerSpec(
        type=doc.value(spec, "type", path, lambda d, v, p: expect_choice(d, v, p, SCHEDULER_TYPES)),
        partition=doc.value(spec, "partition", path, _slurm_name),
        nodes=doc.value(spec, "nodes", path, expect_int),
        time=doc.value(spec, "time", path, _time),
        account=doc.value(spec, "account", path, _slurm_name),
        gpus_per_node=doc.value(spec, "gpus_per_node", path, expect_int),
        extra_args=doc.value(spec, "extra_args", path, _extra_args, ()),
    )


def _slurm_name(doc: Doc, value: Any, path: tuple) -> str:
    text = expect_text(doc, value, path)
    if not _NAME_RE.fullmatch(text):
        doc.fail(path, f"{path[-1]} '{text}' is not a Slurm name (letters, digits, _ . -)",
                 f"write the name as `sinfo`/`sacctmgr` show it, e.g. {path[-1]}: gpu")
    return text


def _time(doc: Doc, value: Any, path: tuple) -> str:
    fix = 'write time: "HH:MM:SS" in quotes, e.g. time: "02:00:00" (or "D-HH:MM:SS")'
    if isinstance(value, int) and not isinstance(value, bool):
        # YAML 1.1 reads an unquoted 02:00:00 as a sexagesimal number (7200)
        doc.fail(path, f"time {value} is a number (YAML reads an unquoted 1:30:00 as seconds)", fix)
    text = expect_text(doc, value, path)
    try:
        secs = timelimit.seconds(text)
    except timelimit.TimeLimitError as exc:
        doc.fail(path, f"time '{text}' is not a Slurm time limit ({exc})", fix)
    if secs == 0:
        doc.fail(path, "time is 0: the job would be ended as soon as it starts", fix)
    return text.strip()


def _extra_args(doc: Doc, value: Any, path: tuple) -> tuple[str, ...]:
    items = expect_text_list(doc, value, path)
    for index, item in enumerate(items):
        if not item.startswith("-"):
            doc.fail(path + (index,), f"extra_args item '{item}' is not an option",
                     "write each option as one item, with its value after =, e.g. extra_args: [--qos=high]")
        option = item.split("=", 1)[0]
        if not option.startswith("--"):
            option = option[:2]  # -N2, -pgpu: a short option glued to its value
        if option in _OWNED:
            key = _OWNED[option]
            fix = (f"write scheduler.{key} instead" if key else
                   "remove it: clusterctl sets it from the plan (one task per node, the job's name and output)")
            doc.fail(path + (index,), f"extra_args sets {option}, which clusterctl sets itself", fix)
    return items
