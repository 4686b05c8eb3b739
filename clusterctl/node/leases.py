"""GPU leases held on the nodes (issue 48): who uses which GPU (or, on a node without GPUs, which rank
slot) of a node, said by the node itself, so that operators sharing a fleet from their own checkouts
never start on each other's GPUs nor take each other's runs for stale.

Where: `<job.outputs>/.clusterctl-leases/<host>/`, a private directory (0700, ours: a foreign owner or a
link there is refused by safe_files' `private=True`), every file in it touched through the no-follow
layer. In it:
  gpu<N> | slot<N>           one lease: JSON {run_id, operator, since, host, key, window_s, renewed_by}
  ticket.<stamp>.<run id>    a waiter (`run --wait`): JSON {run_id, operator, keys}; stamp = ns on the
                             clock of the waiter's first node, so a waiter is ordered the same everywhere
  ended.<run id>             who ended a live run by force (`up --force`, `down --force`); the newest
                             ENDED_KEEP of them, none older than ENDED_KEEP_S (pruned where they are written)
  forced.log                 one line per forced cleanup
Every change happens under an exclusive flock of the directory's own descriptor: a take is all of a
node's keys or none.

Alive is judged by this node's clock only (the controller's may differ): a lease lives while its file,
or the run's own `lease` file in its run dir (which the attached controller's poll and a detached run's
keeper already renew every few seconds: nothing new renews it), was written within `window_s` (the
run's lost-node window). A controller killed, a keeper killed -9: the run's lease file goes quiet and
the GPUs are free `window_s` later. A lease file that is not a lease (garbage) is judged by its mtime
alone and named as such. A ticket lives while its waiter rewrites it (every poll).

A lease outlives its run only where nobody could release it (the node cut off, its controller killed).
Then `take` may be told (`reap`) that its own operator's run ended by that controller's own record:
those leases go at once where this node proves the run's ranks gone (its run dir's `agent.exit`).

Run as `leases.py OP JSON` (the controller sends it with safe_files.py and layout.py: plan/leasing.py);
it prints one JSON document. Stdlib only.
"""
from __future__ import annotations

import fcntl
import json
import sys
import time

if __package__:  # imported by the controller
    from clusterctl.node import layout
    from clusterctl.node.safe_files import Dir, Refused
else:  # shipped beside it
    import layout
    from safe_files import Dir, Refused

RUNS_ON_NODES = True

LEASES = ".clusterctl-leases"  # under job.outputs
TICKET, ENDED, FORCED_LOG = "ticket.", "ended.", "forced.log"
ENDED_KEEP, ENDED_KEEP_S = 200, 30 * 86400  # forced-end records: enough for `status` to name who, bounded
FILE_LIMIT = 64 * 1024  # a lease is a few hundred bytes: more is not a lease
RENEWED_BY = "the run's lease file (its controller's poll; detached, its keepers)"


def key_names(gpus, slots):
    """The keys a node's part of a run takes: its GPUs, else (no GPU) its rank slots."""
    return [f"gpu{int(g)}" for g in gpus] if gpus else [f"slot{i}" for i in range(int(slots))]


def open_host(outputs, host, create=True):
    """The host's lease directory, proven ours (Refused: a link, a file, someone else's, open to others)."""
    return Dir.open(outputs, (LEASES, host), create=create, private=True)


def _json(where, name):
    """(document, why not) of a file here: a document that is not a JSON object is garbage."""
    try:
        document = json.loads(where.read(name, FILE_LIMIT + 1))
    except (ValueError, UnicodeDecodeError) as error:
        return None, f"not JSON ({str(error)[:80]})"
    if not isinstance(document, dict) or not isinstance(document.get("run_id"), str):
        return None, "not a lease (no run_id)"
    return document, ""


def _run_beat(outputs, run_id, host):
    """The mtime of the run's own lease file on this node (renewed by its poll or keeper), or None."""
    try:
        with Dir.open(outputs, (layout.LOGS, run_id, host)) as run_dir:
            found = run_dir.entry(layout.LEASE)
    except (OSError, Refused):
        return None
    return found.mtime if found is not None and found.kind == "file" else None


def _ranks_gone(outputs, run_id, host):
    """Whether the run's launcher ended on this node: its run dir holds `agent.exit` (plan/wrapper.py
    writes it once torchrun, or the job itself, ended: every rank of the run here is gone)."""
    try:
        with Dir.open(outputs, (layout.LOGS, run_id, host)) as run_dir:
            found = run_dir.entry(layout.AGENT_EXIT)
    except (OSError, Refused):
        return False
    return found is not None and found.kind == "file"


def read_lease(where, outputs, host, entry, now):
    """One lease as this node sees it: holder, age (seconds since the newest beat), alive."""
    if entry.kind != "file":
        raise Refused(f"{where.path}/{entry.name}", f"is a {entry.kind}, not a lease file", "remove it")
    document, why = _json(where, entry.name)
    beat = entry.mtime
    if document is None:
        document = {"run_id": "", "operator": "", "since": entry.mtime, "garbage": why}
    else:
        run_beat = _run_beat(outputs, document["run_id"], host)
        beat = max(beat, run_beat or 0.0)
    window = float(document.get("window_s") or 0) or 15.0
    age = max(0.0, now - beat)
    return {**document, "key": entry.name, "host": host, "age_s": round(age, 1), "alive": age <= window,
            "expires_in_s": round(max(0.0, window - age), 1)}


