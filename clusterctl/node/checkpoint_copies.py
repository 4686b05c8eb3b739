"""The engine's side of checkpoint replicas (issue 50): what every keeper reported holding, the step a
relaunch resumes from, the restore it orders before any rank starts, the problems said, and where the
time of a relaunch went. Pure: the engine (node/engine.Engine) feeds it the keepers' reports and asks it.

A step is usable only when EVERY host of the failed attempt (each wrote its own shards) has a complete
copy on a host that survives: its own disk, or a replica a peer holds (`choose`); the newest usable
step wins, one that was refused on a restore (a copy whose size or checksum differs) is passed over.
Runs on the nodes: the standard library only, Python 3.8+, shipped beside node_agent.py.
"""
if __package__:  # imported by the controller
    from clusterctl.node import heal_policy
else:  # beside node_agent.py in a node's run dir
    import heal_policy

RUNS_ON_NODES = True
RESTORE_S = 600.0  # a restore that takes longer: the attempt starts without the checkpoint, said
EVENTS = 100


def choose(holdings, owners, survivors, refused=()):
    """(step, {owner: [hosts holding its files]}) of the newest step complete across the surviving copies
    for every owner, or (None, {}). `holdings`: each host's report ({"own": [steps], "held": {owner:
    [steps]}}); an owner's own copy is listed first, then the replicas."""
    candidates = {}
    for host in survivors:
        held = holdings.get(host) or {}
        for step in held.get("own") or ():
            candidates.setdefault(step, {}).setdefault(host, []).insert(0, host)
        for owner, steps in (held.get("held") or {}).items():
            for step in steps or ():
                candidates.setdefault(step, {}).setdefault(owner, []).append(host)
    for step in sorted(candidates, key=heal_policy.natural, reverse=True):
        if (heal_policy.checkpoint_name_ok(step) and step not in refused
                and all(candidates[step].get(o) for o in owners)):
            return step, {o: candidates[step][o] for o in owners}
    return None, {}


class Copies:
    """What the keepers said of their checkpoints, and the restore of one relaunch."""

    def __init__(self, spec):
        self.spec = spec or {}
        self.on = bool(self.spec.get("replicas"))
        self.holdings, self.events, self.heard = {}, [], set()
        self.order, self.started, self.refused = None, None, set()

    def heard_from(self, host, report):
        """A keeper's `checkpoints` report; the new events are returned (the attempt's record keeps them)."""
        if not isinstance(report, dict):
            return []
        self.holdings[host] = report
        new = []
        for event in report.get("events") or ():
            key = (host, event.get("seq")) if isinstance(event, dict) else None
            if key and key not in self.heard:
                self.heard.add(key)
                new.append({k: event.get(k) for k in ("at", "kind", "host", "peer", "step", "says")})
        self.events = (self.events + new)[-EVENTS:]
        return new

    def path(self, step):
        return f"{self.spec['dir'].rstrip('/')}/{step}" if step else None

    def newest(self, owners, survivors):
        """The newest step complete across the copies (for progress), as a path."""
        return self.path(choose(self.holdings, owners, survivors)[0])

    def plan(self, attempt, owners, survivors, now):
        """The restore order for attempt `attempt` ({"attempt", "step", "sources"}), or None: no step is
        complete across the survivors (the attempt starts from the beginning)."""
        step, sources = choose(self.holdings, owners, survivors, self.refused)
        self.order = {"attempt": attempt, "step": step, "sources": sources} if step else None
        self.started = now
        return self.order

    def restored(self, hosts, now):
        """("done", None) once every host of the order restored its step, ("failed", why) when one could
        not (the step is passed over next time), ("late", why) past RESTORE_S, else (None, None)."""
        order = self.order
        results = [(h, (self.holdings.get(h) or {}).get("restored") or {}) for h in hosts]
        mine = [(h, r) for h, r in results if r.get("attempt") == order["attempt"] and r.get("step") == order["step"]]
        bad = [(h, r) for h, r in mine if not r.get("ok")]
        if bad:
            self.refused.add(order["step"])
            return "failed", f"{bad[0][0]} could not restore {order['step']}: {bad[0][1].get('says')}"
        if len(mine) == len(hosts):
            return "done", None
        if now - self.started > RESTORE_S:
            return "late", f"the restore of {order['step']} took over {RESTORE_S:.0f}s"
        return None, None

    def newest_own(self, hosts):
        """{host: the newest complete step of its own it reported} (a relaunch's baseline)."""
        return {h: ((self.holdings.get(h) or {}).get("own") or [None])[-1] for h in hosts}

    def first_step(self, hosts, baseline):
        """Whether a host in use reports a newest own step other than its `baseline` one: the attempt's first."""
        return any(((self.holdings.get(h) or {}).get("own") or [None])[-1] not in (None, baseline.get(h))
                   for h in hosts)
