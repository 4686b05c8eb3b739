"""Everything that runs on a node: the standard library only (Python 3.8+), imported by the controller
and shipped to the nodes as single files beside each other, never copied into the controller's code.

layout.py: every path of a run, on a node and in a collected bundle."""