def _is_key(name):
    return (name.startswith("gpu") or name.startswith("slot")) and name[3 if name[0] == "g" else 4:].isdigit()


def snapshot(where, outputs, host, now=None):
    """Every lease, live ticket and ended record of this node (stale tickets are left to `take`)."""
    now = time.time() if now is None else now
    leases, tickets, ended = [], [], []
    for entry in where.entries(limit=10_000):
        if _is_key(entry.name):
            leases.append(read_lease(where, outputs, host, entry, now))
        elif entry.name.startswith(TICKET) and entry.kind == "file":
            ticket = _ticket(where, entry, now)
            if ticket is not None:
                tickets.append(ticket)
        elif entry.name.startswith(ENDED) and entry.kind == "file":
            document, _ = _json(where, entry.name)
            if document is not None:
                ended.append(document)
    tickets.sort(key=lambda t: (t["stamp"], t["run_id"]))
    return {"host": host, "now": now, "leases": leases, "tickets": tickets, "ended": ended}


def _ticket(where, entry, now):
    """A waiter's ticket, or None when its waiter stopped rewriting it (gone: removed here)."""
    parts = entry.name.split(".", 2)
    document, _ = _json(where, entry.name)
    window = float((document or {}).get("window_s") or 15.0)
    if len(parts) != 3 or not parts[1].isdigit() or document is None or now - entry.mtime > window:
        where.remove(entry.name)
        return None
    return {**document, "stamp": int(parts[1]), "age_s": round(now - entry.mtime, 1)}


class _Locked:
    """The host's lease directory, held exclusively (flock of its own descriptor) while open."""

    def __init__(self, outputs, host):
        self.where = open_host(outputs, host)
        fcntl.flock(self.where.fd, fcntl.LOCK_EX)

    def __enter__(self):
        return self.where

    def __exit__(self, *exc):
        self.where.close()  # closing the descriptor drops the lock


def take(outputs, host, run_id, operator, keys, window_s, stamp=None, now=None, reap=()):
    """All of `keys` for `run_id`, or none: {"taken", "held" (the live leases of others in the way),
    "ahead" (waiters queued before this one on overlapping keys), "notes"}. `stamp`: this run's ticket
    (a `--wait`), whose place in the queue it must have; without one, any waiter on these keys is ahead.
    `reap`: runs of this `operator` that its controller's record says ended: their leases are released
    where this node proves their ranks gone (a node cut off while they ended: nobody could release them)."""
    with _Locked(outputs, host) as where:
        now = time.time() if now is None else now
        seen = snapshot(where, outputs, host, now)
        notes, held = [], []
        mine = {lease["key"]: lease for lease in seen["leases"] if lease["run_id"] == run_id}
        reaped = {r for r in set(reap) - {run_id} if _ranks_gone(outputs, r, host)}
        for lease in seen["leases"]:
            if lease["key"] not in keys or lease["run_id"] == run_id:
                continue
            if lease["alive"] and lease["run_id"] in reaped and lease.get("operator") == operator:
                where.remove(lease["key"])
                notes.append(f"{host}: released {lease['key']} of run {lease['run_id']}: it ended (this controller's "
                             f"record) and its ranks are gone from this node")
            elif lease["alive"]:
                held.append(lease)
            elif lease.get("garbage"):
                notes.append(f"{host}: replaced the unreadable lease file {lease['key']} ({lease['garbage']}), "
                             f"quiet for {lease['age_s']:.0f}s")
            else:
                notes.append(f"{host}: {lease['key']} of run {lease['run_id']} ({lease.get('operator')}) expired "
                             f"{lease['age_s']:.0f}s after its last beat: taken over")
        ahead = [t for t in seen["tickets"] if t["run_id"] != run_id and set(t.get("keys") or ()) & set(keys)
                 and (stamp is None or (t["stamp"], t["run_id"]) < (int(stamp), run_id))]
        if held or ahead:
            return {"taken": [], "held": held, "ahead": ahead, "notes": notes}
        for key in keys:
            since = mine[key].get("since", now) if key in mine else now
            where.write(key, json.dumps({"run_id": run_id, "operator": operator, "since": since, "host": host,
                                         "key": key, "window_s": window_s, "renewed_by": RENEWED_BY}))
        for ticket in seen["tickets"]:
            if ticket["run_id"] == run_id:
                where.remove(f"{TICKET}{ticket['stamp']}.{run_id}")
        prune_ended(where, now)
        return {"taken": list(keys), "held": [], "ahead": [], "notes": notes}


