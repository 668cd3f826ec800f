"""Where a turn's tokenizing goes: the Qwen3 tokenizer on the serve benchmark's tool results, whole and in parts.

    python benchmarks/tokenizer_parts.py [--runs 3]

Each turn of ``benchmarks/serve.py`` appends a tool result of about 2,000 tokens, which a canonical
gateway tokenizes (``encode_batch_fast``, as ``serve/template.py`` does). The same tokenizer is timed
(CPU time of this process, median over 64 texts x ``--runs``) as it is, without its normalizer and
without its pre-tokenizer (copies made from its ``tokenizer.json``; their ids are not the tokenizer's
in general: they only show what each step costs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from serve import QWEN3, filler
from tokenizers import Tokenizer

MARKERS = ("<|im_start|>user\n<tool_response>\n", "\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


def cpu_ms(tokenizer: Tokenizer, texts: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        for text in texts:
            began = time.process_time()
            tokenizer.encode_batch_fast([text])
            times.append(time.process_time() - began)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    config = json.loads(Path(QWEN3, "tokenizer.json").read_text(encoding="utf-8"))
    texts = [MARKERS[0] + filler(s, t, 2000) + MARKERS[1] for s in range(4) for t in range(16)]
    whole = Tokenizer.from_str(json.dumps(config))
    tokens = len(whole.encode_batch_fast([texts[0]])[0].ids)
    variants = {
        "as it is": whole,
        "no normalizer": Tokenizer.from_str(json.dumps({**config, "normalizer": None})),
        "no pre-tokenizer": Tokenizer.from_str(json.dumps({**config, "pre_tokenizer": None})),
    }
    print(f"Qwen3 encode_batch_fast, one text of {tokens:,} tokens ({len(texts[0]):,} characters), CPU ms, medians")
    base = None
    for name, tokenizer in variants.items():
        ms = cpu_ms(tokenizer, texts, args.runs)
        base = base or ms
        print(f"{name:<18}{ms:8.2f}{ms / base:8.2f}x")


if __name__ == "__main__":
    main()
