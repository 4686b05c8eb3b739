"""clusterctl: run distributed PyTorch jobs on bare-metal GPU nodes, Ansible-style.

    from clusterctl import Cluster
    cluster = Cluster.load("inventory.yaml")

`Cluster` is imported on first use (module __getattr__): `import clusterctl` stays cheap for the CLI."""

__version__ = "0.1.2"

__all__ = ["Cluster", "Run", "__version__"]


def __getattr__(name: str):
    if name in ("Cluster", "Run"):
        from clusterctl import api

        return getattr(api, name)
    raise AttributeError(f"module 'clusterctl' has no attribute {name!r}")