def queue(outputs, host, run_id, operator, keys, window_s, stamp=None, now=None):
    """Join (or stay in) the queue for `keys`: the ticket's stamp (this node's clock in ns, unless the
    waiter's first node gave one), rewritten each call so that it lives while its waiter does."""
    with _Locked(outputs, host) as where:
        stamp = int(stamp) if stamp is not None else time.time_ns()
        for entry in where.entries(limit=10_000):
            if entry.name.startswith(TICKET) and entry.name.endswith("." + run_id) \
                    and entry.name != f"{TICKET}{stamp}.{run_id}":
                where.remove(entry.name)
        where.write(f"{TICKET}{stamp}.{run_id}", json.dumps({"run_id": run_id, "operator": operator,
                                                             "keys": list(keys), "window_s": window_s}))
        return {"stamp": stamp}


def release(outputs, host, run_id):
    """The leases and tickets of `run_id` here, removed: {"released": [keys]}."""
    with _Locked(outputs, host) as where:
        released = []
        for entry in where.entries(limit=10_000):
            if entry.name.startswith(TICKET) and entry.name.endswith("." + run_id):
                where.remove(entry.name)
            elif _is_key(entry.name) and entry.kind == "file":
                document, _ = _json(where, entry.name)
                if document is not None and document["run_id"] == run_id:
                    where.remove(entry.name)
                    released.append(entry.name)
        return {"released": released}


def release_run_dir(run_dir, run_id, host):
    """A detached run's keeper, as its run ends: the run's leases on its node go now (a run dir is
    `<outputs>/logs/<run id>/<host>`)."""
    outputs = run_dir.rstrip("/").rsplit("/", 3)[0]
    return release(outputs, host, run_id)


def live(outputs, host, run_ids=(), window_s=15.0, now=None):
    """Which of `run_ids` (and of the leases here) are alive on this node: {"live": {run id: holder}}.
    A run without a lease (started by an older clusterctl) is alive while its run dir's lease is fresh."""
    now = time.time() if now is None else now
    with open_host(outputs, host) as where:
        seen = snapshot(where, outputs, host, now)
    found = {}
    for lease in seen["leases"]:
        if lease["alive"] and lease["run_id"]:
            found.setdefault(lease["run_id"], {k: lease.get(k) for k in ("run_id", "operator", "since", "age_s")})
    for run_id in run_ids:
        beat = _run_beat(outputs, run_id, host) if run_id not in found and run_id else None
        if beat is not None and now - beat <= float(window_s):
            found[run_id] = {"run_id": run_id, "operator": None, "since": None, "age_s": round(now - beat, 1)}
    return {"live": found, "ended": seen["ended"]}


def forced(outputs, host, operator, how, run_ids, now=None):
    """A forced cleanup, logged here: one line in forced.log, an `ended.<run id>` record naming who ended
    each run, and those runs' leases released."""
    now = time.time() if now is None else now
    with _Locked(outputs, host) as where:
        where.append(FORCED_LOG, json.dumps({"at": now, "by": operator, "how": how, "runs": list(run_ids)}) + "\n")
        for run_id in run_ids:
            where.write(ENDED + run_id, json.dumps({"run_id": run_id, "by": operator, "at": now, "how": how}))
        prune_ended(where, now)
    for run_id in run_ids:
        release(outputs, host, run_id)
    return {"logged": list(run_ids)}


def prune_ended(where, now, keep=ENDED_KEEP, keep_s=ENDED_KEEP_S):
    """The forced-end records past `keep_s` old, and all but the newest `keep`, removed (they are written
    by every forced cleanup and read by `status`, which names who ended a run: a bounded history)."""
    records = sorted((e for e in where.entries(limit=10_000) if e.name.startswith(ENDED) and e.kind == "file"),
                     key=lambda e: e.mtime, reverse=True)
    pruned = [e.name for i, e in enumerate(records) if i >= keep or now - e.mtime > keep_s]
    for name in pruned:
        where.remove(name)
    return pruned


def take_run_dir(run_dir, run_id, host, operator, keys, window_s):
    """A keeper's take for its own node (a detached run's relaunch onto it: a spare joining), the lease
    directory found from the run dir (`<outputs>/logs/<run id>/<host>`)."""
    outputs = run_dir.rstrip("/").rsplit("/", 3)[0]
    return take(outputs, host, run_id, operator, keys, window_s)


def listing(outputs, host, now=None):
    """Everything this node holds (`status`): leases, live tickets, ended records."""
    try:
        where = open_host(outputs, host, create=False)
    except FileNotFoundError:
        return {"host": host, "now": time.time(), "leases": [], "tickets": [], "ended": []}
    with where:
        return snapshot(where, outputs, host, now)


OPS = {"take": take, "queue": queue, "release": release, "live": live, "forced": forced, "list": listing}


def main(argv):
    if len(argv) != 3 or argv[1] not in OPS:
        sys.stderr.write("usage: leases.py take|queue|release|live|forced|list JSON\n")
        return 2
    try:
        print(json.dumps({"ok": True, **OPS[argv[1]](**json.loads(argv[2]))}))
    except Refused as refused:
        print(json.dumps({"ok": False, "refused": {"path": refused.path, "why": refused.why, "fix": refused.fix}}))
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
