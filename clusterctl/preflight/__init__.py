"""The preflight stage: every node's facts in one round trip, then verdicts.

probe.py (the batch probe and the checks it feeds), node_facts.py (the facts the planner
needs), facts/ (one command + parser per tool), verdicts/ (pure facts -> CheckResult).
"""
