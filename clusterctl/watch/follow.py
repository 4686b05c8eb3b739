"""What a node's follow command streams, told apart by source and cut into whole lines. Pure.

Why not torchrun's own copy of the ranks' output: with `--redirects=3 --tee=3` torchrun writes
each rank's output to `attempt_0/<local_rank>/{stdout,stderr}.log` (byte for byte) and copies it
to its own stdout (agent.log) from one thread per file, `readline()` by `readline()`
(torch/distributed/elastic/multiprocessing/tail_log.py). That copy is unusable for a live log:
- the files are opened in text mode, so universal newlines turn every `\r` into a line end: a
  progress bar's 200 `\r` updates become 200 lines;
- `readline()` at the end of a file returns the partial line written so far (a `\r` update has no
  `\n`), and torchrun writes it prefixed, without a line end; the next thread's write follows on
  the same line: `[h rank0]: 45%|###[h rank1]: 12%|#` is one rank's half line glued to another's.
So the follow command (plan/wrapper.py) tails the ranks' own files and agent.log with one
`tail -v -F`, which marks every switch of file with a header `\\n==> NAME <==\\n` and passes the
bytes of each file as written, partial lines and `\\r` included. Here those bytes are split back
by file, each file is cut into lines on its own, and a line can never hold two ranks' text.

Before tail starts, the follow command says which run directory of torchrun it found, in one
line: `clusterctl-follow <run_id>_<random>/attempt_0` (or nothing after the word when torchrun
never got as far as its workers). Only headers naming agent.log or one of the node's rank files
in that directory switch the source, so a rank cannot spoof one without knowing that name.
"""
from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from clusterctl.plan.torchrun import RANK_PREFIX_RE

CONTROL = b"clusterctl-follow"
AGENT_LOG = "agent.log"
# A line that never ends (a rank printing dots, binary output) is cut after this many characters:
# what is kept in memory stays bounded and the text still shows.
MAX_LINE = 64 * 1024


@dataclass(frozen=True)
class Source:
    """Where a piece of text came from: a local rank's stdout or stderr, or (local_rank None)
    torchrun's own output, agent.log."""

    local_rank: int | None
    stream: str = "stdout"


AGENT = Source(None, "stdout")


@dataclass(frozen=True)
class Piece:
    """A whole line (`complete`, without its `\\n`) or the line being written so far; either may
    hold `\\r` (a progress bar redrawn in place)."""

    source: Source
    text: str
    complete: bool = True


class _Lines:
    """One source's text, cut into lines: UTF-8 decoded across chunk boundaries, a partial line
    kept until its `\\n`, and of a line redrawn with `\\r` only what a terminal would still show."""

    def __init__(self):
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.partial = ""
        self.last = ""  # the last whole line

    def reopen(self) -> None:
        """The `\\n` that ended the last line was not the source's (see FollowStream.feed)."""
        self.partial = _latest(self.last + self.partial)

    def feed(self, data: bytes, final: bool = False) -> tuple[list[str], bool]:
        """(complete lines, whether the partial line changed)."""
        text = self._decoder.decode(data, final)
        if not text:
            return [], False
        *lines, rest = (self.partial + text).split("\n")
        self.partial = _latest(rest)
        out = [_latest(line) for line in lines]
        if out:
            self.last = out[-1]
        while len(self.partial) > MAX_LINE:
            out.append(self.partial[:MAX_LINE])
            self.partial = self.partial[MAX_LINE:]
        return out, True


def _latest(text: str) -> str:
    """A `\\r`-redrawn line reduced to `\\r<last state shown>\\r<being written now>`, so a bar that
    runs for hours without a `\\n` is never kept whole; text without `\\r` as it is."""
    if "\r" not in text:
        return text
    *before, now = text.split("\r")
    shown = next((segment for segment in reversed(before) if segment.strip()), "")
    return f"\r{shown}\r{now}" if shown else f"\r{now}"


def line_prefix(host: "str | None", rank: "int | None") -> str:
    """How a line of a run is labelled wherever it is shown: `[node2 r3]`, or `[node2]` for
    torchrun's own lines."""
    return f"[{host} r{rank}]" if rank is not None else f"[{host}]"


def latest_state(text: str) -> str:
    """What a terminal would show of a `\\r`-redrawn line: its last state that is not blank
    (tqdm clears its bar with spaces before a message)."""
    return next((segment for segment in reversed(text.split("\r")) if segment.strip()), "")


