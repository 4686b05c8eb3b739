"""The torchrun command line, its environment, and the job's argv expansion (pure)."""
from __future__ import annotations

from string import Template

import pytest

from clusterctl.errors import UsageError
from clusterctl.plan.torchrun import (
    RANK_PREFIX_RE, expand_args, job_argv, placeholder_values, prompt_text, rank_log_files, torchrun_argv, torchrun_env,
)
from clusterctl.models import ContainerSpec, EnvVar, Host, Inventory, JobSpec, RendezvousSpec
from clusterctl.plan.topology import NodeFacts, plan

NASTY = 'say "hi" $(rm -rf /) `id` \\n \\ {run_id} {0} {} $HOME $$ ${local_rank} $local_rank\nline2\ttab ünï 中文 🚀'

WAN_ARGS = ("--task", "t2v-A14B", "--size", "832*480", "--ulysses_size", "{world_size}", "--prompt", "{prompt}",
            "--save_file", "{outputs}/{run_id}.mp4")


def two_node_inventory(nproc=2, container=None, **job):
    hosts = (Host("node-080", "172.31.0.80"), Host("node-082", "172.31.0.82"))
    return Inventory(name="t", hosts=hosts, container=container, rendezvous=RendezvousSpec(port=29511, join_timeout=90),
                     job=JobSpec(command=("generate.py",), args=WAN_ARGS, nproc_per_node=nproc, outputs="/workspace/output", **job))


def two_node_topology(inv=None):
    inv = inv or two_node_inventory()
    facts = {h.name: NodeFacts(gpu_ids=(0, 1), nic="eth0", address=h.address) for h in inv.hosts}
    return inv, plan(inv, facts)


def values(topo, prompt=NASTY):
    return placeholder_values(topo, "run-1", prompt, "/workspace/output")


# --------------------------------------------------------------------------- expansion


def test_placeholders_are_replaced_by_exact_text():
    inv, topo = two_node_topology()
    args = expand_args(inv.job, values(topo, "a cat"))
    assert args == ("--task", "t2v-A14B", "--size", "832*480", "--ulysses_size", "4", "--prompt", "a cat",
                    "--save_file", "/workspace/output/run-1.mp4")


def test_the_prompt_is_inserted_byte_for_byte_and_never_rescanned():
    inv, topo = two_node_topology()
    args = expand_args(inv.job, values(topo))
    assert args[args.index("--prompt") + 1] == NASTY  # "{run_id}" inside the prompt stays as it is


def test_unknown_braces_in_the_template_survive():
    job = JobSpec(command=("x.py",), args=("--json", '{"a": {nnodes}}', "{unknown}"))
    inv, topo = two_node_topology()
    assert expand_args(job, values(topo)) == ("--json", '{"a": 2}', "{unknown}")


def test_job_argv_is_command_then_args_expanded():
    job = JobSpec(command=("{outputs}/run.py",), args=("--n", "{nproc_per_node}"))
    inv, topo = two_node_topology()
    assert job_argv(job, values(topo)) == ("/workspace/output/run.py", "--n", "2")


def test_a_placeholder_without_a_value_is_a_usage_error():
    job = JobSpec(command=("x.py",), args=("{prompt}",))
    with pytest.raises(UsageError):
        expand_args(job, {"world_size": "2"})


def test_a_nul_byte_or_an_oversized_argument_is_refused():
    job = JobSpec(command=("x.py",), args=("{prompt}",))
    with pytest.raises(UsageError):
        expand_args(job, {"prompt": "a\x00b"})
    with pytest.raises(UsageError):
        expand_args(job, {"prompt": "x" * 200_000})


def test_an_empty_command_is_a_usage_error():
    with pytest.raises(UsageError):
        job_argv(JobSpec(command=()), {})


def test_prompt_text_drops_only_the_final_newline():
    assert prompt_text("a\n\n") == "a\n"
    assert prompt_text("a\r\n") == "a"
    assert prompt_text("  a b  ") == "  a b  "


# --------------------------------------------------------------------------- torchrun argv


def test_torchrun_argv_uses_static_rendezvous_with_the_node_rank():
    inv, topo = two_node_topology()
    worker = topo.node("node-082")
    argv = torchrun_argv(topo, worker, "run-1", ("generate.py", "--task", "t2v-A14B"))
    assert argv[:3] == ("python3", "-m", "torch.distributed.run")
    for flag in ("--nnodes=2:2", "--nproc-per-node=2", "--rdzv-backend=static", "--rdzv-endpoint=172.31.0.80:29511",
                 "--rdzv-id=run-1", "--node-rank=1", "--rdzv-conf=timeout=90", "--local-addr=172.31.0.82",
                 "--max-restarts=0", "--monitor-interval=0.1"):
        assert flag in argv
    assert argv[-3:] == ("generate.py", "--task", "t2v-A14B")
    assert "--node-rank=0" in torchrun_argv(topo, topo.node("node-080"), "run-1", ("generate.py",))


