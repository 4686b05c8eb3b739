"""What a command imports before it acts (issue 52: the controller's start is on the path to the first rank):
the command line parses with the named command's module alone, and a light part of the diagnose package
does not bring the engine and its rules with it."""
from __future__ import annotations

import sys

import pytest

from clusterctl import cli


@pytest.mark.parametrize("argv", [["run", "-i", "inv.yaml", "--detach", "prompt.txt"],
                                  ["logs", "RUN", "--node", "n1", "--tail", "5"],
                                  ["exec", "--json", "--", "true"], ["stop", "--json"]])
def test_the_named_commands_parser_alone_parses_as_the_whole_one(argv):
    assert cli.named_command(argv) == argv[0]
    assert vars(cli.build_parser(argv[0]).parse_args(argv)) == vars(cli.build_parser().parse_args(argv))


@pytest.mark.parametrize("argv", [[], ["--version"], ["-h"], ["bogus"], ["--json", "run"], ["completion", "bash"]])
def test_anything_but_a_command_first_gets_the_whole_parser(argv):
    # `completion` writes a script of every command and option: it parses with the whole parser
    assert cli.named_command(argv) is None


def test_a_bad_option_of_a_named_command_is_said_as_before(capsys):
    messages = []
    for parser in (cli.build_parser("run"), cli.build_parser()):
        with pytest.raises(SystemExit) as ended:
            parser.parse_args(["run", "--no-such-option", "p.txt"])
        messages.append((ended.value.code, capsys.readouterr().err))
    assert messages[0] == messages[1] and "--no-such-option" in messages[0][1]


def _diagnose_modules() -> dict:
    return {m: mod for m, mod in sys.modules.items() if m == "clusterctl.diagnose" or m.startswith("clusterctl.diagnose.")}


def test_the_diagnose_packages_light_parts_leave_the_engine_unloaded():
    """watch/dumps.py (on every run's path) imports diagnose/flight_recorder: the package's names load on use."""
    import clusterctl

    kept, attribute = _diagnose_modules(), getattr(clusterctl, "diagnose", None)
    try:
        for name in kept:
            del sys.modules[name]
        import clusterctl.diagnose.flight_recorder  # noqa: F401

        assert "clusterctl.diagnose.engine" not in sys.modules and "clusterctl.diagnose.rules" not in sys.modules
        from clusterctl.diagnose import RULES, diagnose_text

        assert callable(diagnose_text) and RULES and "clusterctl.diagnose.engine" in sys.modules
        with pytest.raises(AttributeError, match="no attribute 'nothing_of_the_kind'"):
            sys.modules["clusterctl.diagnose"].nothing_of_the_kind
    finally:  # the modules every other test holds, as they were
        for name in _diagnose_modules():
            del sys.modules[name]
        sys.modules.update(kept)
        if attribute is not None:
            clusterctl.diagnose = attribute
