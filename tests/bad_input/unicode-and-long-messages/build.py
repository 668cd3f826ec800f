"""Non-ASCII everywhere (ids, message text, metadata) and a 1 MB message: still exact.

Message contents are rewritten by an injective map, so routing (message
equality) and therefore the samples are those of the original session.
"""

from tests.bad_input.kit import case, case_session, write_good, write_sessions, write_turns

LONG = "x" * (1 << 20)


def unicode(text):
    return f"ünïcødé 🙂 {text} 日本語\u200b\r\n\t\u0000"


def long(text):
    return LONG + text


def rewrite(turns, f):
    for t in turns:
        for m in t["prompt_messages"]:
            m["content"] = f(m["content"])
        if t["response_message"] is not None:
            t["response_message"]["content"] = f(t["response_message"]["content"])
    return turns


def build(log):
    write_good(log)
    base = "cases-threshold-1024/case-3.7"
    ids = {"sessão-日本-🙂": unicode, "long": long, "../../etc/passwd": unicode}
    turns = [t for sid, f in ids.items() for t in rewrite(case(base, sid), f)]
    write_turns(log / "turns-ünï.parquet", turns)
    rows = [dict(case_session(base, sid), label="étiquette ✓", metadata={"note": "ça 🙂"}) for sid in ids]
    write_sessions(log / "sessions-ünï.parquet", rows)
