"""The controller's one way into a run's files on a node (issue 47): every read, write, rename and
listing that clusterctl asks of a node's run dir is one of these operations, run through the no-follow
layer (safe_files.py) by `python3 -I -S -c <this program and the layer>` (plan/node_files.py builds
the argv): nothing is executed from a directory the job or another user can write, and the job's links,
FIFOs and device nodes in its run dir are refused instead of followed.

    run_files.py OP BASE REL [ARGS]

BASE is trusted (job.outputs, the operator's own setting); REL (`logs/<run id>/<host>`) is opened
component by component without following links. Each operation prints what the shell script it
replaced printed, so the controller's parsers read it unchanged:
  poll                       renew the lease; "exit N[ stopped]" or "running"
  mark-stopped NOTE          "marked" or "no run dir"
  await-exit                 up to 10 s for agent.exit: "exit N", "running" or "no agent"
  tail NAME LINES            the last LINES lines of a file
  read NAME LIMIT            the first LIMIT bytes of a file
  state NAME                 "<now> <mtime>" then the file (the supervisor's state)
  dumps COUNT BYTES          each flight-recorder dump's name, then its first BYTES as base64
  collective-waits [KEY=VALUE...]  a flight-recorder round (collective_waits.py travels with this one): a JSON
                             line per rank, its collectives' wait on the GPU or why not; with the run's marker,
                             each rank's CPU time too
  probe                      `top`'s look (observe/top.py's markers)
  set-aside ATTEMPT          the run dir renamed <host>.attempt-ATTEMPT (never into an existing one)
  follow NPROC [LEASE]       the run's live stream (watch/follow.py) until agent.exit; with LEASE its renewals, its end said
  logs COUNT FOLLOW AGENT RANK...  `clusterctl logs`
  write-env                  own the node's run dir (made 0700 or proven ours), its env from stdin
  put NAME                   stdin into the run's shipped files, REL being `logs/<run id>/.files`
  put-private NAME | NAME SIZE...  stdin into a 0600 file (or each pair's) of the node's run dir, proven ours
  stage GIVE ENV_SIZE [NAME SIZE]...  write-env, then each shipped file put into `.files`: one start
  checkpoints COMPLETE [RUN] BASE/REL a checkpoint dir: "own STEP" per complete step, "held OWNER STEP" per
                             replica of run RUN (issue 50; heal_policy.py travels with this one)
Only safe_files.py travels with every operation; follow_files.py (the streaming, `top`'s probe,
`tail` and await-exit's watch) and heal_policy.py (`checkpoints`) only with those that import them (plan/node_files.py: each poll starts as little as it can).
Refused paths print `clusterctl: refused PATH: WHY; FIX` on stderr and exit 4.
"""
from __future__ import annotations

import os
import sys
import time

if __package__:  # imported by the controller
    from clusterctl.node.safe_files import Dir, Refused, first_word
else:  # on the node: the files sent with it
    from safe_files import Dir, Refused, first_word

RUNS_ON_NODES = True

REFUSED_EXIT = 4
REPLICAS, MANIFEST = ".clusterctl-replicas", ".manifest.json"  # as node/checkpoint_replica.py writes them
def _streaming():
    """follow_files, imported only by the operations that stream (a poll starts without it)."""
    import importlib

    return importlib.import_module("clusterctl.node.follow_files" if __package__ else "follow_files")


TAIL_BYTES = 1 << 20  # what `tail NAME K` reads back from a file's end


def _split(rel: str) -> tuple[str, ...]:
    return tuple(p for p in rel.split("/") if p)


def _open_run(base: str, rel: str) -> Dir | None:
    try:
        return Dir.open(base, _split(rel))
    except (FileNotFoundError, NotADirectoryError):
        return None


def _read_or_none(d: Dir, name: str, limit: int = 4096) -> bytes | None:
    try:
        return d.read(name, limit)
    except FileNotFoundError:
        return None


def _exit_text(d: Dir) -> str | None:
    return first_word(d, "agent.exit")  # one word, as the live stream says it (follow_files._say_exit)


def _out(text: str | bytes) -> None:
    sys.stdout.buffer.write(text.encode() if isinstance(text, str) else text)


