"""Playbook loading: bad playbooks fail before any connection, with file:line."""
from __future__ import annotations

from pathlib import Path

import pytest

from clusterctl.errors import PlaybookError
from clusterctl.playbook import BUILTIN_DIR, load_playbook

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "playbooks"


@pytest.mark.parametrize(
    "name, line, words",
    [
        ("bad_unknown_module.yaml", 2, ["unknown module", "shel", "did you mean 'shell'"]),
        ("bad_two_modules.yaml", 1, ["exactly one module", "shell, copy"]),
        ("bad_unknown_arg.yaml", 2, ["unknown argument 'mdoe'"]),
        ("bad_missing_arg.yaml", 2, ["missing required argument 'dest'"]),
        ("bad_not_a_list.yaml", 1, ["list of tasks"]),
        ("bad_task_scalar.yaml", 3, ["a task must be a mapping"]),
        ("bad_yaml.yaml", 3, [""]),
    ],
)
def test_a_bad_playbook_gives_one_clear_error_with_its_location(name, line, words):
    with pytest.raises(PlaybookError) as caught:
        load_playbook(FIXTURES / name)
    error = caught.value
    assert error.where and f"{name}:{line}" in error.where, error.where
    text = str(error)
    for word in words:
        assert word in text, text
    assert error.fix


def test_a_good_playbook_loads_with_defaults_and_free_form_arguments():
    playbook = load_playbook(FIXTURES / "good.yaml")
    assert playbook.name == "demo"
    assert [t.module for t in playbook.tasks] == ["shell", "command", "copy"]
    assert playbook.tasks[0].args == {"cmd": "echo hello from $(hostname)"}
    assert playbook.tasks[1].args == {"argv": ["printf", "%s\n", "a b"]}
    assert all(t.hosts == "all" for t in playbook.tasks)
    assert playbook.tasks[2].where.endswith("good.yaml:8")


@pytest.mark.parametrize("flow", sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml")))
def test_every_built_in_flow_is_a_valid_playbook(flow):
    assert load_playbook(BUILTIN_DIR / f"{flow}.yaml").tasks
