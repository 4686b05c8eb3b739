"""The vocabularies several stages share, below every stage, so that stages never reach sideways:
the cause -> response table of a run that heals itself (`healing.py`: the inventory's `job.heal` is
checked against it, the run and the detached healer read it), the local run records (`run_record.py`: one `RunRecord`
with `RunState`, the one vocabulary of a run's state; `records.py`: the one `RunStore` that writes and
reads `.clusterctl/runs/<run id>/run.json` for the run, `logs`, `stop`, the report), and
directories only their owner reads (`files.py`, for the state root and the executor's step logs), and
the one masking of secrets in the final text of everything written out (`masking.py`)."""
