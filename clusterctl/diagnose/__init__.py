"""Name the root cause of a failed distributed run, and the fix, from its logs.

    from clusterctl.diagnose import diagnose_path, diagnose_text
    findings = diagnose_path(Path("logs/20240101-120000"))   # most likely cause first, top 3
    findings[0].to_json()  # {"cause", "host", "rank", "evidence", "fix", "confidence"}
    similar_cases(text)    # the nearest known public cases, for "looks like a known case"

Evidence first, then causes (issue 51): `evidence.py` (with `evidence_system.py` and
`evidence_config.py`) parses every line into typed records (NCCL messages, CUDA errors by enum, exits
and signals, exceptions with their module, store/container/kernel lines, usage errors, version
relations, interfaces, exhausted resources); `families.py` weighs which causes each shape supports.
The causes and their weighted signatures live in one table, `rules.RULES` (with `rules_topology.py`);
matching.py ranks both together. The corpus of real public failure logs that measures them is
`corpus/`, and `bench/score_batch.py` scores frozen batches once (see docs/diagnosis.md).

`engine.py` is the entry points (`diagnose_path`: a log file or a run directory; `diagnose`: with
the nearest known cases as runner-ups; it re-exports matching's names), so engine -> rundir ->
matching is one direction. Pure knowledge below every stage (it imports the ground only): the run
names a first failure's cause with it, collect-logs diagnoses what it brought back. To add a failure
cause: one row in `rules.py` (its fix in `fixes.py`, its heal class in node/heal_policy.py's TABLE),
and where its evidence has a shape of its own, a line in a families.py table."""
# The names below load on first use (PEP 562): a light part of the package (flight_recorder, the dumps'
# names) is imported on every run's path to its first rank, and must not bring the engine and its rules
# (~0.13 CPU s, docs/benchmarks.md §4a) with it.
_EXPORTS = {"diagnose_text": "engine", "diagnose_path": "engine", "CAUSES": "rules", "RULES": "rules",
            "Rule": "rules", "Signal": "rules", "similar_cases": "similar", "render_fix": "textmatch"}
__all__ = ["diagnose_text", "diagnose_path", "similar_cases", "render_fix", "RULES", "CAUSES", "Rule", "Signal"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