def poll(base: str, rel: str) -> None:
    d = _open_run(base, rel)
    if d is None:
        _out("running\n")
        return
    with d:
        try:
            d.touch("lease")
        except (Refused, OSError) as error:  # not renewed: the wrapper's lease stops the ranks in time
            print(f"clusterctl: lease not renewed: {error}", file=sys.stderr)
        code = _exit_text(d)
        if code is None:
            _out("running\n")
        else:
            _out(f"exit {code}" + (" stopped" if d.is_file("stopped") else "") + "\n")


def mark_stopped(base: str, rel: str, note: str) -> None:
    d = _open_run(base, rel)
    if d is None:
        _out("no run dir\n")
        return
    with d:
        d.write("stopped", note + "\n")
    _out("marked\n")


def await_exit(base: str, rel: str) -> None:
    d = _open_run(base, rel)
    if d is None:
        _out("no agent\n")
        return
    with d:
        follow = _streaming()
        watch, deadline = follow.names_appearing(d), time.monotonic() + 10
        try:
            while d.entry("agent.pid") and not d.entry("agent.exit") and time.monotonic() < deadline:
                follow.quiet(watch, False)  # woken as agent.exit is renamed into place
        finally:
            if watch is not None:
                os.close(watch)
        code = _exit_text(d)
        _out(f"exit {code}\n" if code is not None else "running\n" if d.entry("agent.pid") else "no agent\n")


def tail(base: str, rel: str, name: str, count: str) -> None:
    d = _open_run(base, rel)
    if d is None:
        raise FileNotFoundError(f"{base}/{rel}")
    with d:
        _out(_streaming().last_lines(d.read(name, TAIL_BYTES, tail=True), int(count)))


def read(base: str, rel: str, name: str, limit: str) -> None:
    """The first LIMIT bytes of a file of the run dir (nccl-test's result file)."""
    d = _open_run(base, rel)
    if d is None:
        raise FileNotFoundError(f"{base}/{rel}")
    with d:
        _out(d.read(name, int(limit)))


def state(base: str, rel: str, name: str) -> None:
    d = _open_run(base, rel)
    if d is None:
        raise FileNotFoundError(f"{base}/{rel}")
    with d:
        found = d.entry(name)
        data = d.read(name, 4 << 20)
        _out(f"{int(time.time())} {int(found.mtime if found else 0)}\n".encode() + data)


def dumps(base: str, rel: str, count: str, limit: str) -> None:
    import base64
    import importlib

    prefix = importlib.import_module("clusterctl.node.layout" if __package__ else "layout").FR_DUMP_PREFIX
    d = _open_run(base, rel)
    if d is None:
        return
    with d:
        names = [e.name for e in d.entries() if e.kind == "file" and e.name.startswith(prefix)]
        for name in names[:int(count)]:
            try:
                data = d.read(name, int(limit))
            except (Refused, OSError):
                continue
            _out(name.encode("utf-8", "surrogateescape") + b"\n" + base64.b64encode(data) + b"\n")


def collective_waits(base: str, rel: str, *marker: str) -> None:
    """A flight-recorder round (collective_waits.py): each rank's dump read and set aside, its FIFO poked;
    `marker`: the run's KEY=value lines, by which its ranks' CPU time is read too."""
    import importlib
    import json

    waits = importlib.import_module("clusterctl.node.collective_waits" if __package__ else "collective_waits")
    d = _open_run(base, rel)
    if d is None:
        return
    with d:
        for line in waits.node_round(d, marker=marker):
            _out(json.dumps(line, sort_keys=True) + "\n")


def probe(base: str, rel: str) -> None:
    attempt_of, last_lines = _streaming().attempt_of, _streaming().last_lines
    d = _open_run(base, rel)
    if d is None:
        _out("clusterctl-top: no run directory\n")
        sys.exit(3)
    with d:
        _out("clusterctl-top-sample\n")
        try:
            _out(last_lines(d.read("metrics.jsonl", 64 << 10, tail=True), 1))
        except (Refused, OSError):
            pass
        _out("\n")
        att = attempt_of(d)
        if att:
            with d.sub(_split(att)) as ranks:
                for entry in ranks.entries():
                    if entry.kind != "dir":
                        continue
                    try:
                        with ranks.sub((entry.name,)) as rank:
                            out, err = rank.entry("stdout.log"), rank.entry("stderr.log")
                            name, stream = "stdout.log", "stdout"
                            if err is not None and (out is None or err.mtime > out.mtime):
                                name, stream = "stderr.log", "stderr"
                            text = last_lines(rank.read(name, 64 << 10, tail=True), 1).rstrip(b"\n")[:300]
                    except (Refused, OSError):
                        continue
                    if text:
                        _out(f"clusterctl-top-rank {entry.name} {stream} ".encode() + text + b"\n")
        code = _exit_text(d)
        if code is not None:
            _out(f"clusterctl-top-exit {code}\n")


