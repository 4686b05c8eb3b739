"""Slurm: run a job on an allocation instead of on the inventory's hosts (issue #20).

- partition.py: sinfo/squeue output -> what the partition offers; the pre-submission verdicts (pure,
  tested on captured outputs); Slurm's time forms are inventory/timelimit.py
- submit.py: the argv of salloc/srun/scancel/sbatch for an inventory's `scheduler:` (pure)
- sbatch.py: `clusterctl export sbatch`, the batch script (pure text)
- transport.py: a node of the allocation as a transport (each command an `srun --overlap` step),
  which is how `run` keeps the one runner; stepshell.py: one long-lived step per node for the short
  commands
- allocation.py: get, describe and cancel the allocation (the only runner of Slurm commands)
- run.py: the hook the Slurm backend and `collect-logs` enter (`on_allocation`: check, allocate, yield the
  nodes as hosts, scancel)"""
