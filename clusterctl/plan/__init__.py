"""The Plan of a run, pure (values in, values out; no I/O): who runs what where, the command line on
every node, the files a run ships.

`topology.py` turns an inventory and the nodes' facts into a `Topology`: master first, ranks, nproc
per node, world size, the rendezvous endpoint, each node's NIC and environment; rank order is data,
built once, and every later stage reads it. `torchrun.py` is the torchrun argv and environment of one
node and the job's own argv with its placeholders; `container.py` a node-side argv in the job's
container or on the host (and container paths to host paths); `platform.py` a platform's variables
-> this node's place, for `launch --from-env`; `prompt.py` the prompt file, read once.

`job.launcher` (what starts the job on each node) has one meaning and one family of files:
`launcher.py` the dispatch (torchrun, `none`: the job once per node), `launcher_mpirun.py` (mpirun on
the master; the other nodes' orted through node/node_mpi_gate.py, clusterctl's authenticated
stand-in for SSH), `launcher_deepspeed.py` (DeepSpeed's per-node launcher); every one writes
torchrun's rank layout, so logs, collect and the first failure read them alike (docs/launchers.md).

`wrapper.py` builds the per-node wrapper: a small POSIX `sh` script that starts the launcher in its
own session (`docker exec -d` or `setsid -f`), so closing SSH never kills the job, and writes
`agent.log`, `agent.pid`, `agent.exit` in `<outputs>/logs/<run_id>/<host>/`. Environment values go
through a 0600 file, never a command line, and reach the launcher and its ranks only (not the
wrapper, which must outlive a stop to write `agent.exit`). Files a run ships (`shipping.py`:
nccl-test's benchmark, the metrics sampler of `metrics_sampler.py`, a prompt file) are written
through `mktemp` and a rename: nodes sharing `job.outputs` write the same file at once, and
container shells on different nodes have the same PIDs.

Rendezvous: torchrun runs with `--rdzv-backend=static --node-rank=R`. c10d assigns group ranks by
sorting agents' address strings (and pids), so "the master holds ranks 0..k-1" cannot be guaranteed
with it, and it carries the is_host/hostname traps. The static store waits `rendezvous.join_timeout`
seconds for all nodes, then fails clearly. Cleanup scope: every agent and rank clusterctl starts
carries `CLUSTERCTL_CLUSTER`, `CLUSTERCTL_HOST` and `CLUSTERCTL_RUN_ID` in its environment
(`marker.py`); cleanup (modules/process.py) matches those exact lines of `/proc/PID/environ`, never a
command-line pattern.

To change torchrun's command line or the ranks' environment: `torchrun.py`; another launcher:
`launcher.py` and its `launcher_*.py`; how ranks are laid out (nproc, world size, master): `topology.py`."""
