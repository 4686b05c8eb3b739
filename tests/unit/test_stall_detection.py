"""Stall detection in `run` and `clusterctl stacks`: the inventory key and the option; the watch's
decisions on the node script's real output; and for real, with 2 torchrun gloo ranks on this machine
through a `connection: local` inventory (tests/fixtures/jobs/stall.py): a rank sleeping in a named
function is named and the run stopped; a silent job that computes is left alone; Ctrl-C while the
stacks are taken stops everything; `clusterctl stacks` on a run that goes on."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from clusterctl.cli import build_parser
from clusterctl.executor import Connections
from clusterctl.inventory.load import parse_inventory
from clusterctl.watch.rollcall import HANG
from clusterctl.watch.stalls import JobShape, StallWatch
from clusterctl.models import CommandResult, Host, Inventory

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PYSPY = FIXTURES / "pyspy"


# --------------------------------------------------------------------------- configuration


def test_stall_timeout_defaults_to_900_seconds_and_0_turns_it_off():
    base = "name: x\nhosts: [{name: a, address: 10.0.0.1}]\njob: {command: [t.py]"
    assert parse_inventory(base + "}\n", "i.yaml").job.stall_timeout == 900
    assert parse_inventory(base + ", stall_timeout: 0}\n", "i.yaml").job.stall_timeout == 0
    assert parse_inventory(base + ", stall_timeout: 42.5}\n", "i.yaml").job.stall_timeout == 42.5


@pytest.mark.parametrize("value", ["-1", "ten", "true"])
def test_a_stall_timeout_that_is_not_seconds_is_refused_with_its_line(value):
    with pytest.raises(Exception) as error:
        parse_inventory(f"name: x\nhosts: [{{name: a, address: 10.0.0.1}}]\njob:\n  stall_timeout: {value}\n", "i.yaml")
    assert "i.yaml:4" in str(error.value) and "stall_timeout" in str(error.value)


def test_run_takes_stall_timeout_in_seconds():
    parser = build_parser()
    assert parser.parse_args(["run", "--stall-timeout", "15", "p.txt"]).stall_timeout == 15.0
    assert parser.parse_args(["run", "p.txt"]).stall_timeout is None
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--stall-timeout", "-3", "p.txt"])


# --------------------------------------------------------------------------- the watch, on real node output


class _Replay:
    """A transport that answers the stack script with a captured output (the node side is tested for real below)."""

    def __init__(self, text: str):
        self.text = text

    def run(self, command, on_line=None):
        return CommandResult(0, self.text)


def watch(fixture: str, notes: list) -> StallWatch:
    inventory = Inventory("c", (Host("local", "127.0.0.1", connection="local"),))
    connections = Connections(lambda host: _Replay((PYSPY / fixture).read_text()))
    shape = JobShape((0, 1), ("127.0.0.1", 29500), {})
    return StallWatch(inventory, shape, "r1", connections, lambda e: notes.append(e.text), 0.05, interval_s=1.0)


def settle(stall: StallWatch, hosts) -> object:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        verdict = stall.check(hosts)
        if verdict is not None or (not stall.sampling and stall.nodes):
            return verdict
        time.sleep(0.02)
    raise AssertionError("the stacks never arrived")


def test_silence_then_unmoving_stacks_is_a_hang_and_the_stacks_are_kept():
    notes = []
    stall = watch("node_hang_2ranks.txt", notes)
    hosts = list(stall.inventory.hosts)
    assert stall.check(hosts) is None  # not silent long enough yet
    time.sleep(0.06)
    verdict = settle(stall, hosts)
    assert verdict.kind == HANG and verdict.roll_call.suspect.rank == 1
    assert notes == ["no output for 0s: taking every rank's stack (2 samples 1s apart)"]
    assert stall.nodes["local"].ranks == (0, 1)


def test_a_line_printed_while_the_stacks_are_taken_cancels_the_verdict():
    stall = watch("node_hang_2ranks.txt", [])
    time.sleep(0.06)
    hosts = list(stall.inventory.hosts)
    assert stall.check(hosts) is None and stall.sampling
    stall.heard()
    assert settle(stall, hosts) is None


def test_moving_stacks_are_said_once_and_watched_on():
    notes = []
    stall = watch("node_compute_2ranks.txt", notes)
    hosts = list(stall.inventory.hosts)
    for _ in range(2):
        time.sleep(0.06)
        stall.nodes = {}
        assert settle(stall, hosts) is None
    computing = [n for n in notes if "computing" in n]
    assert len(computing) == 1 and "busy on a CPU" in computing[0]
    assert sum("taking every rank's stack" in n for n in notes) == 2


# --------------------------------------------------------------------------- NCCL on real GPUs (2 x H200)
# tests/fixtures/pyspy/SOURCES.md: the node script's whole output against hang_job.py on 2 H200s, where
# rank 1 sleeps in rank_hang and rank 0's all_reduce #2 returned at once (NCCL) and its thread spins in
# the next CUDA sync (100% of a CPU: CUDA's default wait), in torch.cuda.synchronize or in .item().


def _node(fixture: str):
    from clusterctl.watch.sampler import parse_node_output

    return parse_node_output((PYSPY / fixture).read_text(), "gpus01")


def test_on_real_gpus_rank_0_spins_a_cpu_in_the_cuda_sync_while_rank_1_sleeps():
    node = _node("node_nccl_sync_hang_2ranks_h200.txt")
    first, last = ({r.rank: r for r in sample} for sample in node.samples)
    assert str(last[0].innermost) == "synchronize (torch/cuda/__init__.py:1162)" and last[0].in_cuda_wait
    assert last[0].cpu_s - first[0].cpu_s > 2.5  # 3 s apart: a whole CPU
    assert str(last[1].innermost) == "rank_hang (hang_job.py:24)" and last[1].cpu_s == first[1].cpu_s


def test_a_rank_spinning_in_torch_cuda_synchronize_behind_nccl_waits_and_the_sleeping_rank_is_named():
    notes = []
    stall = watch("node_nccl_sync_hang_2ranks_h200.txt", notes)
    time.sleep(0.06)
    verdict = settle(stall, list(stall.inventory.hosts))
    assert verdict is not None and verdict.kind == HANG, notes
    assert (verdict.roll_call.suspect.rank, verdict.roll_call.suspect.host) == (1, "local")  # the replay's host
    assert verdict.detail.startswith("rank 1 on local in rank_hang (hang_job.py:24) while 1 rank waits in "
                                     "synchronize (torch/cuda/__init__.py:1162)")


def test_every_rank_spinning_in_torch_cuda_synchronize_may_be_gpu_work_and_is_left_alone():
    from clusterctl.watch.rollcall import MOVING, judge

    node = _node("node_nccl_sync_hang_2ranks_h200.txt")
    both = [[r for r in sample if r.rank == 0] for sample in node.samples]
    twin = [[r, type(r)(r.host, 1, 1, r.pid + 1, r.threads, r.error, r.cpu_s, r.sockets)] for [r] in both]
    assert judge(twin, 3.0, (0, 1)).kind == MOVING


def test_with_the_roles_swapped_the_rank_elsewhere_is_still_the_one_named():
    from clusterctl.watch.rollcall import judge

    node = _node("node_nccl_sync_hang_2ranks_h200.txt")
    swapped = [[type(r)(r.host, 1 - r.rank, 1 - r.rank, r.pid, r.threads, r.error, r.cpu_s, r.sockets) for r in sample]
               for sample in node.samples]
    verdict = judge(swapped, 3.0, (0, 1))
    assert verdict.kind == HANG and verdict.roll_call.suspect.rank == 0


def test_known_limit_a_rank_spinning_in_item_reads_as_busy_in_its_own_line():
    """`.item()` waits in the same CUDA sync (py-spy --native: cuStreamSynchronize under
    _local_scalar_dense_cuda, nccl_item_rank0_native_h200.txt), but its Python stack ends in the job's own
    line, like a hot loop: the watch says "computing" and the NCCL watchdog's timeout (flight recorder) is
    what names the rank there."""
    from clusterctl.watch.rollcall import MOVING, judge

    node = _node("node_nccl_item_hang_2ranks_h200.txt")
    verdict = judge([list(s) for s in node.samples], 3.0, (0, 1))
    assert verdict.kind == MOVING and "rank 0 on gpus01 busy on a CPU" in verdict.detail
    assert "cuStreamSynchronize" in (PYSPY / "nccl_item_rank0_native_h200.txt").read_text()
