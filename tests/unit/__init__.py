"""The unit tier: no process, no socket (conftest.py holds it)."""
