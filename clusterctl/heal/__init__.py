"""A run that heals itself (issue 35), on the controller's side: what a detached run that heals itself hands
the cluster, and the hooks the run flow and `clusterctl stop` need of a run between attempts."""
