"""Name the root cause of a failed distributed run, and the fix, from its logs.

    from clusterctl.diagnose import diagnose_path, diagnose_text
    findings = diagnose_path(Path("logs/20240101-120000"))   # most likely cause first
    findings[0].to_json()  # {"cause", "host", "rank", "evidence", "fix"}

The failure signatures live in one table, `rules.RULES`; causes are CONTRACT.md's slugs.
"""
from clusterctl.diagnose.engine import diagnose_path, diagnose_text, render_fix
from clusterctl.diagnose.rules import CAUSES, RULES, Rule

__all__ = ["diagnose_text", "diagnose_path", "render_fix", "RULES", "CAUSES", "Rule"]
