"""A generate prompt's ids and their JSON text, as the cheaper paths make them, are what the plain paths make.

``ChatTemplate.encode`` tokenizes through ``encode_batch_fast`` where tokenizers has it (no offsets);
the ids must be ``Tokenizer.encode``'s, for every family's tokenizer here, on text with special tokens,
non-ASCII characters that normalization may change, and whitespace runs.  The ids' JSON text (what a
``/generate`` body splices in and canonical history extends) is written by msgspec: it must be
``json.dumps``'s compact text, for a list and for an ``array('i')``.
"""

from __future__ import annotations

import json
from array import array

import pytest

from tests.support.family_logs import TOKENIZERS, tokenizer_folder
from tests.support.helpers import REPO
from tito_cli.serve.incremental import batch_encoder
from tito_cli.serve.prompt import extend_json, ids_json
from tito_cli.serve.template import ChatTemplate

QWEN3 = REPO / "fixtures" / "tokenizers" / "qwen3"

TEXTS = [
    "",
    "plain words, then numbers 12345 and 3.14159",
    "<|im_start|>user\nCafe\u0301 na\u00efve \u212b \ufb01le \u2460 \uff21 日本語 🙂<|im_end|>\n",
    "  leading spaces\n\n\n\ttabs\r\nand   runs   \u00a0 of whitespace  ",
    "def f(x):\n    return {'a': [1, 2, 3]}  # code\n" * 20,
]


@pytest.mark.parametrize("family", ["qwen3", *sorted(TOKENIZERS)])
def test_template_encode_gives_the_plain_encodes_ids(family: str) -> None:
    template = ChatTemplate(str(QWEN3 if family == "qwen3" else tokenizer_folder(family)))
    backend = template.backend
    if hasattr(backend, "encode_batch_fast"):
        assert batch_encoder(backend) == backend.encode_batch_fast  # the cheaper path is the one taken
    for text in TEXTS:
        plain = backend.encode(text, add_special_tokens=False).ids
        assert template.encode(text) == plain, (family, text[:40])
        assert [e.ids for e in batch_encoder(backend)([text, text[::-1]], add_special_tokens=False)] == [
            plain,
            backend.encode(text[::-1], add_special_tokens=False).ids,
        ]


@pytest.mark.parametrize("ids", [[], [0], [7, 151643, 2147483647], list(range(0, 300_000, 7))])
def test_ids_json_is_json_dumps_compact_text(ids: list[int]) -> None:
    expected = json.dumps(ids, separators=(",", ":"))
    assert ids_json(ids) == expected
    assert ids_json(array("i", ids)) == expected
    more = [5, 6]
    assert extend_json(ids_json(ids), more) == json.dumps([*ids, *more], separators=(",", ":"))
