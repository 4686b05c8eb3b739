"""Ctrl-C and SIGTERM as KeyboardInterrupt, and an interrupt Python swallowed raised again.

The handlers raise KeyboardInterrupt wherever the main thread is. Where that is a finalizer or a weakref
callback, Python ignores the exception and only prints `Exception ignored in: ...` (seen on the rehearsal
cluster: an interrupted `up` went on to create every container and exit 0). Python hands such exceptions to
`sys.unraisablehook`; ours records a swallowed KeyboardInterrupt, and `raise_if_swallowed` raises it again
where waiting is safe: the pool's wait (executor/pool.py) within a quarter second, and the CLI once the command
returns, so the command still ends as an interrupted one (exit 130).
"""
from __future__ import annotations

import signal
import sys
import threading

_swallowed = threading.Event()


def _raise(signum, frame):
    raise KeyboardInterrupt


def _unraisable(previous):
    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _swallowed.set()  # raised again by raise_if_swallowed; not printed as ignored
            return
        previous(unraisable)
    return hook


def install() -> tuple:
    """Ctrl-C and SIGTERM raise KeyboardInterrupt (SIGINT even where the process started ignoring it); what was
    there before, for `restore`."""
    _swallowed.clear()
    handlers = {sig: signal.signal(sig, _raise) for sig in (signal.SIGTERM, signal.SIGINT)}
    hook = sys.unraisablehook
    sys.unraisablehook = _unraisable(hook)
    return handlers, hook


def restore(previous: tuple) -> None:
    handlers, hook = previous
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    sys.unraisablehook = hook
    _swallowed.clear()


def raise_if_swallowed() -> None:
    """The interrupt a finalizer swallowed, raised here (once)."""
    if _swallowed.is_set():
        _swallowed.clear()
        raise KeyboardInterrupt
