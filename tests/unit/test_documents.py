"""The `--json` documents' types (clusterctl/documents/) and their published schemas (docs/schemas/).
conftest.py checks every document the suite makes against them (tests/json_documents.py)."""
from __future__ import annotations

import json

import pytest

from clusterctl.cli import COMMANDS as CLI_COMMANDS
from clusterctl.documents import COMMANDS, all_schemas, schema_text
from json_documents import SCHEMAS, check


def test_docs_schemas_are_exactly_what_the_document_types_generate():
    expected = {name: schema_text(schema) for name, schema in all_schemas().items()}
    found = {p.name: p.read_text() for p in SCHEMAS.glob("*.json")}
    stale = sorted(n for n in expected.keys() | found.keys() if expected.get(n) != found.get(n))
    assert not stale, f"docs/schemas is stale ({', '.join(stale)}): run `python -m clusterctl.documents`"


def test_every_command_declares_its_document():
    assert set(COMMANDS) == set(CLI_COMMANDS)


def test_every_schema_is_a_valid_draft_2020_12_schema():
    import jsonschema

    for path in SCHEMAS.glob("*.json"):
        jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))


RUN = {"ok": False, "run_id": "20260101-000000-abcdef", "world_size": 4, "nproc_per_node": 2, "exit_code": 1,
       "master": {"host": "node1", "address": "10.0.0.1", "port": 29500},
       "first_failure": {"host": "node2", "rank": 3, "diagnosis": [
           {"cause": "oom_killed", "host": "node2", "rank": 3, "evidence": "Killed", "fix": "more memory",
            "confidence": 0.9}]},
       "stragglers": [], "nodes": {"node1": {"exit_code": 1, "lost": False, "run_dir": "/out/logs/r/node1"}}}


def test_a_run_document_as_the_contract_describes_it_fits_and_more_keys_are_welcome():
    check("run", {**RUN, "phases": {"launch": 1.5}, "something_new": [1]}, "the run document")


@pytest.mark.parametrize("broken, where", [
    (lambda d: d.pop("world_size"), "world_size"),
    (lambda d: d.update(exit_code="1"), "exit_code"),
    (lambda d: d["first_failure"]["diagnosis"][0].pop("cause"), "cause"),
    (lambda d: d["first_failure"].update(rank="3"), "rank"),
    (lambda d: d["master"].update(port="29500"), "port"),
    (lambda d: d.update(stragglers=[{"host": "node2", "rank": 3}]), "gpu"),
])
def test_breaking_a_documented_field_of_the_run_document_fails_its_schema(broken, where):
    document = json.loads(json.dumps(RUN))
    broken(document)
    with pytest.raises(AssertionError, match=where):
        check("run", document, "the run document")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_error_document_fits_every_commands_schema(command):
    check(command, {"ok": False, "error": "no inventory", "where": "-i", "fix": "pass -i FILE"}, command)
    check(command, {"ok": False, "error": "interrupted"}, command)


def test_a_hosts_status_outside_the_contracts_words_fails():
    with pytest.raises(AssertionError, match="status"):
        check("up", {"ok": True, "hosts": {"n1": {"status": "fine", "detail": "", "duration_s": 0.1}}}, "up")


def test_an_objects_json_has_exactly_the_declared_fields_of_its_document_type():
    from clusterctl.documents import parts
    from clusterctl.documents.convert import as_document
    from clusterctl.models import CheckResult, CheckStatus, Finding

    check = CheckResult("n1", "shm", CheckStatus.WARN, "64 MiB", "shm_size: 16g")
    assert as_document(parts.CheckEntry, check) == {"host": "n1", "check": "shm", "status": "warn",
                                                    "detail": "64 MiB", "fix": "shm_size: 16g"}
    finding = Finding("oom_killed", "Killed", "more memory", host="n1", rank=3, score=9.0, confidence=0.5)
    assert set(finding.to_json()) == {"cause", "host", "rank", "evidence", "fix", "confidence"}  # no score
    with pytest.raises(AttributeError):
        as_document(parts.Master, check)


def test_a_field_whose_json_key_is_no_python_name_is_that_key_in_the_document_and_its_schema():
    from clusterctl.nccltest.plan import LinkClass

    link = LinkClass("nvlink-hopper", 360.0, "nccl-tests on 8 x H100")
    assert link.to_json() == {"class": "nvlink-hopper", "target_busbw_gbps": 360.0, "basis": "nccl-tests on 8 x H100"}
    declared = all_schemas()["nccl-test.json"]["$defs"]["NcclLink"]
    assert set(declared["properties"]) == set(declared["required"]) == {"class", "target_busbw_gbps", "basis"}


def test_the_objects_that_carry_a_document_make_exactly_its_declared_keys():
    from clusterctl.documents import parts
    from clusterctl.backends.health_check import Step
    from clusterctl.watch.stragglers import Straggler
    from clusterctl.registry.peers import Holding

    late = Straggler("node2", 3, 1, 0.41234, 0.51234, 2.1234, 1700000000.12345, 40, 40, 3)
    assert late.to_json() == {"host": "node2", "rank": 3, "gpu": 1, "lag_s": 0.412, "ratio": 2.12,
                              "since": 1700000000.123, "evidence": late.evidence, "lag_share": 0.512, "until": None}
    assert Step("gpu_burn", "pass", "8 GPUs").to_json() == {"step": "gpu_burn", "status": "pass", "detail": "8 GPUs"}
    sent = Holding("peer:node1", "sha256:ab", bytes=2_000_000_000, seconds=4.0049, layers_kept=2)
    assert sent.to_json() == {"source": "peer:node1", "image_id": "sha256:ab", "bytes": 2_000_000_000,
                              "seconds": 4.0, "mb_per_s": 499.4, "layers_kept": 2}
    assert set(Holding("present", "sha256:ab").to_json()) == {f for f in parts.ImageSent.__dataclass_fields__}


def test_each_way_up_moves_an_image_fits_its_host_entrys_distribute():
    entry = {"status": "changed", "detail": "", "duration_s": 1.0}
    check("up", {"ok": True, "hosts": {
        "n1": {**entry, "distribute": {"source": "registry", "image_id": "sha256:ab", "bytes": None, "seconds": 3.2}},
        "n2": {**entry, "distribute": {"source": "peer:n1", "image_id": "sha256:ab", "bytes": 10, "seconds": 0.5,
                                       "mb_per_s": 0.0, "layers_kept": 0}},
        "n3": {**entry, "distribute": {"source": None, "peers_failed": "the stream was cut short"}}}}, "up")
    with pytest.raises(AssertionError, match="distribute"):
        check("up", {"ok": True, "hosts": {"n1": {**entry, "distribute": {"source": "peer:n2"}}}}, "up")
