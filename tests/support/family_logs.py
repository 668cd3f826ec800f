"""The model families' real tokenizers (installed by ``npm ci --prefix tests/npm``) and logs simulated through them.

tito ships neither the DeepSeek-V3 nor the gpt-oss tokenizer, and Llama 3's may never be committed:
lenML's npm packages carry byte-identical copies of the official files, pinned in
``tests/npm/package-lock.json``.  A test needing one skips, naming the set-up command, when the
packages are not installed, and fails instead where ``CI`` is set.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from .helpers import REPO

NPM = REPO / "tests" / "npm" / "node_modules" / "@lenml"


@dataclass(frozen=True)
class FamilyTokenizer:
    family: str
    #: The hub name the simulated logs record (the family is recognised from it or from the vocabulary).
    hub_name: str
    package: str
    sha256: str
    size: int
    #: The drift classes its template (and the simulated harness) must show, each named for what caused it.
    drift: tuple[str, ...] = ("reasoning dropped", "tool-call args re-rendered")

    @property
    def folder(self) -> Path:
        return NPM / self.package / "models"


TOKENIZERS = {
    "deepseek-v3": FamilyTokenizer(
        "deepseek-v3",
        "deepseek-ai/DeepSeek-V3.1",
        "tokenizer-deepseek_v3",
        "621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41",
        7_847_652,
    ),
    "gpt-oss": FamilyTokenizer(
        "gpt-oss",
        "openai/gpt-oss-20b",
        "tokenizer-gptoss",
        "0614fe83cadab421296e664e1f48f4261fa8fef6e03e63bb75c20f38e37d07d3",
        27_868_174,
    ),
    # Meta Llama 3 Community License: installed by npm, never committed.
    "llama3": FamilyTokenizer(
        "llama3",
        "meta-llama/Meta-Llama-3-8B-Instruct",
        "tokenizer-llama3_1",
        "e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7",
        9_085_698,
        ("tool-call args re-rendered", "re-tokenized"),
    ),
}

_checked: set[str] = set()


def tokenizer_folder(family: str) -> Path:
    """The family's tokenizer folder, its tokenizer.json checked against the official file's hash."""
    spec = TOKENIZERS[family]
    path = spec.folder / "tokenizer.json"
    if not path.is_file():
        message = f"{path} is not installed: run `npm ci --prefix tests/npm` (the README's set-up)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    if family not in _checked:
        data = path.read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (spec.size, spec.sha256), path
        _checked.add(family)
    return spec.folder