def set_aside(base: str, rel: str, attempt: str) -> None:
    parts = _split(rel)
    parent = _open_run(base, "/".join(parts[:-1]))
    if parent is None:
        return
    host, aside = parts[-1], f"{parts[-1]}.attempt-{int(attempt)}"
    with parent:
        if parent.entry(host) is None:
            return
        earlier = parent.entry(aside)
        if earlier is not None:  # this attempt's earlier set-aside: ours to replace, nobody else's
            with parent.sub((aside,), private=True):
                pass
            parent.remove_tree(aside)
        try:
            # rename(2) never moves a directory into another: an existing empty one is replaced, a
            # non-empty one, a file or a link there fails
            parent.rename(host, aside)
        except OSError as error:
            raise Refused(f"{parent.path}/{aside}", f"appeared while setting the run dir aside ({error.strerror})",
                          "remove it and relaunch") from None


def write_env(base: str, rel: str, give: str = "0", data: bytes | None = None) -> None:
    """The node's run dir owned (the shared `logs`, `logs/<run id>` made as open as job.outputs, the
    node's own made 0700 or proven ours), its old end marks removed, its env (0600) from stdin. `give`
    ("1": no container, run through sudo): the node's run dir and env belong to the SSH user (SUDO_UID),
    who runs the job; the shared directories stay root's. `data`: the env (`stage`), else stdin."""
    import os

    parts = _split(rel)
    owner = os.geteuid()
    if give == "1" and owner == 0 and os.environ.get("SUDO_UID", "").isdigit():
        owner, group = int(os.environ["SUDO_UID"]), int(os.environ.get("SUDO_GID", "0") or 0)
    with Dir.open(base, create=True) as outputs:
        mode = outputs.mode()
        with outputs.shared(parts[0], mode) as logs, logs.shared(parts[1], mode) as run:
            try:
                own = run.make_private(parts[2])
                if owner != os.geteuid():
                    os.fchown(own.fd, owner, group)
            except Refused:
                own = run.sub(parts[2:])  # it exists: ours only if proven so
                try:
                    sys.modules[Dir.__module__].prove_ours(own.fd, own.path, owner)
                except BaseException:
                    own.close()
                    raise
            with own:
                for name in ("agent.exit", "stop", "env"):
                    own.remove(name)
                own.write("env", sys.stdin.buffer.read() if data is None else data)
                if owner != os.geteuid():
                    os.chown("env", owner, group, dir_fd=own.fd, follow_symlinks=False)


def put(base: str, rel: str, name: str, data: bytes | None = None) -> None:
    """A shipped file (0644) in `logs/<run id>/.files` (0755: the ranks read it, whoever they run as;
    made by us or root, proven not writable by others: what the node runs from there is nobody
    else's), or in a node's own run dir (proven ours); the same bytes there already are success.
    `data`: the file (`stage`), else stdin."""
    parts = _split(rel)
    data = sys.stdin.buffer.read() if data is None else data
    with Dir.open(base, create=True) as outputs:
        mode = outputs.mode()
        with outputs.shared(parts[0], mode) as logs, logs.shared(parts[1], mode) as run:
            if parts[2] == ".files":
                where = run.shared(parts[2], 0o755)
            else:
                where = run.sub(parts[2:], create=True, private=True)
            with where:
                if _read_or_none(where, name, len(data) + 1) == data:
                    return
                where.write(name, data, 0o644)


def stage(base: str, rel: str, give: str, env_size: str, *shipped: str) -> None:
    """A launch's writes in one start of this program (issue 52: each start is ~30 ms of a node's CPU):
    `write-env` GIVE on the node's run dir REL, then each shipped file `put` into the run's `.files`
    beside it. stdin holds the env's ENV_SIZE bytes, then each file's, as `NAME SIZE` pairs name them."""
    if len(shipped) % 2:
        raise Refused(rel, f"stage takes NAME SIZE pairs after ENV_SIZE, not {len(shipped)} arguments")
    env, *files = _pieces(rel, sys.stdin.buffer.read(), (env_size, *shipped[1::2]))
    write_env(base, rel, give, env)
    where = "/".join((*_split(rel)[:2], ".files"))
    for name, data in zip(shipped[0::2], files):
        put(base, where, name, data)


