"""Checkpoints that outlive their node with no shared filesystem (issue 50, `job.checkpoint.replicas: N`).

Each node's keeper (node_agent.py `keep`, for a detached run's life) or, in an attached run, the copier
its ranks' wrapper starts (node_replica.py) runs a `Replicator`:
- a sender thread that copies every newly COMPLETE step of `job.checkpoint` (a directory under `dir`
  holding a file matching `complete`, by heal_policy.complete_steps' rules: never a link, a foreign
  directory or an odd name) to the N hosts in use after its own (a ring), node to node over the job
  network, at most `bandwidth` bytes/s, at a low priority: never in a step's way. Only the newest
  complete step is sent (a node that fell behind skips the ones between);
- a listener (checkpoint_wire's bounded reads, SLOTS connections, SLOTS_PER_ADDRESS of one address)
  that takes its peers' steps into DIR/.clusterctl-replicas/<run id>/<owner>/<step> (on the node's checkpoint
  disk; a private temp directory renamed into place once every file matched its signed manifest), keeps `keep` steps of each owner (the older
  ones pruned, as the job prunes its own), refuses a step its disk cannot hold before a byte flows
  (the older replica kept), and serves any step it holds (its own or a replica) to a restoring peer;
- `restore`: on a relaunch, before any rank starts, the step the engine chose (checkpoint_copies.choose)
  completed here: every owner's files this node lacks, fetched from a host holding them, checked,
  into `dir/<step>` (the marker last).
Every problem is an event (kind, host, peer, step, says) the keeper's reports carry to the engine,
which keeps them in the attempt's record: disk_full, lost_mid_copy, size_mismatch, checksum_mismatch,
refused, incomplete. All file operations under the run dir and the checkpoint dir go through
safe_files (no link followed, private directories proven ours).
Runs on the nodes: the standard library only, Python 3.8+, shipped beside node_agent.py.
"""
import fnmatch
import json
import os
import socket
import stat
import threading
import time

if __package__:  # imported by the controller
    from clusterctl.node import checkpoint_wire as wire
    from clusterctl.node import heal_policy
    from clusterctl.node.listener import Slots
    from clusterctl.node.safe_files import Dir, Refused
else:  # beside node_agent.py in a node's run dir
    import checkpoint_wire as wire
    import heal_policy
    from listener import Slots
    from safe_files import Dir, Refused

RUNS_ON_NODES = True
# Beside the node's own steps (its checkpoint disk, not the run dir's: job.outputs may be small or
# shared), one private directory per run: DIR/.clusterctl-replicas/<run id>/<owner>/<step>
REPLICAS = ".clusterctl-replicas"
POLL_S = 0.25  # a new complete step is seen within this (a scan is a few syscalls a step)
RETRY_S = 5.0  # after a failed copy to a peer
FRESH_S = 600.0  # a request signed longer ago (by the sender's clock) is refused
OWN_REPORTED = 20  # the newest own steps a report names (a beat's body is bounded)
UNFINISHED_S = 2.0  # a step dir without its marker this long is said (a job pruning one removes the marker first)