class FollowStream:
    """The follow command's stdout, fed chunk by chunk, as `Piece`s of each source.

    `nproc`: the node's local ranks (0..nproc-1), whose files may appear in the stream. While the
    ranks' own files are followed, agent.log's lines that carry torchrun's rank prefix are its
    copies of them (see above) and are dropped; its own lines (warnings, the failure summary) stay.
    """

    def __init__(self, nproc: int):
        self.nproc = nproc
        self.follows_ranks = False
        self._head: bytearray | None = bytearray()  # until the control line is complete
        self._buffer = b""
        self._token_re: re.Pattern | None = None
        self._tokens: dict[bytes, Source] = {}
        self._longest = 0
        self._bare_header = False
        self._newline_of: Source | None = None
        self._current = AGENT
        self._lines: dict[Source, _Lines] = {}

    # ---- bytes in
    def feed(self, data: bytes) -> list[Piece]:
        if self._head is not None:
            self._head += data
            if b"\n" not in self._head and len(self._head) < len(CONTROL) + 4096:
                return []
            head, self._head = bytes(self._head), None
            line, newline, rest = head.partition(b"\n")
            if not (newline and line.partition(b" ")[0] == CONTROL):
                return self._data(AGENT, head)  # not our follow command's stream: all of it is torchrun's
            self._start(line.partition(b" ")[2].strip())
            self._bare_header, self._newline_of = True, None  # tail writes no newline before its first header
            data = rest
        if not data:
            return []
        if self._bare_header and not self._buffer:
            # A header right here may lack its newline: the first one, or one whose newline ended
            # the last chunk and was taken for the end of a line (see _maybe_token): that line
            # goes on, and the text after the header joins it, not another line.
            with_newline = b"\n" + data
            if self._token_re.match(with_newline) or any(t.startswith(with_newline) for t in self._tokens):
                data = with_newline
                if self._newline_of is not None:
                    self._lines[self._newline_of].reopen()
        pieces = self._split(self._buffer + data)
        self._bare_header = not self._buffer and data.endswith(b"\n")
        self._newline_of = self._current if self._bare_header else None
        return pieces

    def finish(self) -> list[Piece]:
        """The stream ended: what was held back, and every source's unfinished line, as lines."""
        pieces: list[Piece] = []
        if self._head is not None:  # the stream ended before the control line did
            pieces += self._data(AGENT, bytes(self._head))
            self._head = None
        pieces += self._data(self._current, self._buffer)
        self._buffer = b""
        for source, lines in self._lines.items():
            more, _ = lines.feed(b"", final=True)
            if lines.partial:
                more.append(lines.partial)
                lines.partial = ""
            pieces += [Piece(source, text) for text in more if self._keep(source, text)]
        return pieces

    # ---- inside
    def _start(self, directory: bytes) -> None:
        tokens = {b"\n==> " + AGENT_LOG.encode() + b" <==\n": AGENT}
        if directory:
            self.follows_ranks = True
            for local_rank in range(self.nproc):
                for stream in ("stdout", "stderr"):
                    name = directory + f"/{local_rank}/{stream}.log".encode()
                    tokens[b"\n==> " + name + b" <==\n"] = Source(local_rank, stream)
        self._tokens = tokens
        self._longest = max(map(len, tokens))
        self._token_re = re.compile(b"|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True)))

    def _split(self, data: bytes) -> list[Piece]:
        if self._token_re is None:
            self._buffer = b""
            return self._data(AGENT, data)
        pieces: list[Piece] = []
        at = 0
        for match in self._token_re.finditer(data):
            pieces += self._data(self._current, data[at:match.start()])
            self._current = self._tokens[match.group()]
            at = match.end()
        rest = data[at:]
        keep = self._maybe_token(rest)
        if not keep and rest.endswith(b"\n"):
            before = rest[:-1]
            lines = self._lines.get(self._current)
            if before.endswith(b"\n") or not (before or (lines and lines.partial)):
                keep = 1  # it would end an empty line: nothing to show late, and it may be a header's
        self._buffer = rest[len(rest) - keep:] if keep else b""
        pieces += self._data(self._current, rest[:len(rest) - keep])
        return pieces

    def _maybe_token(self, data: bytes) -> int:
        """How many bytes at the end of `data` could be the start of a header cut by the chunk's
        end: kept back until the next chunk says. A lone `\\n` at the end is not kept when it ends
        a line with text (that line shows now, not with the next output): tail writes a header
        and the data after it in one write, and should a header still arrive cut after its
        newline, `feed` takes it back."""
        floor = max(0, len(data) - self._longest)
        start = data.rfind(b"\n", floor)
        while start != -1:
            candidate = data[start:]
            if len(candidate) > 1 and any(token.startswith(candidate) for token in self._tokens):
                return len(candidate)
            start = data.rfind(b"\n", floor, start)
        return 0

    def _data(self, source: Source, data: bytes) -> list[Piece]:
        if not data:
            return []
        lines = self._lines.setdefault(source, _Lines())
        complete, changed = lines.feed(data)
        pieces = [Piece(source, text) for text in complete if self._keep(source, text)]
        if changed and lines.partial and source.local_rank is not None:
            pieces.append(Piece(source, lines.partial, complete=False))
        return pieces

    def _keep(self, source: Source, text: str) -> bool:
        """agent.log's copies of the ranks' lines go when the ranks' own files are followed."""
        return not (source.local_rank is None and self.follows_ranks and RANK_PREFIX_RE.match(text))
