"""A detached run that heals itself (issue 35): what a keeper (node/node_agent.py) does on its node
when the run's engine (node/engine.Engine, on the master node) orders the next attempt. Runs on the
nodes, so: the standard library only, Python 3.8+, shipped beside node_agent.py.

The controller decides at hand-over what the engine needs (heal/detached.py) and writes it into
each node's supervision.json under "heal": the rules of node/heal_policy.decide, the hosts in use and
the spares, each host's ranks and job-network address, `job.checkpoint`, and for that node alone its
launch TEMPLATE: the launcher's own argv and environment on that node (torchrun, mpirun, deepspeed or
the job itself) with tokens for what a relaunch changes, filled in by heal_policy.launch_values and
heal_policy.substitute, the functions the controller's relaunch uses too. `launch` is what a keeper
does with an order: the last attempt's files set aside as RUN_DIR.attempt-N (where collect-logs
looks), the env written, the wrapper (plan/wrapper.py's) started.
"""
import os
import subprocess

if __package__:  # imported by the controller
    from clusterctl.node import leases
    from clusterctl.node.heal_policy import substitute
    from clusterctl.node.layout import AGENT_PID, SUPERVISION, SUPERVISOR_STATE
    from clusterctl.node.safe_files import Dir, Refused
else:  # beside node_agent.py in a node's run dir (node_agent's _beside put it on sys.path)
    import leases
    from heal_policy import substitute
    from layout import AGENT_PID, SUPERVISION, SUPERVISOR_STATE
    from safe_files import Dir, Refused

RUNS_ON_NODES = True
LEASES_HELD = "clusterctl: GPU leases held on this node"  # heal_policy.CAUSES reads it: gpu_leases_held
ATTEMPT_FILE = "attempt"  # the attempt a node's run dir holds (absent: 1, launched by the controller)
# what stays in the run dir when an attempt is set aside: the supervisor's and keeper's own files
DAEMON_FILES = ("node_agent.py", "node_healing.py", "engine.py", "heal_policy.py", "node_health.py",
                SUPERVISION, SUPERVISOR_STATE, "supervise.log", "keep.log",
                "checkpoint_replica.py", "checkpoint_wire.py", "checkpoint_copies.py", "safe_files.py", "leases.py",
                "layout.py", "listener.py", "straggler_verdict.py", "waits_verdict.py", "node_stragglers.py", "collective_waits.py",
                "rank_output.py", "rank_procs.py", "node_metrics.py")


# ---- the keeper's side: launch the next attempt on this node

def attempt_of(run_dir):
    try:
        with Dir.open(run_dir) as d:
            return int(d.read_text(ATTEMPT_FILE, 64).strip() or 1)
    except (OSError, ValueError, Refused):
        return 1


def set_aside(run_dir, attempt):
    """Every file of the last attempt into RUN_DIR.attempt-N (the daemons' own files stay): a directory
    made here exclusively (0700), or one this keeper made for the same attempt before (proven ours),
    never one someone else made first (Refused); names moved by rename, no link followed."""
    parent, host = os.path.split(run_dir.rstrip("/"))
    with Dir.open(parent) as where, where.sub((host,)) as own:
        moving = [e.name for e in own.entries() if e.name not in DAEMON_FILES]
        if AGENT_PID not in moving:  # a spare joining: nothing ran here (its empty env is written again)
            return
        aside = f"{host}.attempt-{attempt}"
        try:
            made = where.make_private(aside)
        except Refused:
            made = where.sub((aside,), private=True)
        with made:
            for name in moving:
                os.rename(name, name, src_dir_fd=own.fd, dst_dir_fd=made.fd)


def take_leases(run_dir, config):
    """This node's GPU leases for the run (its GPUs, else its rank slots), taken before it launches: a
    spare joining takes its own, a survivor renews what it holds. None when taken; else who holds them."""
    heal, host = config["heal"], config["host"]
    lease = heal.get("lease")
    if not lease:
        return None
    keys = leases.key_names((heal.get("gpus") or {}).get(host) or [], (heal.get("nproc") or {}).get(host) or 1)
    try:
        answer = leases.take_run_dir(run_dir, config["run_id"], host, lease["operator"], keys, lease["window_s"])
    except (OSError, ValueError, Refused) as error:
        return f"the lease directory cannot be used ({error})"
    if answer["taken"]:
        return None
    holders = sorted({f"{h.get('key')} by run {h.get('run_id')} ({h.get('operator')})" for h in answer["held"]})
    waiters = sorted({f"run {t.get('run_id')} queued first" for t in answer["ahead"]})
    return "; ".join(holders + waiters)


def launch(run_dir, config, order):
    """Start attempt order["attempt"] on this node: set the last one aside, write its env, start the
    wrapper (without the run's marker: only the launcher carries it, see plan/wrapper.py), with its
    launcher's own command (the master's where this node is the master now). Never twice."""
    heal = config["heal"]
    attempt = int(order["attempt"])
    with Dir.open(run_dir) as d:
        stopped = d.is_file("stopped")
    if attempt <= attempt_of(run_dir) or stopped:
        return False
    set_aside(run_dir, attempt_of(run_dir))
    held = take_leases(run_dir, config)
    if held:  # this node's attempt ends at once, failed, saying why: the engine leaves it out
        with Dir.open(run_dir) as d:
            d.write(ATTEMPT_FILE, f"{attempt}\n")
            d.write("agent.log", f"{LEASES_HELD}: {held}\n")
            d.write("agent.exit", "1\n")
        print(f"attempt {attempt} not launched: {held}", flush=True)
        return False
    values = order["values"]
    master = values.get(f"@{heal['token']}.node_rank@") == "0"
    launch = heal.get("template_master") if master and heal.get("template_master") else heal["template"]
    env = [(k, substitute(v, values)) for k, v in launch["env"]]
    env = [(k, v) for k, v in env if v or k != "CLUSTERCTL_CHECKPOINT"]
    bad = [k for k, v in env if "\n" in v or "\0" in v or "\n" in k or "=" in k]
    if bad:  # one line a variable: a newline in a value would be a variable of its own
        print(f"attempt {attempt} not launched: {', '.join(bad)[:200]} would span lines of the env file", flush=True)
        return False
    with Dir.open(run_dir) as d:
        d.write("env", "".join(f"{k}={v}\n" for k, v in env))
        d.write(ATTEMPT_FILE, f"{attempt}\n")
    argv = [substitute(a, values) for a in launch["argv"]]
    clean = {k: v for k, v in os.environ.items() if k not in heal["marker_names"]}
    # `setsid -f` forks: the wrapper is nobody's child here (no zombie under the keeper), as agent.start_command
    subprocess.run(["setsid", "-f", "sh", "-c", heal["wrapper"], "clusterctl-wrapper", run_dir, str(config["lease_s"]),
                    heal.get("workdir") or "", *heal.get("sampler_args", ()), *argv], env=clean, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
    print(f"attempt {attempt} launched on this node", flush=True)
    return True
