"""A run that heals itself (issue 35, `job.restarts`), on the controller's side. The cause -> response
table is data (ground/healing.py); the loop of attempts around the run flow is backends/healing.py
(the same for every backend: classify, leave out, relaunch); a detached run heals on the cluster
(node/node_healing.py beside the node agent).

`detached.py`: what a detached run that heals itself hands the cluster (each node's launch template
with its tokens, the spares, the rules) and what its record learns back (its attempts, the hosts left
out, as the fleet's health record's events); `hooks.py`: what the one run flow and `clusterctl stop`
need of a run between attempts (a stop asked for, the run lock held across attempts, the latest
complete checkpoint, the attempts so far)."""
