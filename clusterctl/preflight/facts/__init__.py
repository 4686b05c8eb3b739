"""Facts: a command to run on a host plus a pure parser of what it prints.

One module per tool. Parsers take text (stdout with stderr appended, see `combined`)
and return frozen values; they never raise on odd output and skip the `# source:`
lines that open the captured fixtures.
"""
from clusterctl.preflight.facts._text import combined, strip_provenance
from clusterctl.preflight.facts.firewall import (
    IPTABLES_SAVE, NFT_RULESET, UFW_STATUS, Firewall, rules_blocking,
)
from clusterctl.preflight.facts.host import (
    CLOCK, DOCKER_INFO, MEMINFO, VERSIONS_SNIPPET, ContainerState, DiskUsage, DockerInfo, MemInfo, Versions,
    clock_offset, df_command, docker_inspect_command, parse_clock, parse_df, parse_docker_info,
    parse_docker_inspect, parse_meminfo, parse_versions, versions_command,
)
from clusterctl.preflight.facts.ib import IBSTAT, IbPort, IbStatus, parse_ibstat
from clusterctl.preflight.facts.net import (
    HOSTNAME_RESOLUTION, IP_ADDR, SS_LISTEN, HostnameResolution, Interface, Listener, RouteInfo,
    free_port_near, holder_of, interface_with_address, is_virtual_interface, parse_hostname_resolution,
    parse_ip_addr, parse_route_get, parse_ss, route_get_command,
)
from clusterctl.preflight.facts.nvidia import (
    ANY_EXIT, GPU_QUERY_FIELDS, NVIDIA_SMI_APPS, NVIDIA_SMI_GPUS, NVIDIA_SMI_QUERY, NVIDIA_SMI_TABLE,
    NVIDIA_SMI_TOPO, FabricState, Gpu, GpuInventory, GpuProcess, GpuTopology, SmiQuery, no_gpu_reason,
    parse_compute_apps_csv, parse_gpu_csv, parse_smi_query, parse_smi_table, parse_topology,
)

__all__ = [name for name in dir() if not name.startswith("_") and name not in ("firewall", "host", "ib", "net", "nvidia")]
