"""Finding and loading tokenizers: one rule for every command.

A log names its tokenizer (``tito.tokenizer``, written by the harness: a
folder such as ``fixtures/tokenizers/qwen3`` or a hub id such as
``Qwen/Qwen3-8B``); the user may add ``--tokenizer PATH`` (where to find the
log's tokenizer) or ``--tokenizer NAME=PATH`` (where to find the tokenizer a
log names ``NAME``).  :func:`resolve` turns a name into a folder, in this
order, and says what it tried when nothing fits:

1. a mapping ``NAME=PATH`` for exactly this name: ``PATH`` is used instead;
2. an existing folder: as given when absolute; a relative name against each
   log folder and the folders above it, then against the working directory;
3. a tokenizer shipped inside tito (the simulator's, by the names its logs
   record, or by its short name: ``qwen3``, ``small``), so that the demo logs
   decode after any install;
4. a Hugging Face hub id already in the local cache (``HF_HUB_CACHE``, or
   ``HF_HOME/hub``, or ``~/.cache/huggingface/hub``), read offline: this
   never reaches the network.

:func:`load` loads the folder with transformers, offline, without remote
code, and with transformers' start-up advice ("PyTorch was not found")
silenced.  Every failure is a :class:`~tito_cli.errors.TokenizerError`.

The *name* stays what the log records: golden dumps and JSON outputs show it,
never the local path it was found at, so they are the same on every machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._paths import FIXTURE_TOKENIZER, QWEN3_TOKENIZER, SHIPPED_NAMES
from .errors import TokenizerError

__all__ = [
    "SHIPPED",
    "TokenText",
    "TokenizerChoice",
    "as_choice",
    "beyond_vocabulary",
    "hub_cache_dir",
    "load",
    "load_decoder",
    "parse_tokenizer_options",
    "quiet_transformers",
    "resolve",
    "visible",
]

#: Tokenizers shipped inside the package, by the names the simulator records in its logs.
SHIPPED = {
    FIXTURE_TOKENIZER: "small",
    QWEN3_TOKENIZER: "qwen3",
}

_TIP = (
    "pass --tokenizer PATH (a folder with tokenizer.json), or --tokenizer NAME=PATH for a log that names NAME; "
    "for a hub id, download it first while online (hf download NAME) or set HF_HOME / HF_HUB_CACHE"
)


@dataclass(frozen=True, slots=True)
class TokenizerChoice:
    """What the user said about tokenizers: one folder for the log's, and folders by name."""

    #: ``--tokenizer PATH``: where to find the tokenizer the log records (or the one to use if it records none).
    override: str | None = None
    #: ``--tokenizer NAME=PATH``: where to find the tokenizer named ``NAME``.
    mapping: Mapping[str, str] = field(default_factory=dict)

    def name_for(self, recorded: str | None) -> str | None:
        """The name to resolve: the log's, else the override's (a log that records none)."""
        return recorded if recorded else self.override


def as_choice(value: TokenizerChoice | str | os.PathLike[str] | None) -> TokenizerChoice:
    """A choice from a library argument: a folder for the log's tokenizer, or a full choice."""
    if value is None:
        return TokenizerChoice()
    if isinstance(value, TokenizerChoice):
        return value
    return TokenizerChoice(override=os.fspath(value))


