"""The same seq appears twice for one session, in two different files."""

from tests.bad_input.kit import case, write_good, write_turns


def build(log):
    write_good(log)
    turns = case("cases-threshold-1024/case-3.7", "bad")
    write_turns(log / "a" / "turns-a.parquet", turns[:3])
    again = dict(turns[3], seq=turns[2]["seq"])
    write_turns(log / "b" / "turns-b.parquet", [again, *turns[4:]])
