"""MPI/DeepSpeed hostfiles (`host slots=N`) -> clusterctl inventory data."""
from __future__ import annotations

from typing import Any

from clusterctl.inventory.formats import fail
from clusterctl.inventory.values import did_you_mean
from clusterctl.inventory.yamlsource import Locator

_HOSTFILE_KEYS = ("slots", "max_slots", "max-slots")


def parse_hostfile(text: str, source_name: str) -> tuple[dict, Locator]:
    """An MPI/DeepSpeed hostfile (`host slots=N`, `host:N`, comments) -> (data, Locator)."""
    locator = Locator(source_name)
    hosts: list[dict] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        name, _, colon_slots = words[0].partition(":")
        where = f"{source_name}:{number} {name}"
        if name in seen:
            fail(where, f"host '{name}' is listed twice (lines {seen[name]} and {number})",
                  "list each host once and give its total slots=N")
        seen[name] = number
        entry: dict[str, Any] = {"name": name, "address": name}
        path = ("hosts", len(hosts))
        for key in ("", "name", "address"):
            locator.record(path + ((key,) if key else ()), number, label=name)
        if colon_slots:
            entry["slots"] = int(colon_slots) if colon_slots.isdigit() else colon_slots
            locator.record(path + ("slots",), number, label=f"{name} slots")
        for word in words[1:]:
            key, eq, value = word.partition("=")
            if not eq or key not in _HOSTFILE_KEYS:
                fail(f"{where} {key}", f"unknown hostfile entry '{word}'{did_you_mean(key, _HOSTFILE_KEYS)}",
                      "write `hostname slots=N` (optionally max_slots=M), one host per line")
            if key == "slots":
                entry["slots"] = int(value) if value.isdigit() else value
                locator.record(path + ("slots",), number, label=f"{name} slots")
        hosts.append(entry)
    if not hosts:
        fail(f"{source_name}:1", "the hostfile lists no hosts", "write one `hostname slots=N` line per node")
    locator.record(("hosts",), 1, label="hosts")
    return {"hosts": hosts}, locator
