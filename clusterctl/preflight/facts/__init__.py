"""Facts: a command to run on a host plus a pure parser of what it prints.

One module per tool. Parsers take text (stdout with stderr appended, see `combined`)
and return frozen values; they never raise on odd output and skip the `# source:`
lines that open the captured fixtures. Output a parser does not understand is reported
as `unreadable` (with the command and an excerpt), never read as "nothing there".
"""
from clusterctl.preflight.facts._text import combined, excerpt, in_c_locale, strip_provenance, unknown_option
from clusterctl.preflight.facts.disk import DiskUsage, df_at_argv, df_command, df_unreadable, parse_df
from clusterctl.preflight.facts.firewall import (
    IPTABLES_SAVE, NFT_RULESET, UFW_STATUS, Firewall, rules_blocking,
)
from clusterctl.preflight.facts.gpu_runtime import GPU_HOOKS, GpuHooks, parse_gpu_hooks
from clusterctl.preflight.facts.host import (
    BOOT_ID, CLOCK, DOCKER_INFO, MEMINFO, VERSIONS_SNIPPET, ContainerState, DockerInfo, MemInfo, Versions,
    clock_offset, docker_inspect_command, parse_clock, parse_docker_info,
    parse_docker_inspect, parse_meminfo, parse_versions, versions_command,
)
from clusterctl.preflight.facts.ib import IB_SYSFS, IBSTAT, IbPort, IbStatus, ib_status, parse_ib_sysfs, parse_ibstat
from clusterctl.preflight.facts.net import (
    HOSTNAME_RESOLUTION, IP_ADDR, IP_ADDR_PROBE, SS_LISTEN, SS_LISTENERS_SCRIPT, HostnameResolution, Interface, Listener,
    RouteInfo, free_port_near, holder_of, interface_with_address, is_virtual_interface, parse_hostname_resolution,
    parse_ip_addr, parse_route_get, parse_ss, route_get_command, ss_unreadable,
)
from clusterctl.preflight.facts.nvidia import (
    ANY_EXIT, GPU_QUERY_FIELDS, NVIDIA_SMI_APPS, NVIDIA_SMI_GPUS, NVIDIA_SMI_TABLE, Gpu, GpuInventory, GpuProcess,
    compute_apps_unreadable, no_gpu_reason, parse_compute_apps_csv, parse_gpu_csv, parse_smi_table,
)
from clusterctl.preflight.facts.nvlink import (
    NVIDIA_SMI_QUERY, NVIDIA_SMI_TOPO, FabricState, GpuTopology, SmiQuery, link_rank, nvlink_count,
    parse_smi_query, parse_topology,
)

__all__ = [name for name in dir() if not name.startswith("_") and name not in (
    "disk", "firewall", "gpu_runtime", "host", "ib", "net", "nvidia", "nvlink")]
