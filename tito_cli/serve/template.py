"""The tokenizer and chat template the gateway renders with (called from worker threads, never the loop)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import TokenizerError
from ..families import FamilyProfile, family_for, family_named, shipped_template
from ..families.render import render_prompt
from ..tokenizer import TokenizerChoice, load, resolve
from .exchange import ClientError
from .incremental import PieceEncoder, batch_encoder
from .pools import in_workers
from .registry import DEFAULT_LIVE_SESSIONS

if TYPE_CHECKING:
    from .config import ServeConfig

__all__ = ["ChatTemplate", "decide_family"]


def decide_family(name: str, tokenizer: Any, parser: str | None = None) -> FamilyProfile | None:
    """The gateway's one model family: the one the tokenizer is recognised as, else ``--parser``'s.

    Made once, when the tokenizer is loaded; the template, the output parser and the canonical history
    all use the profile returned.  ``ValueError`` for a ``parser`` no family answers to, or one that
    contradicts the family the tokenizer is recognised as (it would render one family and parse another).
    """
    named = family_named(parser) if parser else None
    recognised = family_for(name, tokenizer)
    if named is not None and recognised is not None and named.name != recognised.name:
        raise ValueError(
            f"--parser {named.name} contradicts the tokenizer {name!r}, recognised as {recognised.name}: "
            f"drop --parser or give a {named.name} tokenizer"
        )
    return recognised or named


class ChatTemplate:
    """One tokenizer: its chat template renders messages, its fast backend tokenizes and decodes.

    Thread-safe for what the gateway asks: rendering is a Jinja call, and encoding and decoding go
    straight to the Rust tokenizer (the transformers wrapper would toggle truncation state per call).
    ``pieces`` tokenizes the ``render`` history's prompts by pieces, per session (``incremental.py``).
    """

    def __init__(
        self,
        name: str,
        family: str | None = None,
        *,
        folder: str | None = None,
        options: Mapping[str, Any] = {},
        sessions: int = DEFAULT_LIVE_SESSIONS,
    ) -> None:
        self.name = name
        #: ``--chat-template-kwargs``: what every render passes the template (a request's own override them).
        self.options = dict(options)
        # --tokenizer NAME=PATH: the log records NAME, the tokenizer is loaded from PATH.
        choice = TokenizerChoice(mapping={name: folder}) if folder else None
        self.folder = resolve(name, choice=choice, label=f"tokenizer {name!r} (--tokenizer)")
        self.tokenizer = load(self.folder)
        #: The model family (:func:`decide_family`): how its servers hand messages to the template, how
        #: its outputs are parsed and where its turns end.
        self.family: FamilyProfile | None = decide_family(name, self.tokenizer, family)
        # A folder without a template (lenML's gpt-oss copy lacks chat_template.jinja) renders with the
        # one tito ships for its family; a folder's own template always wins.
        self.template: str | None = None
        if not getattr(self.tokenizer, "chat_template", None):
            self.template = shipped_template(self.family) if self.family is not None else None
            if self.template is None:
                raise TokenizerError("the tokenizer has no chat template", file=self.folder)
        #: The fast (Rust) tokenizer: its batch encoding releases the GIL while it tokenizes, ``encode`` does not.
        self.backend = self.tokenizer.backend_tokenizer
        self._encode_batch = batch_encoder(self.backend)
        #: The ``render`` history's tokenizer of prompts by pieces, held per session (one per tokenizer).
        self.pieces = PieceEncoder(self.backend, max_sessions=sessions)

    @classmethod
    @in_workers
    def configured(cls, config: ServeConfig) -> ChatTemplate:
        """The template ``tito serve`` renders with: ``--tokenizer`` (``NAME=PATH`` too), ``--parser``,
        ``--chat-template-kwargs``."""
        name = config.tokenizer_name
        assert name is not None, "a tokenizer name first"
        return cls(
            name, config.parser, folder=config.tokenizer_folder, options=config.chat_template_kwargs,
            sessions=config.live_sessions,
        )  # fmt: skip

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, options: Mapping[str, Any] = {}
    ) -> str:
        """The prompt text, ending with the assistant generation prompt (``options``: the template's kwargs)."""
        import jinja2

        variables = {**self.options, **options}
        try:
            return render_prompt(
                self.tokenizer, self.family, messages, tools, template=self.template, variables=variables
            )
        except (jinja2.TemplateError, TypeError, ValueError, KeyError) as exc:
            raise ClientError(f"the chat template cannot render these messages ({exc})") from None

    def encode(self, text: str) -> list[int]:
        """``text``'s ids (through a batch encoding, so that the event loop runs while Rust tokenizes)."""
        ids: list[int] = self._encode_batch([text], add_special_tokens=False)[0].ids
        return ids

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        return self.encode(self.render(messages, tools))

    def decode(self, ids: list[int]) -> str:
        return str(self.backend.decode(ids, skip_special_tokens=False))
