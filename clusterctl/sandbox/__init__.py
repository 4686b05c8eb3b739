"""A rehearsal cluster on one Linux machine: N network namespaces with real sshd (and
Docker Engines), a private registry, and an inventory describing them (SANDBOX.md).

    from clusterctl.sandbox import up, down, status, Sandbox
    sb = up(3, docker=True)      # idempotent; another N adds or removes nodes in place
    sb.inventory_path            # the inventory YAML for these nodes
    down()                       # leaves nothing behind
"""
from clusterctl.sandbox.cluster import Sandbox, down, status, up
from clusterctl.sandbox.image import python_volumes
from clusterctl.sandbox.layout import BASE_IMAGE, DEFAULT_STATE_DIR, REGISTRY, Node

__all__ = ["Sandbox", "Node", "up", "down", "status", "python_volumes", "DEFAULT_STATE_DIR", "REGISTRY", "BASE_IMAGE"]