def parse_tokenizer_options(values: Sequence[str] | None) -> TokenizerChoice:
    """``--tokenizer`` values: ``NAME=PATH`` mappings (any number) and at most one plain ``PATH``."""
    override: str | None = None
    mapping: dict[str, str] = {}
    for value in values or ():
        name, sep, path = value.partition("=")
        if sep and name and path:
            mapping[name] = path
            continue
        if sep:
            raise TokenizerError(f"--tokenizer {value!r}: expected NAME=PATH or PATH", tip=_TIP)
        if override is not None:
            raise TokenizerError(
                f"--tokenizer given two folders ({override!r} and {value!r})",
                tip="give one PATH for the log's tokenizer; use NAME=PATH for others",
            )
        override = value
    return TokenizerChoice(override, mapping)


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, as ``huggingface_hub`` finds it (read at call time)."""
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if cache:
        return Path(cache).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def resolve(
    name: str, log_dirs: Iterable[Path] = (), choice: TokenizerChoice | None = None, *, label: str | None = None
) -> Path:
    """The folder holding tokenizer ``name`` (see the module docstring for the order).

    A mapping for ``name`` in ``choice``, else ``choice.override``, says
    where to look instead of ``name`` itself.  Raises
    :class:`TokenizerError` naming every place tried; ``label`` names the
    tokenizer in that message (default ``tokenizer 'NAME'``).
    """
    choice = choice or TokenizerChoice()
    wanted = choice.mapping.get(name) or choice.override or name
    tried: list[str] = []
    folder = _find_folder(wanted, list(log_dirs), tried)
    if folder is not None:
        return folder
    recorded = SHIPPED_NAMES.get(wanted, wanted)
    if recorded in SHIPPED:
        shipped = shipped_folder(recorded)
        if shipped is not None:
            return shipped
        tried.append(f"tito's shipped copy of {wanted}")
    else:
        tried.append(f"tito's shipped tokenizers ({', '.join(SHIPPED_NAMES)})")
    cached = _from_hub_cache(wanted, tried)
    if cached is not None:
        return cached
    what = label or f"tokenizer {name!r}"
    if wanted != name:
        what += f", to be found at {wanted!r},"
    raise TokenizerError(f"{what} is not found here (tried {'; '.join(tried)})", tip=_TIP)


def shipped_folder(name: str) -> Path | None:
    """The package's own copy of a shipped tokenizer, if the package holds it."""
    from importlib import resources  # not at import: every command's start-up would pay for it

    folder = resources.files("tito_cli") / "_data" / "tokenizers" / SHIPPED[name]
    path = Path(str(folder))
    return path if (path / "tokenizer.json").is_file() else None


def _find_folder(wanted: str, log_dirs: list[Path], tried: list[str]) -> Path | None:
    path = Path(wanted).expanduser()
    if path.is_absolute():
        tried.append(f"the folder {path}")
        return path if path.is_dir() else None
    starts: list[Path] = []
    for log_dir in log_dirs:
        log_dir = log_dir.resolve()
        starts += [log_dir, *log_dir.parents]
    starts.append(Path.cwd())
    seen: set[Path] = set()
    for start in starts:
        if start in seen:
            continue
        seen.add(start)
        if (start / path).is_dir():
            return start / path
    where = [str(d) for d in log_dirs]
    tried.append(
        f"the folder {wanted} from {' and '.join([*(f'{w} (and above)' for w in where), 'the working directory'])}"
    )
    return None


def _from_hub_cache(wanted: str, tried: list[str]) -> Path | None:
    """``wanted`` as a hub repo id in the local cache (the snapshot ``refs/main`` points at)."""
    from huggingface_hub import snapshot_download  # only imported for names that are not folders
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    cache = hub_cache_dir()
    try:
        folder = snapshot_download(wanted, cache_dir=cache, local_files_only=True)
    except HFValidationError:
        return None  # not a hub id at all: nothing to say about the cache
    except (LocalEntryNotFoundError, OSError, ValueError):
        tried.append(f"the hub id {wanted} in the local Hugging Face cache {cache}")
        return None
    return Path(folder)


