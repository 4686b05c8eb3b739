"""What the core tells the renderer: `Event`, and the callback that takes them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

@dataclass(frozen=True)
class Event:
    """What the core tells the renderer. kinds: task, host_done, line, progress, note."""

    kind: str
    host: Optional[str] = None
    text: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)


OnEvent = Callable[[Event], None]


def _ignore(_event: Event) -> None:
    pass

