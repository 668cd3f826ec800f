"""Text from logs made safe to show a person: control characters become visible escapes.

Session ids, reasons, file names and message text come from logs, which are
untrusted: an ESC sequence would recolour the terminal or move the cursor,
and a newline in a session id could forge an ``ERROR …`` line.  Everything
tito shows on a terminal or in plain text goes through :class:`SafeConsole`,
which escapes control characters in the text of every segment (not in the
styles rich adds, nor in its own line breaks); single-line fields also go
through :func:`one_line`, which escapes newlines, since a newline in the
text reaches the console as a line break.  Files (samples, rejects report,
dumps, ``--json``) keep the exact text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment

__all__ = ["SafeConsole", "one_line", "session_line", "visible"]

# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides and
# isolates (which reorder what follows them on screen).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_OR_NEWLINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with control characters escaped (``\\e``, ``\\x07``, ``\\u202e``); newlines and tabs kept."""
    return _CONTROL.sub(_escape, text)


def one_line(text: str) -> str:
    """``text`` with control characters and newlines escaped: it stays on one line."""
    return _CONTROL_OR_NEWLINE.sub(_escape, text)


def session_line(session_id: str, text: str) -> str:
    """A summary's line about one session, ``  <id>: <text>``, kept on one line whatever the id or text holds.

    The one way every summary lists sessions (rejects, notes, copied sessions): a
    newline in a hostile session id would otherwise start a forged ``ERROR …`` line.
    """
    return one_line(f"  {session_id}: {text}")


class SafeConsole(Console):
    """A rich console that never writes a control character it was given as text."""

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            text = segment.text
            if segment.control is None and _CONTROL.search(text):
                yield Segment(_CONTROL.sub(_escape, text), segment.style, segment.control)
            else:
                yield segment