def quiet_transformers() -> None:
    """Offline, and none of transformers' start-up advice on stderr (set before it is imported)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # "PyTorch was not found ..." is advice, silenced only by this variable.
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


class _FastDecoder:
    """A folder's ``tokenizer.json`` through the ``tokenizers`` library alone, for decoding.

    Loads in a small fraction of transformers' import and load time, which
    matters in every worker of a rebuild; decodes the same text for the byte-level
    tokenizers tito meets (transformers' fast tokenizers decode through it).
    """

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False, **_: Any) -> str:
        return str(self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def __len__(self) -> int:
        return int(self._backend.get_vocab_size(with_added_tokens=True))

    def get_vocab(self) -> dict[str, int]:
        """Token -> id, added tokens included (a model family is recognised from it)."""
        return dict(self._backend.get_vocab(with_added_tokens=True))


def load_decoder(folder: Path) -> Any:
    """A decode-only tokenizer for ``folder``: ``tokenizer.json`` read directly when present, else :func:`load`."""
    if not (folder / "tokenizer.json").is_file():
        return load(folder)
    try:
        from tokenizers import Tokenizer

        return _FastDecoder(Tokenizer.from_file(str(folder / "tokenizer.json")))
    except Exception as exc:  # the tokenizers library raises its own exception type for a bad file
        raise TokenizerError(f"cannot load tokenizer ({type(exc).__name__}: {exc})", file=folder) from None


def load(folder: Path) -> Any:
    """Load the tokenizer in ``folder`` with transformers: offline, never running code from the folder."""
    quiet_transformers()
    try:
        from transformers import AutoTokenizer  # slow import: only when a tokenizer is needed

        # A tokenizer folder travels with untrusted logs: its auto_map Python never runs
        # (transformers would otherwise ask on stdin, and run it on "y").
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # transformers raises many types for a bad folder
        if "custom code" in str(exc):
            raise TokenizerError(
                "the tokenizer folder needs its own Python code (auto_map), and tito never runs code from a "
                "tokenizer folder",
                file=folder,
                tip="point the log at a tokenizer that transformers' built-in classes load (tokenizer.json)",
            ) from None
        raise TokenizerError(
            f"cannot load tokenizer ({type(exc).__name__}: {exc})",
            file=folder,
            tip="the folder needs tokenizer.json (or the files transformers' AutoTokenizer reads)",
        ) from None


_VISIBLE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥"})


def beyond_vocabulary(token_id: int) -> str:
    """How an id that no token of the tokenizer has is shown wherever tokens are decoded for a person."""
    return f"⟨id {token_id} beyond the vocabulary⟩"


def visible(text: str) -> str:
    """Make spaces, newlines and tabs visible: ``␣``, ``↵``, ``⇥``."""
    return text.translate(_VISIBLE)


class TokenText:
    """Token ids as text: decoded one token at a time (cached), or the ids when there is no tokenizer.

    ``name`` is how outputs name the tokenizer: the name the log records,
    never the folder it was found in.
    """

    def __init__(self, tokenizer: Any = None, name: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.name = name
        self._cache: dict[int, str] = {}
        self._size: int | None = None

    @classmethod
    def open(
        cls, recorded: str | None, log_dirs: Iterable[Path] = (), choice: TokenizerChoice | None = None
    ) -> TokenText:
        """The decoder for a log that records ``recorded`` (see :func:`resolve`); ids only if nothing is named."""
        choice = choice or TokenizerChoice()
        name = choice.name_for(recorded)
        if name is None:
            return cls(None, None)
        label = f"the log's tokenizer {recorded!r}" if recorded else None
        tokenizer = load(resolve(name, log_dirs, choice, label=label))
        if not recorded:  # only the user's folder names it: its last part, the same wherever it is
            name = Path(name).name
        return cls(tokenizer, name)

    @property
    def decodes(self) -> bool:
        return self.tokenizer is not None

    def beyond(self, token_id: int) -> bool:
        """Whether ``token_id`` is no token of the tokenizer (at or past its size, added tokens included).

        A tokenizer decodes such an id to nothing, without a word: shown so, an id the model
        never had would vanish from what a person reads.  Always false without a tokenizer.
        """
        if self.tokenizer is None:
            return False
        if self._size is None:
            self._size = len(self.tokenizer)
        return int(token_id) >= self._size

    def raw(self, token_id: int) -> str:
        """One token as text (no whitespace substitution); its id without a tokenizer.

        An id beyond the vocabulary is :func:`beyond_vocabulary`'s marker.
        """
        token_id = int(token_id)
        text = self._cache.get(token_id)
        if text is None:
            if self.tokenizer is None:
                text = str(token_id)
            elif self.beyond(token_id):
                text = beyond_vocabulary(token_id)
            else:
                text = self.tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
            self._cache[token_id] = text
        return text

    def piece(self, token_id: int) -> str:
        """One token, whitespace made visible (an id beyond the vocabulary: its marker, as it is)."""
        if self.beyond(token_id):
            return beyond_vocabulary(int(token_id))
        return visible(self.raw(token_id))

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.piece(i) for i in ids]

    def decode(self, ids: Sequence[int]) -> str:
        """A run of tokens decoded together (multi-byte characters intact), whitespace as it is.

        Ids beyond the vocabulary cut the run: each is shown as its marker between the decoded runs.
        """
        if self.tokenizer is None:
            return " ".join(str(int(i)) for i in ids)
        return self._decoded(ids, str)

    def text(self, ids: Sequence[int]) -> str:
        """A run of tokens decoded together, whitespace visible (not in the markers of ids beyond the vocabulary)."""
        return self._decoded(ids, visible) if self.tokenizer is not None else self.decode(ids)

    def _decoded(self, ids: Sequence[int], shown: Callable[[str], str]) -> str:
        id_list = [int(i) for i in ids]
        if not id_list or not self.beyond(max(id_list)):
            return shown(self._decode_run(id_list))
        parts: list[str] = []
        run: list[int] = []
        for token_id in id_list:
            if self.beyond(token_id):
                parts += [shown(self._decode_run(run)), beyond_vocabulary(token_id)]
                run = []
            else:
                run.append(token_id)
        parts.append(shown(self._decode_run(run)))
        return "".join(parts)

    def _decode_run(self, ids: list[int]) -> str:
        if not ids:
            return ""
        return str(self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))