class Replicator:
    def __init__(self, run_dir, config, say=print):
        heal, spec = config["heal"], config["heal"]["checkpoint"]
        self.run_dir, self.say = run_dir, say
        self.root, self.marker = spec["dir"], spec["complete"]
        self.replicas, self.keep = int(spec.get("replicas") or 0), int(spec.get("keep") or wire.KEEP)
        self.rate = int(spec.get("bandwidth") or 0) or wire.link_rate()
        # this node's key with each host of the run (checkpoint_wire.pair_key): a request is checked with the
        # key of the host it names as its sender, so a node (or its job) signs as itself and no other
        self.keys, self.run_id, self.host = dict(config.get("replica_keys") or {}), config["run_id"], config["host"]
        self.addresses, self.known = dict(heal["addresses"]), set(heal["addresses"])
        self.port = int(config["port"]) - 1 + wire.PORT_OFFSET  # config's port: the supervisor's, rendezvous + 1
        self.active = list(heal["active"])
        self.lock, self.stopping = threading.Lock(), threading.Event()
        self.sent, self.tried, self.manifests = {}, {}, {}
        self.events, self.seq, self.noted = [], 0, set()
        self.restored, self.server, self.restoring = {}, None, None
        self.unfinished = {}  # a step dir without its marker, older than a complete one: when first seen
        # node/listener.py's discipline: a newcomer is never refused for want of a slot (the oldest unproven one of
        # its address goes), so no crowd keeps a peer's copy out; a request unsigned within PROVE_S is shut down
        self.slots = Slots(wire.PROVE_S, wire.SLOTS_PER_ADDRESS, wire.SLOTS,
                           refuse=lambda peer, what: self.note_once("refused", f"a connection from {peer}: {what}"))
        self.nonces = {}  # the requests taken within FRESH_S

    # -- life
    def start(self):
        self._clean()
        self.server = self._listen()
        threading.Thread(target=self._serve, daemon=True).start()
        threading.Thread(target=self._send_loop, daemon=True).start()
        return self

    def stop(self):
        self.stopping.set()
        self.slots.close()
        if self.server is not None:
            self.server.close()

    def event(self, kind, says, peer=None, step=None):
        with self.lock:
            self.seq += 1
            self.events = (self.events + [{"seq": self.seq, "at": round(time.time(), 1), "kind": kind,
                                           "host": self.host, "peer": peer, "step": step,
                                           "says": str(says)[:300]}])[-wire.EVENTS:]
        self.say(f"checkpoint replica: {kind}: {says}")

    def note_once(self, kind, says, step=None):
        if (kind, step, says) not in self.noted:
            self.noted.add((kind, step, says))
            self.event(kind, says, step=step)

    def summary(self):
        """What the keeper reports: this node's complete steps, the replicas it holds, the latest events."""
        own = self.own_steps()
        held = {}
        try:
            with Dir.open(self.root, (REPLICAS, self.run_id), private=True) as replicas:
                for owner in replicas.entries():
                    if owner.kind == "dir" and owner.name in self.known:
                        with replicas.sub(owner.name) as mine:
                            held[owner.name] = self._held(mine)
        except (OSError, Refused):
            pass
        with self.lock:
            # own steps reach back further than the replicas (a step resumable needs every owner's copy)
            return {"own": own[-OWN_REPORTED:], "held": held, "events": self.events[-10:],
                    "restored": dict(self.restored)}

    def own_steps(self):
        """This node's complete steps, oldest first; a checkpoint dir that is a link or not ours, a step
        that never completed (older than a complete one) and a refused name are each said once."""
        if not self.root_ok():
            return []
        refused = []
        steps = heal_policy.complete_steps(self.root, self.marker, refused)
        for why in refused:
            self.note_once("refused", why)
        if steps:
            newest = heal_policy.natural(steps[-1])
            with Dir.open(self.root) as root:
                kept = [e.name for e in root.entries() if e.kind == "dir"]
            now, seen = time.monotonic(), {}
            for name in kept:
                if heal_policy.checkpoint_name_ok(name) and name not in steps and heal_policy.natural(name) < newest:
                    seen[name] = self.unfinished.get(name, now)  # a step the job prunes loses its marker first
                    if now - seen[name] >= UNFINISHED_S:
                        self.note_once("incomplete", f"{self.root}/{name} never completed (no {self.marker}): never "
                                                     "copied, never resumed from", step=name)
            self.unfinished = seen
        return steps

    def root_ok(self):
        """The checkpoint dir is a directory of ours (a link or someone else's is refused, said once); a
        missing one is fine (nothing saved yet: created when a replica or a restore needs it)."""
        try:
            st = os.lstat(self.root)
        except OSError:
            return True
        if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid() or not stat.S_ISDIR(st.st_mode):
            why = ("a symbolic link" if stat.S_ISLNK(st.st_mode) else f"owned by uid {st.st_uid}, not {os.geteuid()}"
                   if st.st_uid != os.geteuid() else "not a directory")
            self.note_once("refused", f"the checkpoint dir {self.root} is {why}: nothing of it is copied or taken")
            return False
        return True

    # -- sending
    def peers(self):
        """The `replicas` hosts in use after this one (a ring); none while this host is not in use."""
        with self.lock:
            active = list(self.active)
        if self.host not in active or self.replicas <= 0:
            return []
        at = active.index(self.host)
        return [h for h in (active[at + 1:] + active[:at]) if h != self.host][:self.replicas]

    def answered(self, answer):
        """The engine's answer to a report: the hosts in use now, and a restore ordered (run once, aside)."""
        self.use(answer.get("active"))
        order = answer.get("restore")
        if isinstance(order, dict) and order.get("attempt") != self.restoring:
            self.restoring = order.get("attempt")
            threading.Thread(target=self.restore, args=(order.get("attempt"), str(order.get("step")),
                                                        dict(order.get("sources") or {})), daemon=True).start()

    def use(self, active):
        """The hosts in use now (the engine's answer, after a relaunch)."""
        if isinstance(active, list) and all(h in self.known for h in active):
            with self.lock:
                self.active = list(active)

    def _send_loop(self):
        try:
            os.nice(10)  # the ranks come first
        except OSError:
            pass
        while not self.stopping.wait(POLL_S):
            steps = self.own_steps()
            for peer in self.peers() if steps else ():
                if self.sent.get(peer) == steps[-1] or time.monotonic() - self.tried.get(peer, -RETRY_S) < RETRY_S:
                    continue  # sent already, or failed within RETRY_S
                try:
                    self.send(peer, steps[-1])
                    self.sent[peer] = steps[-1]
                except wire.Failed as failed:
                    self.tried[peer] = time.monotonic()
                    self.event(failed.kind, f"{steps[-1]} to {peer}: {failed.says}", peer, steps[-1])
                except (OSError, Refused) as error:
                    self.tried[peer] = time.monotonic()
                    self.event("lost_mid_copy", f"{steps[-1]} to {peer}: {error}", peer, steps[-1])

    def send(self, peer, step):
        with Dir.open(self.root, (step,)) as where:
            if step not in self.manifests:
                self.manifests = {step: wire.manifest_of(where)}  # the newest step's only
            files = self.manifests[step]
            total = sum(size for _, size, _ in files)
            key = self._key(peer)
            conn = wire.request(self.addresses[peer], self.port, key, self._ask("put", self.host, step, files=files),
                                source=self.addresses.get(self.host))
            try:
                first, _ = wire.answer(conn, key, time.monotonic() + wire.IDLE_S)
                if not first.get("ok"):
                    raise wire.Failed(first.get("kind") or "refused", first.get("says") or "refused")
                if first.get("send"):
                    wire.send_files(conn, where, files, self.rate)
                    final, _ = wire.answer(conn, key, time.monotonic() + wire.IDLE_S)
                    if not final.get("ok"):
                        raise wire.Failed(final.get("kind") or "refused", final.get("says") or "refused")
                    self.say(f"checkpoint replica: {step} ({total} bytes) copied to {peer}")
            finally:
                conn.close()

    def _key(self, host):
        """This node's key with `host`, or Failed: a host the controller gave no key for is no peer."""
        key = self.keys.get(host)
        if not key:
            raise wire.Failed("refused", f"no replica key for {str(host)[:40]} in this node's config")
        return key

    def _ask(self, op, owner, step, **more):
        return {"op": op, "run": self.run_id, "from": self.host, "owner": owner, "step": step,
                "at": time.time(), "nonce": os.urandom(12).hex(), **more}

    # -- receiving and serving
    def _listen(self):
        address = self.addresses.get(self.host) or ""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        server = socket.socket(family, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind((address, self.port))
        except OSError:  # an address that is not this machine's own (NAT): all of them
            server.bind(("", self.port))
        server.listen(64)
        return server

    def _serve(self):
        while not self.stopping.is_set():
            try:
                conn, peer = self.server.accept()
            except OSError:
                return
            self.slots.admit(conn, peer[0])
            threading.Thread(target=self._handle, args=(conn, peer[0]), daemon=True).start()

    def _handle(self, conn, peer):
        key = None
        try:
            line, rest = wire.read_line(conn, time.monotonic() + wire.PROVE_S)
            sender = wire.sender(line)
            key = self.keys.get(sender) if sender in self.known else None
            ask = wire.unframe(key, line) if key else None
            if ask is None or ask.get("run") != self.run_id or abs(time.time() - float(ask.get("at") or 0)) > FRESH_S:
                key = None  # nothing proven: no answer is signed for it
                raise wire.Failed("refused", f"a request from {peer} not signed with its sender's key "
                                             f"({str(sender)[:40]}), or stale")
            self._from_its_address(sender, peer)
            self._once(str(ask.get("nonce")), peer)
            self.slots.proven(conn)  # signed by a node of this run: its transfer may take longer than PROVE_S
            owner, step = ask.get("owner"), ask.get("step")
            if owner not in self.known or not heal_policy.checkpoint_name_ok(step):
                raise wire.Failed("refused", f"a request from {peer} for {str(owner)[:40]}/{str(step)[:40]}")
            if ask.get("op") == "put" and ask.get("from") == owner:
                self._take(conn, key, ask, rest)
            elif ask.get("op") == "get":
                self._give(conn, key, owner, step)
            else:  # a node sends its own steps only
                raise wire.Failed("refused", f"a request from {peer}: {str(ask.get('op'))[:20]} of {owner}'s {step} "
                                             f"by {str(ask.get('from'))[:40]}")
        except wire.Failed as failed:
            self.event(failed.kind, failed.says)
            self._reply(conn, key, {"ok": False, "kind": failed.kind, "says": failed.says})
        except (OSError, Refused, ValueError) as error:
            self.event("refused", f"a request from {peer}: {error}")
        finally:
            self.slots.done(conn)
            conn.close()

    def _from_its_address(self, sender, peer):
        """A request signed by `sender` that comes from another host's address of this run is refused: the
        key was taken from `sender`'s node (its job) to a third. An address no host of the run has (NAT,
        a node with several) proves nothing either way: the key alone decides."""
        own = self.addresses.get(sender)
        others = [h for h, address in self.addresses.items() if h != sender and wire.same_address(address, peer)]
        if others and not wire.same_address(own, peer):
            raise wire.Failed("refused", f"a request signed by {sender} came from {peer}, the address of "
                                         f"{', '.join(sorted(others))[:80]}")

    def _once(self, nonce, peer):
        """A signed request is taken once (a recorded one sent again within FRESH_S is refused)."""
        now = time.time()
        with self.lock:
            self.nonces = {n: at for n, at in self.nonces.items() if now - at <= FRESH_S}
            if len(nonce) != 24 or nonce in self.nonces:
                raise wire.Failed("refused", f"a request from {peer} replayed, or without its nonce")
            self.nonces[nonce] = now

    def _reply(self, conn, key, document):
        if not key:  # an unproven request: whatever it claims, nothing is signed for it
            return
        try:
            conn.sendall(wire.frame(key, document))
        except OSError:
            pass

    def _take(self, conn, key, ask, rest):
        owner, step = ask["owner"], ask["step"]
        files, total = wire.manifest_ok(ask.get("files"))
        if not self.root_ok():
            raise wire.Failed("refused", f"{self.host}'s checkpoint dir {self.root} is refused: nothing taken")
        with Dir.open(self.root, (REPLICAS, self.run_id, owner), create=True, private=True) as mine:
            if step in self._held(mine):
                with mine.sub(step) as held:
                    if json.loads(held.read(wire.MANIFEST)) == [list(f) for f in files]:
                        return self._reply(conn, key, {"ok": True, "send": False})
            free = os.statvfs(mine.fd)
            free = free.f_bavail * free.f_frsize
            if total + wire.RESERVE > free:
                raise wire.Failed("disk_full", f"{self.host} has {free >> 20} MiB free, {owner}'s {step} needs "
                                               f"{total >> 20} MiB: not taken, the older replica is kept")
            temp = f".incoming-{step}-{os.getpid()}-{threading.get_ident()}"
            with mine.make_private(temp) as into:
                self._reply(conn, key, {"ok": True, "send": True})
                try:
                    deadline = time.monotonic() + 60 + total / wire.MIN_RATE
                    wire.receive_files(wire.Stream(conn, rest, deadline), into, files)
                    into.write(wire.MANIFEST, json.dumps([list(f) for f in files]))
                except BaseException:
                    mine.remove_tree(temp)
                    raise
            if mine.exists(step):
                mine.remove_tree(step)
            mine.rename(temp, step)
            for old in self._held(mine)[:-self.keep]:
                mine.remove_tree(old)
        self._reply(conn, key, {"ok": True})

    def _held(self, mine):
        """The complete replicas in the Dir `mine` (one owner's), oldest first: those with a manifest."""
        held = []
        for entry in mine.entries():
            if entry.kind == "dir" and heal_policy.checkpoint_name_ok(entry.name):
                with mine.sub(entry.name) as step:
                    if step.exists(wire.MANIFEST):
                        held.append(entry.name)
        return sorted(held, key=heal_policy.natural)

    def _give(self, conn, key, owner, step):
        if owner == self.host:
            if step not in self.own_steps():
                raise wire.Failed("incomplete", f"{self.host} holds no complete {step} of its own")
            where = Dir.open(self.root, (step,))
            files = wire.manifest_of(where)
        else:
            try:
                where = Dir.open(self.root, (REPLICAS, self.run_id, owner, step), private=True)
            except (OSError, Refused) as error:  # said to the asker, who tries another host
                raise wire.Failed("incomplete", f"{self.host} holds no replica of {owner}'s {step}: {error}")
            files = json.loads(where.read(wire.MANIFEST))
            sizes = {e.name: e.size for e in where.entries() if e.kind == "file"}
            changed = [name for name, size, _ in files if sizes.get(name) != size]
            if changed:
                where.close()
                raise wire.Failed("size_mismatch", f"{self.host}'s replica of {owner}'s {step}: {changed[0]} is "
                                                   f"{sizes.get(changed[0])} bytes, its manifest says otherwise: refused")
        with where:
            self._reply(conn, key, {"ok": True, "files": files})
            wire.send_files(conn, where, [tuple(f) for f in files], 0)

    # -- restoring, before the next attempt's ranks start
    def restore(self, attempt, step, sources):
        """Complete `dir/<step>` here from `sources` ({owner: [hosts holding its files]}); the result
        (ok, says, bytes, seconds) is kept for the keeper's reports under `restored`."""
        started, moved, says, kind = time.monotonic(), 0, None, None
        try:
            if not heal_policy.checkpoint_name_ok(step):
                raise wire.Failed("refused", f"{step[:80]!r} is not a checkpoint's name")
            if not self.root_ok():
                raise wire.Failed("refused", f"the checkpoint dir {self.root} is refused: nothing restored")
            sources = {o: h for o, h in sources.items() if o in self.known and isinstance(h, list)}
            owners = [o for o in sources if not (o == self.host and step in self.own_steps())]
            with Dir.open(self.root, create=True) as root, root.sub(step, create=True) as into:
                for number, owner in enumerate(owners):
                    have = {e.name for e in into.entries() if e.kind == "file"}
                    marker = None if number == len(owners) - 1 else self.marker  # the marker comes with the last
                    moved += self._fetch(owner, step, sources[owner], into, have, marker)
        except (wire.Failed, OSError, Refused) as failed:
            says, kind = getattr(failed, "says", None) or str(failed), getattr(failed, "kind", "refused")
            self.event(kind, f"restoring {step}: {says}", step=step)
        result = {"attempt": attempt, "step": step, "ok": says is None, "says": says, "kind": kind, "bytes": moved,
                  "s": round(time.monotonic() - started, 2)}
        with self.lock:
            self.restored = result
        return result

    def _fetch(self, owner, step, hosts, into, have, skip_marker):
        last = None
        for host in hosts:
            if host not in self.known:
                continue
            try:
                key = self._key(host)
                conn = wire.request(self.addresses[host], self.port, key, self._ask("get", owner, step),
                                    source=self.addresses.get(self.host))
                try:
                    first, rest = wire.answer(conn, key, time.monotonic() + 120)
                    if not first.get("ok"):
                        raise wire.Failed(first.get("kind") or "refused", f"{host}: {first.get('says')}")
                    files, total = wire.manifest_ok(first.get("files"))
                    skip = set(have) | ({n for n, _, _ in files if fnmatch.fnmatch(n, skip_marker)}
                                        if skip_marker else set())
                    stream = wire.Stream(conn, rest, time.monotonic() + 60 + total / wire.MIN_RATE)
                    return wire.receive_files(stream, into, files, self.marker, skip)
                finally:
                    conn.close()
            except wire.Failed as failed:
                last = failed
                self.event(failed.kind, f"{owner}'s {step} from {host}: {failed.says}", host, step)
            except OSError as error:
                last = wire.Failed("lost_mid_copy", f"{owner}'s {step} from {host}: {error}")
                self.event("lost_mid_copy", last.says, host, step)
        raise last or wire.Failed("incomplete", f"no surviving host holds {owner}'s {step}")

    def _clean(self):
        """Temp directories a killed receiver left: never a step, removed."""
        if not self.root_ok() or not os.path.isdir(self.root):
            return
        try:
            with Dir.open(self.root, (REPLICAS, self.run_id), create=True, private=True) as replicas:
                for owner in replicas.entries():
                    if owner.kind == "dir":
                        with replicas.sub(owner.name) as mine:
                            for entry in mine.entries():
                                if entry.name.startswith(".incoming-"):
                                    mine.remove_tree(entry.name)
        except (OSError, Refused) as error:
            self.event("refused", f"the replicas dir: {error}")
