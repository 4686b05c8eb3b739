"""Carrying out a Plan: the runner (launch, watch, fail fast, stop), the hand-over to the nodes (`run
--detach`, a hang-up), the phases of a run, the look for a run already going, and `launch --from-env`."""
