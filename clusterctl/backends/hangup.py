"""What a hang-up of the terminal does to an attached run."""
from __future__ import annotations

from contextlib import nullcontext


class hang_up_detaches:
    """While a run is attached, a hang-up of its terminal (SIGHUP: a closed laptop, a dropped SSH session
    to this machine) hands the run over to the cluster instead of ending it. The handler only sets a
    flag (the runner hands over at its next poll) and sends this process's output to /dev/null: the
    terminal is gone, and writing to it would fail."""

    def __enter__(self):
        import signal
        import threading

        self.flag = threading.Event()
        self.previous = None
        try:
            # started under nohup (SIGHUP ignored): its user wants this process to watch on, writing
            # to nohup.out; a hang-up changes nothing then
            if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
                self.previous = signal.signal(signal.SIGHUP, self._on_hang_up)
        except (ValueError, AttributeError):  # not the main thread, or no SIGHUP here
            pass
        return self.flag.is_set

    def _on_hang_up(self, signum, frame) -> None:
        import os

        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            os.close(devnull)
        except OSError:
            pass
        self.flag.set()

    def __exit__(self, *exc) -> None:
        import signal

        if self.previous is not None:
            signal.signal(signal.SIGHUP, self.previous)


def not_hung_up():
    """On Slurm a hang-up hands nothing over: the run goes on watched by this process."""
    return nullcontext(lambda: False)
