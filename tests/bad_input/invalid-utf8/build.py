"""Text that is not UTF-8 in a JSON column: each spoils only its own session.

A string column's bytes are not checked by Parquet; a log written by a
buggy harness (or truncated mid-character) can hold them.  The bad bytes sit
in a prompt parsed whole, in the new tail of a prompt that extends the
previous one (the reader's incremental path), in a response message, and
in a sessions row's label.
"""

import pyarrow as pa
import pyarrow.parquet as pq

from tests.bad_input.kit import case, case_session, turns_table, write_good, write_sessions

BASE = "cases-threshold-1024/case-3.7"


def _spoil(text: str, marker: str) -> bytes:
    """The UTF-8 of ``text`` with a lone continuation byte put before the last ``marker``."""
    at = text.rindex(marker)
    return text[:at].encode() + b"\x80" + text[at:].encode()


def build(log):
    write_good(log)
    sessions = {sid: case(BASE, sid) for sid in ("bad-first-prompt", "bad-prompt-tail", "bad-response", "bad-label")}
    table = turns_table([t for turns in sessions.values() for t in turns])
    prompts = [t.encode() for t in table.column("prompt_messages").to_pylist()]
    responses = [None if t is None else t.encode() for t in table.column("response_message").to_pylist()]
    first = {sid: sum(len(s) for s in list(sessions.values())[:k]) for k, sid in enumerate(sessions)}
    row = first["bad-first-prompt"]
    prompts[row] = _spoil(prompts[row].decode(), '"content"')
    row = first["bad-prompt-tail"] + 1  # its prompt extends the first turn's
    prompts[row] = _spoil(prompts[row].decode(), '"content"')
    row = first["bad-response"] + 2
    responses[row] = _spoil(responses[row].decode(), '"content"')
    for name, values in (("prompt_messages", prompts), ("response_message", responses)):
        column = pa.array(values, pa.binary()).view(pa.string())
        table = table.set_column(table.schema.get_field_index(name), table.schema.field(name), column)
    pq.write_table(table, log / "turns-bad.parquet")
    path = write_sessions(log / "sessions-bad.parquet", [case_session(BASE, "bad-label")])
    table = pq.read_table(path)
    label = pa.array([b"label \xff"], pa.binary()).view(pa.string())
    table = table.set_column(table.schema.get_field_index("label"), table.schema.field("label"), label)
    pq.write_table(table, path)
