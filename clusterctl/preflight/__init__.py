"""The preflight stage: every node's facts in one round trip, then verdicts.

`probe.py` gathers every node's facts in one round trip and runs the checks (the registry's image
pull check is handed in by the caller, the registry stage coming after this one); `node_facts.py` the
smaller probe the planner needs (GPUs, route to the master, hostname), and what `up` learned of it
kept for `run` (`remember`/`recall`: valid for the same inventory entry, boot and container start,
at most 24 h; `.clusterctl/facts/<cluster>.json`); `facts/` one command plus a pure parser per tool,
all run under LC_ALL=C; `verdicts/` pure facts -> `CheckResult`, one module per thing judged.

Cost: one round trip per node. What must be read where the ranks run (GPUs, /dev/shm,
python/torch/CUDA/NCCL versions) is one exec through the engine API; torch is read from
`torch/version.py` and the `nvidia_nccl_cu*` wheel beside it, not imported (2 s of CPU per node).
The rendezvous port is tested for real: a listener on the master's address and port, and a TCP
connect from every worker made by that worker's sshd (an SSH direct-tcpip channel, so it leaves
from the worker's own network stack and firewall and sshd's errno comes back; `docker exec python`
where forwarding is disabled). `up` with nothing to change takes ~2-3 s on 16 rehearsal nodes.

To add a check: a command + parser in `facts/`, a verdict in `verdicts/`, wired in `probe.py`; the
rendezvous port test: `probe.py` (the listener and connects), `verdicts/network.py` (the verdict)."""
