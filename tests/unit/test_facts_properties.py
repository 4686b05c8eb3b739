"""Every parser in clusterctl/preflight/facts/ returns a value, never raises, on whatever a node
prints: arbitrary text, undecodable bytes, huge numbers, NULs, half a JSON document, and the real
captures cut at any point or with lines of another tool spliced in."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from clusterctl_helpers import examples
from hypothesis import strategies as st

from clusterctl.preflight import facts
from clusterctl.preflight.probe import parse_probe
from clusterctl.transport import BATCH_MARK

TOOLS = Path(__file__).resolve().parents[1] / "fixtures" / "tools"
CAPTURES = sorted(str(p.relative_to(TOOLS)) for p in TOOLS.rglob("*") if p.is_file() and p.suffix in (".txt", ".csv",
                                                                                                     ".json"))
FAST = settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])

ANY_CHAR = st.characters(blacklist_categories=())
TRICKY = st.sampled_from([
    "\n", "\t", " ", ",", ":", "=", "'", '"', "[", "]", "{", "}", "\0", "\r", "-", "-1", "9" * 400, "²", "٣", "1e999",
    "nan", "N/A", "[N/A]", "GPU0", "NIC0", "NV18", "PIX", "SYS", "X", "CA 'mlx5_0'", "Port 1:", "State: Active",
    "Physical state: LinkUp", "Rate: 400", "Link layer: Ethernet", "port mlx5_0/ports/1", "state=4: ACTIVE",
    "phys_state=5: LinkUp", "rate=400 Gb/sec (4X NDR)", "sysfs: /sys/class/infiniband", "sysfs: none", "path: /",
    "Filesystem", "1B-blocks", "1K-块", "1024-blocks", "文件系统", "未找到命令", "LISTEN", "State", "0.0.0.0:29500",
    'users:(("python3",pid=1,fd=3))', "index, uuid", "pid, process_name", "gpu_uuid", " [MiB]", "Driver Version:",
    "KMD Version:", "CUDA UMD Version:", "GPU 00000000:18:00.0", "    Fabric", "State : In Progress", "dev eth0",
    "src 10.0.0.1", "local", "Option \"-j\" is unknown", "invalid option -- 'H'", "ibpanic:", "MemTotal: 1 kB",
    "dockerd_path: /usr/bin", "end: ok", "cdi_spec: /etc/cdi/nvidia.yaml", "nvidia-container-runtime-hook: none",
    "Runtimes: runc", "Server Version: 1", "[{", "}]", "null", "true", "\udcff", "\ufffd"])
TRICKY_TEXT = st.lists(st.one_of(TRICKY, st.text(ANY_CHAR, max_size=6)), max_size=80).map("".join)
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(ANY_CHAR, max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(
        ["ServerVersion", "Runtimes", "ServerErrors", "CDISpecDirs", "DefaultRuntime", "CgroupDriver", "State",
         "HostConfig", "Config", "Name", "DeviceRequests", "Capabilities", "Count", "DeviceIDs", "Running", "dst",
         "dev", "prefsrc", "gateway", "type", "ifname", "ifindex", "addr_info", "local", "prefixlen", "flags",
         "python", "torch", "nccl", "gpu_count", "error"]), inner, max_size=5)),
    max_leaves=24).map(json.dumps)


@st.composite
def mangled_captures(draw) -> str:
    """A real capture cut at a random point, with a random piece of another one spliced in."""
    text = (TOOLS / draw(st.sampled_from(CAPTURES))).read_text()
    other = (TOOLS / draw(st.sampled_from(CAPTURES))).read_text()
    cut = draw(st.integers(0, len(text)))
    at = draw(st.integers(0, len(other)))
    return text[:cut] + other[at:at + draw(st.integers(0, 400))] + draw(TRICKY_TEXT)


REMOTE_TEXT = st.one_of(st.text(ANY_CHAR, max_size=300), TRICKY_TEXT, JSON_VALUES, mangled_captures(),
                        st.binary(max_size=300).map(lambda b: b.decode("utf-8", "surrogateescape")))

# Every parser of the facts package, as a function of one text.
PARSERS = {
    "parse_gpu_csv": facts.parse_gpu_csv,
    "parse_compute_apps_csv": facts.parse_compute_apps_csv,
    "compute_apps_unreadable": facts.compute_apps_unreadable,
    "parse_smi_table": facts.parse_smi_table,
    "parse_topology": facts.parse_topology,
    "parse_smi_query": facts.parse_smi_query,
    "no_gpu_reason": facts.no_gpu_reason,
    "parse_ibstat": facts.parse_ibstat,
    "parse_ib_sysfs": facts.parse_ib_sysfs,
    "ib_status": lambda text: facts.ib_status(text, text[::-1]),
    "parse_route_get": facts.parse_route_get,
    "parse_ip_addr": facts.parse_ip_addr,
    "parse_ss": facts.parse_ss,
    "ss_unreadable": facts.ss_unreadable,
    "parse_hostname_resolution": facts.parse_hostname_resolution,
    "parse_df": facts.parse_df,
    "df_unreadable": facts.df_unreadable,
    "parse_meminfo": facts.parse_meminfo,
    "parse_clock": facts.parse_clock,
    "parse_versions": facts.parse_versions,
    "parse_docker_info": facts.parse_docker_info,
    "parse_docker_inspect": facts.parse_docker_inspect,
    "parse_gpu_hooks": facts.parse_gpu_hooks,
    "rules_blocking": lambda text: facts.rules_blocking(text, 29500),
    "firewall": lambda text: facts.Firewall(iptables=text, nft=text, ufw=text).rules_blocking(29500, src="10.0.0.1"),
    "strip_provenance": facts.strip_provenance,
    "excerpt": facts.excerpt,
    "unknown_option": facts.unknown_option,
}


def test_every_public_parser_of_the_facts_package_is_covered():
    public = {name for name in facts.__all__ if name.startswith("parse_") or name.endswith("_unreadable")}
    assert public <= set(PARSERS), f"add to PARSERS: {sorted(public - set(PARSERS))}"


@pytest.mark.parametrize("name", sorted(PARSERS))
@FAST
@given(text=REMOTE_TEXT)
@example(text="")
@example(text="\0" * 10)
@example(text="*filter\n:INPUT DROP [0:0]\n:")  # iptables-save cut after a chain line's colon
@example(text="2: eth0: <BROADCAST> mtu 1500\n    inet \nfoo")  # `ip addr` cut after "inet"
@example(text="9" * 5000 + "\n" + "x" * 100_000)
def test_a_parser_of_node_output_never_raises(name, text):
    PARSERS[name](text)


@FAST
@given(data=st.dictionaries(st.text(max_size=20), st.recursive(st.none() | st.integers() | st.text(max_size=8),
                                                                lambda inner: st.lists(inner) | st.dictionaries(
                                                                    st.text(max_size=8), inner), max_leaves=10)))
def test_docker_parsers_accept_any_sdk_dict(data):
    facts.parse_docker_info(data)
    facts.parse_docker_inspect(data)


@FAST
@given(sections=st.dictionaries(st.sampled_from(
    ["docker", "container", "in_container", "gpus", "apps", "topo", "smi_query", "route", "addr", "hostname",
     "ib_sysfs", "ibstat", "disk", "memory", "ss", "gpu_hooks", "shm", "versions"]), REMOTE_TEXT, max_size=8))
def test_the_whole_probe_parses_whatever_the_sections_hold(sections):
    stdout = "".join(f"{BATCH_MARK}{name}\n{text}\n" for name, text in sections.items())
    parse_probe(stdout)
