"""The closing summary of ``tito compact``."""

from __future__ import annotations

from ..run.compact import CompactSummary
from .visible import session_line

__all__ = ["render_compact_summary"]


def render_compact_summary(summary: CompactSummary) -> str:
    ratio = summary.bytes_out / summary.bytes_in if summary.bytes_in else 1.0
    lines = [
        f"wrote {summary.sessions:,} sessions ({summary.turns:,} turns) in format {summary.format} "
        f"to {summary.out}: {summary.bytes_in:,} -> {summary.bytes_out:,} bytes ({ratio:.2f}x)"
    ]
    if summary.carried:
        lines.append(f"copied {len(summary.carried):,} invalid sessions unchanged (a rebuild rejects them):")
        lines += [session_line(r.session_id, f"{r.reason} ({r.file}, row {r.row})") for r in summary.carried]
    return "\n".join(lines)
