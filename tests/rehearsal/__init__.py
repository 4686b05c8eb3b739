"""The rehearsal tier: the rehearsal cluster (Docker, sshd, root); conftest.py has its session fixture."""
