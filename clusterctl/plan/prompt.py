"""The prompt of a run, read from a file as `clusterctl run PROMPT_FILE` (and `Cluster.run(prompt_file=)`)
reads it, and the check that it can reach the job at all."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from clusterctl.errors import UsageError

MAX_PROMPT_BYTES = 1 << 20


def read_prompt(path: Path) -> str:
    from clusterctl.plan.torchrun import prompt_text

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the prompt file: {exc.strerror}", where=str(path),
                         fix="give the path of a text file holding the prompt") from None
    if len(data) > MAX_PROMPT_BYTES:
        raise UsageError(f"the prompt file is {len(data)} bytes; the limit is {MAX_PROMPT_BYTES}", where=str(path),
                         fix="shorten the prompt, or have the job read a file from a volume")
    if b"\0" in data:
        line = data[: data.index(b"\0")].count(b"\n") + 1
        raise UsageError("the prompt file contains a NUL byte, which no command line can carry",
                         where=f"{path}:{line}", fix="remove the NUL byte (is it a binary file?)")
    try:
        return prompt_text(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UsageError(f"the prompt file is not UTF-8 (byte {exc.start})", where=str(path),
                         fix="save it as UTF-8") from None


def run_prompt(inventory_of: Callable, path: Optional[Path] = None, text: Optional[str] = None) -> tuple:
    """(prompt, inventory) of a run (`clusterctl run PROMPT_FILE`, `Cluster.run(prompt= | prompt_file=)`):
    the prompt read first, then the inventory (`inventory_of()`), then the prompt checked against the job
    before connecting. The one check of the prompt alone; the expanded command lines are checked
    where they are expanded, at plan time (plan/launch_plan.py)."""
    from clusterctl.plan.torchrun import prompt_text

    if path is not None:
        prompt = read_prompt(path)
    else:
        prompt = prompt_text(text or "")
        if "\0" in prompt:
            raise UsageError("the prompt contains a NUL byte, which no command line can carry", where="prompt=",
                             fix="remove the NUL byte")
    inventory = inventory_of()
    check_prompt_fits(prompt, inventory, str(path) if path is not None else "prompt=")
    return prompt, inventory


def check_prompt_fits(prompt: str, inventory, where: str) -> None:
    """A prompt over Linux's limit for one argument can never reach the job: say so before connecting."""
    from clusterctl.plan.torchrun import MAX_ARG_BYTES

    size = len(prompt.encode())
    if size > MAX_ARG_BYTES and any("{prompt}" in a for a in (*inventory.job.command, *inventory.job.args)):
        raise UsageError(f"the prompt is {size} bytes and becomes one argument of the job; Linux refuses a single "
                         f"argument over 128 KiB ({MAX_ARG_BYTES} bytes)", where=where,
                         fix="shorten the prompt, or have the job read it from a file on a shared volume "
                             "(pass the file's path in job.args instead of {prompt})")


def optional_prompt(path: Optional[Path], inventory, fix: str) -> str:
    """The prompt file's text, or "" where none was given and the job has no {prompt} (`export`, `launch`)."""
    if path is not None:
        return read_prompt(path)
    if any("{prompt}" in part for part in (*inventory.job.command, *inventory.job.args)):
        raise UsageError("job.args use {prompt} but no prompt file was given", "--prompt-file", fix)
    return ""
