"""How small any lossless turn log of a workload can be: the information its format-2 log holds.

    python benchmarks/information.py LOG_FORMAT_2 [--words]

A format-2 log stores each session's new ids, its outputs' logprobs and its new
message text about once.  Whatever the encoding, a lossless log must keep at
least the information of those values.  This script estimates it from the
stored values themselves, each part by the plug-in (empirical, order-0)
entropy of what was stored.  That understates the true information only where
the values are independent draws, as in the synthetic workload
(``workload.py``: uniform ids, independent logprobs and words); for real text
(the ``qwen3`` and ``swe`` workloads) ids depend on their neighbours, and an
order-0 estimate can exceed what a good encoding needs (format 2 stores the
qwen3 ids in 2.9 bits each against an order-0 entropy of 8.0), so it is no
bound there:

* ids: every id a format-2 row stores (its new prompt ids and its output ids),
  at the entropy of their value counts;
* logprobs: every stored float32, at the entropy of their bit patterns;
* words (``--words``, for the synthetic workload, whose text is words drawn
  from ``workload._WORDS``): every word of that list inside a message's text,
  at ``log2(len(_WORDS))`` bits, its uniform draw, each distinct string
  once; everything else in the text (spaces, JSON, indentation) is counted
  as free.

``benchmarks/compact.py`` prints the sum beside format 1's size: format 1's
bytes over that sum is the best ratio any format could reach on the workload.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from workload import _WORDS  # noqa: E402

_WORD = re.compile(r"[A-Za-z]+")


def plug_in_bits(values: np.ndarray) -> float:
    """Total bits of ``values`` at the entropy of their own value counts (0 for none)."""
    if values.size == 0:
        return 0.0
    _, counts = np.unique(values, return_counts=True)
    p = counts / values.size
    return float(-(p * np.log2(p)).sum()) * values.size


def _turn_files(log: Path) -> list[Path]:
    return sorted(p for p in log.rglob("*.parquet") if "prompt_ids" in pq.read_schema(p).names)


def _strings(value: object) -> Iterator[str]:
    """Every string inside a parsed JSON value (keys excluded)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def _message_words(cell: str | None, words: frozenset[str], seen: set[bytes]) -> int:
    """Words of ``words`` in the strings of a JSON cell, each distinct string counted once.

    A string met before (the next prompt echoes the response message, so
    format 2 stores it twice) adds nothing: it is no new information.
    """
    if cell is None:
        return 0
    count = 0
    for text in _strings(json.loads(cell)):
        digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
        if digest in seen:
            continue
        seen.add(digest)
        if text.startswith("{"):
            try:
                count += _message_words(text, words, seen)  # tool-call arguments: JSON inside a string
                continue
            except ValueError:
                pass
        count += sum(1 for word in _WORD.findall(text) if word in words)
    return count


def information(log: Path, *, words: bool) -> dict[str, float]:
    """Bytes of information (lower estimates) in the format-2 log ``log``, by part."""
    ids: list[np.ndarray] = []
    logprobs: list[np.ndarray] = []
    word_count = 0
    seen: set[bytes] = set()
    vocabulary = frozenset(_WORDS)
    for path in _turn_files(log):
        columns = ["prompt_ids", "output_ids", "output_logprobs"]
        if words:
            columns += ["prompt_messages", "response_message"]
        table = pq.read_table(path, columns=columns)
        for name in ("prompt_ids", "output_ids"):
            ids.append(np.asarray(table.column(name).combine_chunks().flatten()))
        logprobs.append(np.asarray(table.column("output_logprobs").combine_chunks().flatten(), dtype=np.float32))
        if words:
            for name in ("prompt_messages", "response_message"):
                word_count += sum(_message_words(cell, vocabulary, seen) for cell in table.column(name).to_pylist())
    parts = {
        "ids": plug_in_bits(np.concatenate(ids)) / 8,
        "logprobs": plug_in_bits(np.concatenate(logprobs).view(np.uint32)) / 8,
    }
    if words:
        parts["words"] = word_count * math.log2(len(_WORDS)) / 8
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="a turn log in format 2 (tito compact LOG --out DIR)")
    parser.add_argument("--words", action="store_true", help="count the synthetic workload's words as information")
    args = parser.parse_args()
    parts = information(args.log, words=args.words)
    for name, size in parts.items():
        print(f"{name:>9} {size / 1e6:10.2f} MB")
    print(f"{'total':>9} {sum(parts.values()) / 1e6:10.2f} MB")


if __name__ == "__main__":
    main()
