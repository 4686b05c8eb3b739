"""A node of a Slurm allocation as a transport: each command is one `srun --overlap` step there.

This is what lets `clusterctl run` keep its one runner (run/runner.py) on Slurm: the probe, the
launch, the polls, the live log's followers, the tails and the stop are the same commands as over
SSH, each run as a one-task step on its node instead of in an SSH session. The step runs where
slurmd runs the job's tasks, with the node's network, hostname and filesystems.

One difference is real and handled here: a detached launch (`setsid -f WRAPPER`, which over SSH
outlives the session) would be a process escaping its step, which Slurm's process tracking
(proctrack/cgroup on most clusters) kills when the step ends. The wrapper runs in the foreground of
a step of its own instead, started in the background here; that step ends when torchrun does.
"""
from __future__ import annotations

import shlex
import subprocess
import time
from dataclasses import replace

from clusterctl.models import Command, CommandResult, Host
from clusterctl.slurm.stepshell import StepShell
from clusterctl.slurm.submit import srun_prefix
from clusterctl.transport.base import remote_argv
from clusterctl.transport.local import LocalTransport, _terminate

_DETACHED = ("setsid", "-f")


class SrunTransport(LocalTransport):
    """Runs commands on `host`, a node of allocation `job_id`, through srun (see the module's doc)."""

    def __init__(self, host: Host, job_id: str):
        super().__init__(host)
        self.job_id = job_id
        self._steps: list[subprocess.Popen] = []
        self._shell = StepShell(srun_prefix(job_id, host.name))

    def _exec(self, cmd: Command, on_out, on_err) -> CommandResult:
        argv = remote_argv(cmd)  # env, cwd and privilege folded in, as for ssh
        if tuple(argv[:2]) == _DETACHED:
            return self._start_step(argv[2:])
        if cmd.stdin is None and not cmd.stdin_open and cmd.timeout:  # a short command: the node's shell step
            result = self._shell.run(shlex.join(argv), cmd.timeout)
            if result is not None:
                on_out(result.stdout.encode())
                on_err(result.stderr.encode())
                return CommandResult(result.exit_code, "", "", result.duration, result.timed_out)
        return super()._exec(self._as_step(cmd), on_out, on_err)

    def open_stream(self, cmd: Command):
        return super().open_stream(self._as_step(cmd))

    def _as_step(self, cmd: Command) -> Command:
        """`cmd` as an srun step of the allocation on this node (env, cwd and privilege folded in)."""
        return replace(cmd, argv=(*srun_prefix(self.job_id, self.host.name), *remote_argv(cmd)), env=(), cwd=None,
                       privileged=False)

    def _start_step(self, argv: list[str]) -> CommandResult:
        """The launch: a step that lives as long as its command, not waited for here."""
        started = time.monotonic()
        proc = subprocess.Popen([*srun_prefix(self.job_id, self.host.name), *argv], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._steps.append(proc)
        return CommandResult(0, "", "", time.monotonic() - started)

    def close(self) -> None:
        """Steps still running when the run is over (an interrupted run) are ended; scancel ends the rest."""
        for proc in self._steps:
            if proc.poll() is None:
                _terminate(proc)
        self._steps.clear()
        self._shell.close()
        super().close()
