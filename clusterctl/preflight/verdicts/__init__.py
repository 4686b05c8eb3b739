"""Preflight check verdicts: pure functions from facts to `CheckResult`s, one module per
thing judged (connection, gpus, interconnect, network, resources, cross_node; common holds what
they share). A probe section whose output was not understood warns (`cannot_read`), never passes.

Every detail names its evidence and every fix names the change, in inventory terms
where there is one (`hosts[NAME].gpus`, `container.shm_size`, `rendezvous.port`...).
A failure or warning with a cause from CONTRACT.md's vocabulary starts its detail with
the slug and a colon (`port_in_use: ...`); `cause_of` reads it back.

Cross-node verdicts take a mapping host -> fact (in inventory order, master first) and
return one result per host: pass for the agreeing majority, fail for the odd ones.
"""
from clusterctl.preflight.verdicts.common import CAUSES, cause_of
from clusterctl.preflight.verdicts.connection import check_container, check_docker, check_ssh
from clusterctl.preflight.verdicts.cross_node import check_clock_skew, check_topology, check_versions
from clusterctl.preflight.verdicts.common import cannot_read
from clusterctl.preflight.verdicts.gpus import (check_driver_version, check_fabric, check_gpu_busy, check_gpu_runtime,
                                                check_gpus, gpu_selection)
from clusterctl.preflight.verdicts.interconnect import check_gpu_nics, check_nvlink
from clusterctl.preflight.verdicts.network import (check_hostname, check_ib, check_nic, check_rdzv_port_free,
                                                   check_rdzv_reachable)
from clusterctl.preflight.verdicts.resources import check_disk, check_memory, check_shm

__all__ = ["CAUSES", "cause_of", "check_container", "check_docker", "check_ssh", "check_clock_skew", "check_topology",
           "check_versions", "check_driver_version", "check_fabric", "check_gpu_busy", "check_gpu_runtime", "check_gpus",
           "gpu_selection", "check_hostname", "check_ib", "check_nic", "check_rdzv_port_free", "check_rdzv_reachable",
           "check_disk", "check_memory", "check_shm", "cannot_read", "check_gpu_nics", "check_nvlink"]
