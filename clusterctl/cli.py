"""Command line: argv -> a command's `Outcome` -> rendering -> exit code.

This is the only place that maps outcomes to exit codes:
  0  everything succeeded
  1  a host or the job failed
  2  bad input (inventory, playbook, arguments, state) — nothing was touched
  3  a host was unreachable (and nothing else failed)
  130 interrupted (Ctrl-C / SIGTERM), after cleaning up
Heavy imports (paramiko, docker, rich, yaml) happen inside the commands, so `--help` is fast.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Optional, Sequence

from clusterctl import __version__, interrupts
from clusterctl.outcome import Outcome

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

# command name -> (module under clusterctl.commands, one-line help)
COMMANDS = {
    "up": ("up", "start the cluster: clean stale ranks, pull, start containers, preflight checks"),
    "run": ("run", "launch the job with torchrun on every node, stream logs, fail fast"),
    "attach": ("attach", "back to the live log of a run that goes on (run --detach, or a hung-up terminal)"),
    "logs": ("logs", "a run's output from the nodes, running or ended: [RUN] [--node N] [--rank R] [--tail K] [--follow]"),
    "stop": ("stop", "end a run on every node (ranks and node agents), from any terminal"),
    "collect-logs": ("collect", "gather logs, outputs and node diagnostics of a run, then diagnose"),
    "check": ("check", "run the preflight checks alone"),
    "status": ("status", "hosts, containers, GPUs and running ranks; the latest runs"),
    "exec": ("exec_", "run an ad-hoc command on every host"),
    "down": ("down", "stop the job and remove the containers"),
    "diagnose": ("diagnose", "name the root cause and fix from a log file or a collected run"),
    "report": ("report", "one self-contained HTML file of a run: timeline, failure and diagnosis, metrics, logs"),
    "stacks": ("stacks", "every rank's Python stack now (py-spy), grouped; names the ranks that are elsewhere"),
    "play": ("play", "run a playbook against the active inventory"),
    "sandbox": ("sandbox", "a rehearsal cluster of N nodes on this machine (root, Linux)"),
    "nccl-test": ("nccl_test", "all-reduce diagnostic: connectivity, small sizes, full sweep, node pairs"),
    "export": ("export", "write a Kubeflow PyTorchJob, KubeRay RayJob or batch Job from the inventory"),
    "launch": ("launch", "the entrypoint platforms run on every node (--from-env): checks, then torchrun"),
    "top": ("top", "every node and GPU of a running run, live: util, memory, power, temperature, each rank's last line"),
    "metrics": ("metrics", "a run's latest node and GPU numbers, its state and health: --prometheus for a scrape"),
    "health": ("health", "the fleet's health record: node states, a node's history, check, release, export --prometheus"),
    "completion": ("completion", "print a shell completion script: source <(clusterctl completion bash)"),
    "inventory": ("inventory", "show: every host as clusterctl will reach it, and where each value came from"),
}


def exit_code(outcome: Outcome) -> int:
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    if outcome.bad_input:
        return EXIT_BAD_INPUT
    if outcome.ok:
        return EXIT_OK
    return EXIT_UNREACHABLE if outcome.unreachable else EXIT_FAILED


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The whole command line; with `only` (a command's name), that command's part alone: its module is
    the one imported (each command's imports what it runs; docs/benchmarks.md §4a: ~0.06 CPU s for all)."""
    parser = argparse.ArgumentParser(
        prog="clusterctl",
        description="Run distributed PyTorch jobs on bare-metal GPU nodes over SSH and Docker.",
    )
    parser.add_argument("--version", action="version", version=f"clusterctl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        if only is not None and name != only:
            continue
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        _common_options(command_parser)
        _command_module(module).add_arguments(command_parser)
    return parser


def _common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print exactly one JSON document on stdout")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the underlying commands and every host")


def _command_module(name: str):
    return importlib.import_module(f"clusterctl.commands.{name}")


NEEDS_WHOLE_PARSER = {"completion"}  # its script lists every command and option: the whole parser


def named_command(argv: Sequence[str]) -> Optional[str]:
    """The command `argv` names where its first word is one (what comes before it is `--version` or
    `-h` alone, which the whole parser answers): None for anything else (the whole parser then parses)."""
    first = next(iter(argv), None)
    return first if first in COMMANDS and first not in NEEDS_WHOLE_PARSER else None


def main(argv: Optional[Sequence[str]] = None, env: Optional[dict] = None) -> int:
    env = dict(os.environ if env is None else env)
    parser = build_parser(named_command(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    from clusterctl.api.session import Session
    from clusterctl.errors import ClusterctlError
    from clusterctl.render import emit_json

    app = Session.for_command(args, env, parser)
    module = _command_module(COMMANDS[args.command][0])
    previous = interrupts.install()
    try:
        outcome = module.execute(args, app)
        interrupts.raise_if_swallowed()  # an interrupt a finalizer swallowed: the command still ends as one
    except ClusterctlError as exc:
        outcome = Outcome(error_document(exc), bad_input=exc.exit_code == EXIT_BAD_INPUT)
        app.renderer.error(str(exc))
    except KeyboardInterrupt:
        outcome = Outcome({"ok": False, "error": "interrupted"}, interrupted=True)
        app.renderer.error("interrupted")
    except Exception as exc:  # a bug of ours: one line and the traceback's place, never a traceback
        outcome = _internal_error(app, args.command, exc)
    finally:
        interrupts.restore(previous)
        app.close()
    if args.json:
        emit_json(outcome.document)
    return exit_code(outcome)


def _internal_error(app, command: str, exc: Exception) -> Outcome:
    import traceback

    text = "".join(traceback.format_exception(exc))
    try:
        where = str(app.state.write_internal_error(command, text))
    except OSError as write_error:
        where = f"(could not be written: {write_error.strerror}) "
        sys.stderr.write(text)
    app.renderer.error(f"internal error in `clusterctl {command}`: {type(exc).__name__}: {exc}; "
                       f"the traceback is in {where}; please report it")
    return Outcome({"ok": False, "error": "internal error", "exception": f"{type(exc).__name__}: {exc}",
                    "traceback_log": where})


def error_document(exc) -> dict:
    """A ClusterctlError as the ErrorDocument that any command prints instead of its own."""
    from clusterctl.documents.commands import ErrorDocument
    from clusterctl.documents.convert import plain

    return plain(ErrorDocument(ok=False, error=exc.what, where=exc.where, fix=exc.fix))


if __name__ == "__main__":
    sys.exit(main())
