"""The checkpoint replicas of one attempt of an attached run (issue 50, `job.checkpoint.replicas: N`).

Started by the ranks' wrapper (plan/wrapper.py) as `python node_replica.py DIR WRAPPER_PID`, before the
ranks, when the controller wrote DIR/replica.json (0600: the run's checkpoint spec, its keys with each host
(one per pair), the hosts of this attempt and their job-network addresses, and for a relaunch the restore order
{"step", "sources"} the controller chose with checkpoint_copies.choose over what every host holds).
It hosts the same Replicator a detached run's keeper hosts (checkpoint_replica.py: the sender, the
listener, the restore): first the restore (tried again for PEERS_S while a source's copier is not
listening yet), whose result it writes to DIR/replica.ready ("ok", or why
not: the wrapper then starts no rank and ends the attempt with exit 1), then the copies for the
attempt's life. It ends as the wrapper ends it, or by itself once DIR/agent.exit exists or WRAPPER_PID
is gone (a killed wrapper leaves no copier behind). What it met goes to its stdout (DIR/replica.log).
A detached run writes no replica.json: its keepers host the Replicator across the attempts.
Runs on the nodes: the standard library only, Python 3.8+, shipped into the run's files dir.
"""
import json
import os
import sys
import time

if __package__:  # imported by the controller's tests
    from clusterctl.node import checkpoint_replica
    from clusterctl.node.safe_files import Dir, Refused
else:  # the run's files dir on a node
    import checkpoint_replica
    from safe_files import Dir, Refused

RUNS_ON_NODES = True
CONFIG = "replica.json"
READY = "replica.ready"
WATCH_S = 1.0
PEERS_S = 30.0  # a restore's source not answering yet: tried again for this long


def run(run_dir, wrapper_pid, say=print):
    """Restore (when ordered), say it in READY, then copy until the attempt ends; the exit code."""
    try:
        with Dir.open(run_dir) as d:
            config = json.loads(d.read(CONFIG))
    except (OSError, Refused, ValueError) as error:
        _ready(run_dir, f"the replica config {run_dir}/{CONFIG} cannot be read: {error}")
        return 1
    replica = checkpoint_replica.Replicator(run_dir, config, say=say)
    try:
        replica.start()
    except OSError as error:  # its port taken: the restore still runs, this node's checkpoints are not copied
        say(f"checkpoint replicas: cannot listen ({error}); this node's checkpoints are not copied")
    try:
        order = config.get("restore")
        if isinstance(order, dict) and order.get("step"):
            result = _restore(replica, config.get("attempt"), str(order["step"]), dict(order.get("sources") or {}))
            say(f"checkpoint replicas: restored {result['step']} ({result['bytes']} bytes in {result['s']} s)"
                if result["ok"] else f"checkpoint replicas: the restore of {result['step']} failed: {result['says']}")
            _ready(run_dir, "ok" if result["ok"] else f"the restore of {result['step']} failed: {result['says']}")
        else:
            _ready(run_dir, "ok")
        while not _ended(run_dir, wrapper_pid):
            time.sleep(WATCH_S)
        return 0
    finally:
        replica.stop()


def _restore(replica, attempt, step, sources):
    """The restore, tried again for PEERS_S while a source does not answer (lost_mid_copy): the peers'
    copiers start with their own wrappers, a moment apart (a launch over SSH reaches the nodes one by one);
    what arrived is kept between the tries. Any other failure (no such step, a copy that differs) is final."""
    deadline = time.monotonic() + PEERS_S
    while True:
        result = replica.restore(attempt, step, sources)
        if result["ok"] or result["kind"] != "lost_mid_copy" or time.monotonic() > deadline:
            return result
        time.sleep(1.0)


def _ready(run_dir, says):
    try:
        with Dir.open(run_dir) as d:
            d.write(READY, str(says)[:2000] + "\n")
    except (OSError, Refused) as error:
        print(f"checkpoint replicas: cannot write {READY}: {error}", flush=True)


def _ended(run_dir, pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    try:
        with Dir.open(run_dir) as d:
            return d.entry("agent.exit") is not None
    except (OSError, Refused):
        return True


def main(argv):
    if len(argv) != 3 or not argv[2].isdigit():
        sys.stderr.write("usage: node_replica.py RUN_DIR WRAPPER_PID\n")
        return 2
    return run(argv[1], int(argv[2]), say=lambda text: print(text, flush=True))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
