"""The job stage: who runs what where, and running it.

topology.py (inventory + node facts -> ranks, pure), torchrun.py (the torchrun command line
and environment, pure), container.py (a node-side command in the container or on the host),
agent.py (the per-node wrapper that starts torchrun detached and holds the lease),
runner.py (launch, watch, fail fast, stop), platform.py (`launch --from-env`: a platform's
variables -> this node's place).
"""
