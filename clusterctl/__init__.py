"""clusterctl: run distributed PyTorch jobs on bare-metal GPU nodes, Ansible-style."""

__version__ = "0.1.2"
