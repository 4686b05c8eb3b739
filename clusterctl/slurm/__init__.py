"""Slurm: run a job on an allocation instead of on the inventory's hosts (issue #20).

- timelimit.py: Slurm's time limits <-> seconds (pure)
- partition.py: sinfo/squeue output -> what the partition offers; the pre-submission verdicts (pure)
- submit.py: the argv of salloc/srun/scancel/sbatch for an inventory's `scheduler:` (pure)
- sbatch.py: `clusterctl export sbatch`, the batch script (pure text)
- transport.py: a node of the allocation as a transport (`srun --overlap -w NODE`)
- allocation.py: get, describe and cancel the allocation (the only runner of Slurm commands)
- run.py: `clusterctl run` on an allocation: allocate, plan, the JobRunner, cancel
"""
