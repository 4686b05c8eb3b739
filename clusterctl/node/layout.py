"""Every path of a run, declared once: on a node (under the job's `outputs`) and in a bundle that
`collect-logs` gathers. The standard library only (Python 3.8+): the controller imports it, and the
node programs that need it get it shipped beside them (`layout.py` in the run dir with node_agent.py,
in the run's `.files` with node_mpi_gate.py), so that
both sides build a run's paths from its id the same way.

On a node, under OUTPUTS (job.outputs):
  logs/<run id>/                          the run's logs dir (run_logs_dir), shared by all nodes or not
  logs/<run id>/.files/                   the files the run ships (node programs, the prompt): FILES
  logs/<run id>/<host>/                   a node's run dir (node_run_dir): agent.log, agent.exit, ...
  logs/<run id>/<host>/<run id>_<launcher>/attempt_0/<local rank>/{stdout,stderr}.log
                                          each rank's output (torchrun's layout: its `_<random>` suffix;
                                          `none`, mpirun and deepspeed name theirs by the launcher)
In a bundle (collect-logs' DEST):
  <host>/logs/<host>-agent.log, <host>-r<rank>.log; <host>/diag/; <host>/outputs/ (the node's OUTPUTS,
  whose logs/<run id>/<host>/ is its run dir); outputs/ when shared; run.json; manifest.json
"""

# Shipped beside the node programs that build a run's paths (node_agent.py, node_mpi_gate.py), which
# import it as a file beside them: so a node program too (tests/unit/test_architecture.py).
RUNS_ON_NODES = True

LOGS = "logs"  # under OUTPUTS
FILES = ".files"  # a host name cannot start with a dot: never a node's run dir
ATTEMPT = "attempt_0"  # torchrun's name for the ranks' directory of its (only) attempt
STDOUT, STDERR = "stdout.log", "stderr.log"

# a node's run dir
AGENT_LOG = "agent.log"  # the launcher's output, every rank prefixed
AGENT_EXIT = "agent.exit"  # the launcher's exit code, written as it ends
AGENT_PID = "agent.pid"
LEASE = "lease"  # renewed by the controller (attached) or the keeper (detached)
STOP = "stop"  # `clusterctl stop`'s mark
STOPPED = "stopped"  # the wrapper's: the ranks were stopped
HOSTFILE = "hostfile"  # mpirun's
METRICS = "metrics.jsonl"  # the node's metrics samples
SUPERVISION = "supervision.json"  # a detached run's config (0600: it holds the run's key)
SUPERVISOR_STATE = "supervisor.json"  # the supervisor's state, read back by the controller
FR_DUMP_PREFIX = "nccl_trace_rank_"  # the flight recorder's dump: torch appends the global rank
FR_PIPE_PREFIX = "fr_pipe_"  # its FIFO for a dump on demand: torch appends `<global rank>.pipe`

# a bundle
RECORD = "run.json"
MANIFEST = "manifest.json"
BUNDLE_LOGS, BUNDLE_DIAG, BUNDLE_OUTPUTS = "logs", "diag", "outputs"


def run_logs_relative(run_id):
    """`logs/<run id>`, relative to OUTPUTS (what collect-logs asks the nodes for)."""
    return LOGS + "/" + run_id


def node_run_relative(run_id, host):
    """`logs/<run id>/<host>`, relative to OUTPUTS."""
    return run_logs_relative(run_id) + "/" + host


def run_logs_dir(outputs, run_id):
    """`<outputs>/logs/<run id>`: every node's run dir, and the run's shipped files, are in it."""
    return outputs.rstrip("/") + "/" + run_logs_relative(run_id)


def node_run_dir(outputs, run_id, host):
    """A node's run dir: `<outputs>/logs/<run id>/<host>`."""
    return run_logs_dir(outputs, run_id) + "/" + host


def files_dir(outputs, run_id):
    """Where a run's shipped files land on every node: one path for all nodes (the job's argv is the
    same everywhere), beside the nodes' own run dirs."""
    return run_logs_dir(outputs, run_id) + "/" + FILES


def launcher_dir_name(run_id, launcher):
    """The ranks' parent directory in a run dir: `<run id>_<launcher>` (torchrun's: `<run id>_<random>`)."""
    return run_id + "_" + launcher


def ranks_dir(run_dir, run_id, launcher):
    """`<run dir>/<run id>_<launcher>/attempt_0`: the local rank's number is appended."""
    return run_dir + "/" + launcher_dir_name(run_id, launcher) + "/" + ATTEMPT


def ranks_glob(run_dir, run_id):
    """Every launcher's ranks' directory in a run dir, torchrun's random suffix included."""
    return ranks_dir(run_dir, run_id, "*")


def bundle_run_dir(run_id, host):
    """A node's run dir in a bundle, relative to DEST: `<host>/outputs/logs/<run id>/<host>`."""
    return host + "/" + BUNDLE_OUTPUTS + "/" + node_run_relative(run_id, host)


def bundle_shared_run_logs(run_id):
    """The run's logs dir in a bundle whose outputs all nodes shared: `outputs/logs/<run id>`."""
    return BUNDLE_OUTPUTS + "/" + run_logs_relative(run_id)
