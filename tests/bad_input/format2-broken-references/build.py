"""Format-2 rows whose base reference is broken (docs/spec.md §9.3): each rejects its session alone."""

from tests.bad_input.kit import case, delta_rows, write_good, write_turns


def _session(new_id, **changes_by_seq):
    rows = delta_rows(case("cases-threshold-1024/case-3.7", new_id))
    for row in rows:
        row.update(changes_by_seq.get(f"s{row['seq']}", {}))
    return rows


def build(log):
    write_good(log)
    bad = {
        "missing-base": _session("missing-base", s2={"base_seq": 9}),
        # good-long has a seq 20; references never leave their session.
        "base-in-other-session": _session("base-in-other-session", s1={"base_seq": 20}),
        "cycle": _session("cycle", s1={"base_seq": 3}, s3={"base_seq": 1}),
        "own-base": _session("own-base", s2={"base_seq": 2}),
        "ids-beyond-base": _session("ids-beyond-base", s2={"shared_prompt_ids": 10_000}),
        "messages-beyond-base": _session("messages-beyond-base", s3={"shared_messages": 99}),
        "negative-count": _session("negative-count", s4={"shared_prompt_ids": -1}),
        "null-count": _session("null-count", s1={"shared_messages": None}),
        "count-without-base": _session("count-without-base", s0={"shared_prompt_ids": 3}),
        "new-messages-not-a-list": _session("new-messages-not-a-list", s2={"prompt_messages": '{"role": "user"}'}),
    }
    for name, rows in bad.items():
        write_turns(log / f"turns-{name}.parquet", rows, format=2)
