"""A run that heals itself (issue 35, `job.restarts`), on the controller's side. The cause -> response
table is data (ground/healing.py); the loop of attempts around the run flow is backends/healing.py
(the same for every backend), which asks the run's engine (node/heal_policy.py `decide`: classify,
leave out, back off, give up) as a detached run's supervisor does on the cluster (node/engine.py; the
keepers launch with node/node_healing.py).

`detached.py`: what a detached run that heals itself hands the cluster (each node's launch template
with its tokens, the spares, the rules) and what its record learns back (its attempts, the hosts left
out, as the fleet's health record's events); `hooks.py`: what the one run flow and `clusterctl stop`
need of a run between attempts (a stop asked for, the run lock held across attempts, the latest
complete checkpoint, the attempts so far); `replicas.py`: an attached run's checkpoint replicas (issue 50:
each attempt's replica.json for the copier its wrappers host, the restore order of a relaunch)."""