def test_torchrun_argv_with_outputs_writes_per_rank_logs_under_the_run_and_host():
    inv, topo = two_node_topology()
    argv = torchrun_argv(topo, topo.node("node-082"), "run-1", ("generate.py",), python="/opt/py/bin/python", outputs="/workspace/output/")
    assert argv[0] == "/opt/py/bin/python"
    assert "--log-dir=/workspace/output/logs/run-1/node-082" in argv
    assert "--redirects=3" in argv and "--tee=3" in argv


def test_dollars_in_worker_args_are_doubled_so_torchrun_templates_give_them_back():
    inv, topo = two_node_topology()
    argv = torchrun_argv(topo, topo.node("node-080"), "r", ("generate.py", "--prompt", NASTY))
    sent = argv[-1]
    # torchrun's macros.substitute: Template(arg).safe_substitute(local_rank=...)
    assert Template(sent).safe_substitute(local_rank="3") == NASTY


def test_module_and_executable_jobs_get_the_right_torchrun_mode():
    inv, topo = two_node_topology()
    node = topo.master
    assert torchrun_argv(topo, node, "r", ("-m", "pkg.train", "--x"))[-3:] == ("--module", "pkg.train", "--x")
    tail = torchrun_argv(topo, node, "r", ("/usr/bin/env", "a$b"))[-3:]
    assert tail == ("--no-python", "/usr/bin/env", "a$$b")  # the entrypoint itself is not substituted


def test_an_ipv6_master_is_bracketed_in_the_endpoint():
    hosts = (Host("a", "fd00::1"), Host("b", "fd00::2"))
    inv = Inventory(name="t", hosts=hosts, job=JobSpec(command=("x.py",), nproc_per_node=1))
    topo = plan(inv, {h.name: NodeFacts(nic="eth0") for h in hosts})
    assert "--rdzv-endpoint=[fd00::1]:29500" in torchrun_argv(topo, topo.master, "r", ("x.py",))


# --------------------------------------------------------------------------- env


def test_torchrun_env_carries_the_node_env_and_rank_prefixes():
    inv, topo = two_node_topology(two_node_inventory(env=(EnvVar("OMP_NUM_THREADS", "4"),)))
    env = dict(torchrun_env(topo.node("node-082"), inv))
    assert env["NCCL_SOCKET_IFNAME"] == "eth0" and env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert env["OMP_NUM_THREADS"] == "4"  # the job's own value wins over the default
    assert env["CLUSTERCTL_HOST"] == "node-082"
    prefix = Template(env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"]).safe_substitute(rank=3, local_rank=1, role_name="default")
    assert prefix == "[node-082 rank3]: "
    match = RANK_PREFIX_RE.match(prefix + "hello")
    assert match and match["host"] == "node-082" and match["rank"] == "3"


def test_cpu_nodes_with_several_ranks_default_to_one_omp_thread():
    hosts = (Host("n1", "198.18.0.11"),)
    inv = Inventory(name="t", hosts=hosts, job=JobSpec(command=("x.py",), nproc_per_node=2))
    topo = plan(inv, {"n1": NodeFacts(nic="eth0")})
    assert dict(torchrun_env(topo.master, inv))["OMP_NUM_THREADS"] == "1"


def test_defaults_the_container_env_sets_are_left_to_the_container():
    inv = two_node_inventory(container=ContainerSpec(image="x", env=(EnvVar("OMP_NUM_THREADS", "8"),)))
    inv, topo = two_node_topology(inv)
    assert "OMP_NUM_THREADS" not in dict(torchrun_env(topo.master, inv))


# --------------------------------------------------------------------------- per-rank logs


def test_rank_log_files_map_each_global_rank_to_its_host_and_torchrun_path():
    inv, topo = two_node_topology()
    logs = rank_log_files(topo, "run-1", "/workspace/output")
    assert [(l.host, l.rank, l.local_rank) for l in logs] == [
        ("node-080", 0, 0), ("node-080", 1, 1), ("node-082", 2, 0), ("node-082", 3, 1)]
    assert logs[3].stderr_glob == "/workspace/output/logs/run-1/node-082/run-1_*/attempt_0/1/stderr.log"