def put_private(base: str, rel: str, *named: str) -> None:
    """NAME: stdin into a 0600 file of the node's run dir, proven ours; `NAME SIZE` pairs: stdin holds each
    file's bytes in turn (one start for a run's keeper and its programs, issue 52)."""
    if not named or (len(named) > 1 and len(named) % 2):
        raise Refused(rel, f"put-private takes NAME or NAME SIZE pairs, not {len(named)} arguments")
    parts, data = _split(rel), sys.stdin.buffer.read()
    files = [(named[0], data)] if len(named) == 1 else list(zip(named[0::2], _pieces(rel, data, named[1::2])))
    with Dir.open(base, parts[:-1]) as run, run.sub(parts[-1:], private=True) as own:
        for name, content in files:
            own.write(name, content, 0o600)


def _pieces(rel: str, data: bytes, sizes) -> list:
    """`data` cut in pieces of `sizes` (decimal strings), which must add up to it."""
    sizes = [int(size) for size in sizes]
    if min(sizes, default=0) < 0 or sum(sizes) != len(data):
        raise Refused(rel, f"stdin holds {len(data)} bytes, the arguments {sum(sizes)}",
                      "a clusterctl of another version sent it: run the same clusterctl on every controller")
    ends = [sum(sizes[:i + 1]) for i in range(len(sizes))]
    return [data[end - size:end] for end, size in zip(ends, sizes)]


def checkpoints(base: str, rel: str, complete: str, run_id: str = "") -> None:
    """BASE/REL a checkpoint dir (`job.checkpoint.dir`, the operator's own setting: BASE trusted as
    job.outputs is): "own STEP" for each complete step, oldest first (heal_policy.complete_steps: the
    node side's own rules), then with RUN_ID "held OWNER STEP" for each complete replica of that run
    this node holds (checkpoint_replica.py's layout: the manifest is written last, once all was checked)."""
    import importlib

    policy = importlib.import_module("clusterctl.node.heal_policy" if __package__ else "heal_policy")
    root = "/".join(p for p in (base.rstrip("/"), *_split(rel)) if p) or "/"
    lines = [f"own {step}\n" for step in policy.complete_steps(root, complete)]
    try:
        replicas = Dir.open(root, (REPLICAS, run_id)) if run_id else None
    except (FileNotFoundError, NotADirectoryError):
        replicas = None
    if replicas is not None:
        with replicas:
            lines += [f"held {owner} {step}\n" for owner, step in _held(replicas, policy.checkpoint_name_ok)]
    _out("".join(lines))


def _held(replicas: Dir, name_ok) -> list:
    found = []
    for owner in replicas.entries():
        if owner.kind == "dir" and name_ok(owner.name):
            with replicas.sub(owner.name) as held:
                for step in held.entries():
                    if step.kind == "dir" and name_ok(step.name):
                        with held.sub(step.name) as copy:
                            if copy.is_file(MANIFEST):
                                found.append((owner.name, step.name))
    return found


def follow(*args: str) -> None:
    _streaming().follow(*args)


def logs(*args: str) -> None:
    _streaming().logs(*args)


OPERATIONS = {"poll": poll, "mark-stopped": mark_stopped, "await-exit": await_exit, "tail": tail, "read": read, "state": state,
              "dumps": dumps, "probe": probe, "set-aside": set_aside, "write-env": write_env, "put": put,
              "stage": stage, "put-private": put_private, "follow": follow, "logs": logs, "checkpoints": checkpoints,
              "collective-waits": collective_waits}


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in OPERATIONS:
        print(f"usage: run_files.py {{{','.join(OPERATIONS)}}} BASE REL [ARGS]", file=sys.stderr)
        return 2
    try:
        OPERATIONS[argv[0]](*argv[1:])
    except Refused as refused:
        print(f"clusterctl: refused {refused}", file=sys.stderr)
        return REFUSED_EXIT
    except FileNotFoundError as missing:
        print(f"clusterctl: no such file: {missing.filename or missing}", file=sys.stderr)
        return 3
    finally:
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
