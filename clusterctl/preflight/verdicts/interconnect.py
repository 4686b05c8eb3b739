"""Verdicts on how a node's GPUs reach each other and the network: NVLink/NVSwitch from
`nvidia-smi topo -m` (with the fabric state of `nvidia-smi -q`), and the NIC nearest each GPU."""
from __future__ import annotations

from collections import Counter
from typing import Optional

from clusterctl.models import CheckResult, GpuSelection
from clusterctl.preflight.facts.ib import IbStatus
from clusterctl.preflight.facts.nvlink import GpuTopology, SmiQuery, link_rank, nvlink_count
from clusterctl.preflight.verdicts.common import FAIL, PASS, WARN, cannot_read, verdict


def _gpu_labels(topology: GpuTopology, selection: GpuSelection) -> list[str]:
    if isinstance(selection, (tuple, list)):
        return [f"GPU{i}" for i in selection if f"GPU{i}" in topology.gpus]
    if isinstance(selection, int) and not isinstance(selection, bool):
        return list(topology.gpus[:selection])
    return list(topology.gpus)


def check_nvlink(host: str, topology: GpuTopology, fabric: Optional[SmiQuery] = None,
                 selection: GpuSelection = "all") -> CheckResult:
    """GPUs expected on NVLink that are not. NVLink is expected between every pair of the job's
    GPUs when the node has an NVSwitch fabric (`nvidia-smi -q` shows a fabric state) or when any
    GPU reaches all the others over NVLink (the NVSwitch pattern); pairwise bridges (H100 NVL,
    RTX with a bridge) and PCIe-only boards are described, not judged."""
    if topology.error and not topology.unreadable:
        return verdict(host, "nvlink", PASS, f"no GPU topology to check: {topology.error}")
    if topology.unreadable:
        return cannot_read(host, "nvlink", topology.unreadable)
    gpus = _gpu_labels(topology, selection)
    if len(gpus) < 2:
        return verdict(host, "nvlink", PASS, f"{len(gpus)} GPU on {host}: no GPU-to-GPU link to check")
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    counts = {(a, b): nvlink_count(topology.link(a, b)) for a, b in pairs}
    linked_to_all = [g for g in gpus if all(counts[tuple(sorted((g, o), key=gpus.index))] for o in gpus if o != g)]
    nvswitch = bool(fabric and fabric.fabric_applicable)
    if not any(counts.values()):
        if nvswitch:
            return verdict(host, "nvlink", FAIL, f"{host} has an NVSwitch fabric but no NVLink between its GPUs "
                           f"(GPU0-GPU1: {topology.link(gpus[0], gpus[1])}): NCCL falls back to PCIe",
                           f"check the fabric manager on {host} (`systemctl status nvidia-fabricmanager`) and "
                           "`nvidia-smi nvlink -s`", "fabricmanager")
        kinds = ", ".join(sorted({topology.link(a, b) or "?" for a, b in pairs}))
        return verdict(host, "nvlink", PASS, f"no NVLink on {host}: GPUs talk over PCIe ({kinds})")
    if not (nvswitch or linked_to_all):
        linked = ", ".join(f"{a}-{b} NV{n}" for (a, b), n in counts.items() if n)
        return verdict(host, "nvlink", PASS, f"NVLink between pairs only ({linked}); other pairs use PCIe")
    missing = [g for g in gpus if g not in linked_to_all]
    if missing:
        detail = "; ".join(f"{g} reaches " + ", ".join(f"{o} over {topology.link(g, o)}" for o in gpus
                                                        if o != g and not nvlink_count(topology.link(g, o)))
                           for g in missing)
        return verdict(host, "nvlink", FAIL, f"GPUs on {host} expected on NVLink are not: {detail}: collectives "
                       "through them drop to PCIe speed", f"check `nvidia-smi nvlink -s` on {host} (inactive links), "
                       "the fabric manager, or leave those GPUs out with hosts[].gpus",
                       "fabricmanager" if nvswitch else None)
    usual, _ = Counter(counts.values()).most_common(1)[0]
    fewer = [f"{a}-{b} NV{n}" for (a, b), n in counts.items() if n < usual]
    if fewer:
        return verdict(host, "nvlink", WARN, f"fewer NVLinks between {', '.join(fewer)} than the NV{usual} of the "
                       f"other pairs on {host}", f"check `nvidia-smi nvlink -s` on {host} for inactive links")
    return verdict(host, "nvlink", PASS, f"{len(gpus)} GPUs, every pair on NV{usual}"
                   + (" (NVSwitch fabric)" if nvswitch else ""))


def check_gpu_nics(host: str, topology: GpuTopology, ib: IbStatus, selection: GpuSelection = "all") -> CheckResult:
    """The RDMA NIC nearest each GPU, and whether it is one NCCL can use. A GPU whose nearest
    NIC (same PCIe switch) is down sends its inter-node traffic across the host bridge or the
    CPU interconnect to another NIC: GPUDirect RDMA is lost for it."""
    if topology.unreadable or (ib.unreadable and topology.nics):
        return cannot_read(host, "gpu_nics", topology.unreadable or f"the InfiniBand ports: {ib.unreadable}")
    if topology.error or not topology.nics or not ib.ports:
        return verdict(host, "gpu_nics", PASS, "no RDMA NIC in the GPU topology: nothing to pair")
    usable = {port.hca for port in ib.nccl_ports}
    # the rails: HCAs of the link layer NCCL uses (a front-end Ethernet NIC beside IB rails is not one)
    known = {port.hca for port in ib.ports if ib.link_layer is None or port.link_layer == ib.link_layer}
    pairing, stranded = [], []
    for gpu in _gpu_labels(topology, selection):
        distances = {nic: link for nic, link in topology.nic_distances(gpu).items() if nic in known}
        if not distances:
            continue
        best = min(link_rank(link) for link in distances.values())
        nearest = [nic for nic, link in distances.items() if link_rank(link) == best]
        near_usable = [nic for nic in nearest if nic in usable]
        if near_usable:
            pairing.append(f"{gpu}: {near_usable[0]} ({distances[near_usable[0]]})")
            continue
        fallback = next((nic for nic in distances if nic in usable), None)
        stranded.append(f"{gpu}'s nearest NIC {'/'.join(nearest)} ({distances[nearest[0]]}) {_why_unused(ib, nearest[0])}; "
                        + (f"it would use {fallback} ({distances[fallback]})" if fallback else "no usable NIC"))
    if stranded:
        return verdict(host, "gpu_nics", WARN, "; ".join(stranded), f"bring those ports up on {host} (see the ib "
                       "check); until then their GPUs' inter-node traffic crosses the CPU", "ib_config")
    return verdict(host, "gpu_nics", PASS, ", ".join(pairing) or "no GPU with an RDMA NIC listed")


def _why_unused(ib: IbStatus, hca: str) -> str:
    ports = [port for port in ib.ports if port.hca == hca]
    if not any(port.active for port in ports):
        return "is down (" + ", ".join(f"{p.state}/{p.physical_state}" for p in ports) + ")"
    rails = ib.nccl_ports[0].rate if ib.nccl_ports else None
    return f"runs at {ports[0].rate or '?'} Gb/s, slower than the {rails} Gb/s rails in NCCL_IB_HCA"
