"""SGLang's native ``/generate``: the gateway renders the chat template, sends ids, parses the output ids.

As the reference's adapters do: the messages are rendered with the tokenizer's chat template
(``add_generation_prompt``, the tools), the ids sent with ``return_logprob``; the output ids and
logprobs are read from ``meta_info.output_token_logprobs`` (``[logprob, id, text]`` each) and the
finish reason from ``meta_info.finish_reason`` (a dict; its ``type`` is recorded).  The ids and
logprobs are checked (:func:`~.base.check_answer`, at most ``max_new_tokens`` of them) before anything
is parsed or held.  The output text — decoded from the output ids, so the client's reply is what the
turn records, never the upstream's ``text`` — is split into reasoning, content and tool calls by the
model family's parser: the family decided once, when the tokenizer was loaded (``template.decide_family``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...families import FamilyProfile
from ..exchange import ChatRequest, Generation, OutputCall, UpstreamError, assistant_message
from ..experts import ExpertsAsk, decode_rows, experts_shape, weight_versions
from ..history import RENDERED, TEMPLATE_OPTIONS, CanonicalHistory, RenderedHistory
from ..prompt import ids_json as ids_text
from ..template import ChatTemplate
from .answers import check_answer, loads_answer
from .base import INLINE_BYTES, Upstream, client_sampling, dumps_body, tool_arguments_object, with_arguments

__all__ = ["GenerateUpstream", "generate_payload", "generate_sampling", "read_generate_answer"]

PATH = "/generate"

#: Output ids decoded on the event loop (Qwen3: about 30 us for 256 ids, less than a hop to a worker thread);
#: longer outputs are decoded in a worker thread.
INLINE_DECODE_IDS = 256


class GenerateUpstream(Upstream):
    name = "generate"
    summary = "SGLang's native /generate: the gateway renders the chat template and parses the output"
    renders = True

    _history: RenderedHistory | CanonicalHistory | None = None
    _experts: ExpertsAsk | None = None

    def profile(self) -> FamilyProfile:
        """The model family the template decided (``decide_family``): its parser reads the outputs."""
        template = self.template()
        if template.family is None:
            raise ValueError(f"no output parser recognises the tokenizer {template.name!r}: name one with --parser")
        family = template.family
        return family

    def history(self) -> RenderedHistory | CanonicalHistory:
        """How prompt ids are built (``--history``): rendered whole, or continued from the held tokens."""
        if self._history is None:
            if self.config.history == CanonicalHistory.name:
                end = self.profile().end_of_turn
                self._history = CanonicalHistory(self.template(), end, max_sessions=self.config.live_sessions)
            else:
                template = self.template()
                self._history = RenderedHistory(template, template.pieces)
        return self._history

    def session_finished(self, session_id: str) -> None:
        self.history().forget(session_id)
        if self._experts is not None:
            self._experts.forget(session_id)

    def prepare(self, request: ChatRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        return with_arguments(request.messages, tool_arguments_object), request.tools

    async def generate(self, request: ChatRequest, session_id: str, call_id: Callable[[], str]) -> Generation:
        """One /generate call; the turn records the sampling parameters sent, the weight versions ``meta_info``
        reports, and with ``--routed-experts`` the rows asked for (:mod:`..experts`)."""
        template = self.template()
        profile = self.profile()
        messages, tools = self.prepare(request)
        history = self.history()
        canonical = isinstance(history, CanonicalHistory)
        own = request.chat_template_kwargs
        if own:
            # A request's own template options: rendered whole with them, and not held for canonical.
            history = RenderedHistory(_WithOptions(template, own))
        prompt = await self.offload(history.prompt, session_id, messages, tools)
        kwargs = {**template.options, **own}
        prompt_ids = prompt.ids
        sampling = generate_sampling(request, self.max_tokens(request) or self.config.default_max_tokens)
        asked = self.experts()
        experts_start = asked.start(session_id, prompt_ids) if asked is not None else 0
        made = (prompt_ids, prompt.ids_json, sampling, asked is not None, experts_start)
        heavy = prompt.ids_json is None and len(prompt_ids) > INLINE_BYTES // 8
        payload = await self.offload(generate_payload, *made) if heavy else generate_payload(*made)
        content = await self.client.post(PATH, payload, {"X-SMG-Routing-Key": session_id})
        answer = await self.parse(PATH, content, loads_answer)
        meta, output_ids, logprobs, finish_type = read_generate_answer(answer, prompt_ids, sampling, self.vocabulary())
        # The reply is what the recorded ids say: decoded from them, never the upstream's own ``text``.
        # A turn's usual output (tens to hundreds of ids) decodes in microseconds: on the loop, not a hop.
        decoded = len(output_ids) <= INLINE_DECODE_IDS
        text = template.decode(output_ids) if decoded else await self.offload(template.decode, output_ids)
        parsed = profile.parse_output(text)
        calls = [OutputCall(call_id(), call.name, call.arguments) for call in parsed.tool_calls]
        reasoning = parsed.reasoning
        response = assistant_message(parsed.content, reasoning, calls, tool_arguments_object)
        # Held before the client has the answer: its next request must find this turn.  On the loop: it
        # decodes at most 8 ids and appends arrays (microseconds, not worth a hop to a worker thread).
        rows = None
        if asked is not None:
            tokens = len(prompt_ids) + len(output_ids)
            value = meta.get("routed_experts")
            decode = (value, tokens, experts_start, asked.shape)
            big = isinstance(value, str) and len(value) > INLINE_BYTES  # 1.5 KiB a token at 48 x 8: a worker's
            rows = await self.offload(decode_rows, *decode) if big else decode_rows(*decode)
        history.remember(session_id, prompt, messages, tools, output_ids, response)
        return Generation(
            prompt_ids=prompt_ids,
            output_ids=output_ids,
            logprobs=logprobs,
            finish_reason=finish_type,
            content=parsed.content,
            reasoning=reasoning,
            tool_calls=calls,
            ill_formed=parsed.ill_formed,
            prompt_messages=prompt.recorded_messages(),
            tools=tools,
            response_message=response,
            upstream_id=str(meta["id"]) if "id" in meta else None,
            cached_tokens=int(meta.get("cached_tokens") or 0),
            notes={
                **(prompt.metadata() if canonical and not own else {}),
                **({"history": RENDERED, "history_reason": TEMPLATE_OPTIONS} if canonical and own else {}),
                **({"chat_template_kwargs": kwargs} if kwargs else {}),
            },
            sampling=sampling,
            weight_versions=weight_versions(meta),
            routed_experts=rows,
            routed_experts_start=experts_start,
        )

    def experts(self) -> ExpertsAsk | None:
        """What the session's log holds of routed experts (``--routed-experts``), else None."""
        if not self.config.routed_experts:
            return None
        if self._experts is None:
            self._experts = ExpertsAsk(experts_shape(self.config), sessions=self.config.live_sessions)
        return self._experts

    def recorded(self, session_id: str, generation: Generation) -> None:
        if self._experts is not None and generation.routed_experts is not None:
            tokens = [*generation.prompt_ids, *generation.output_ids]
            self._experts.recorded(session_id, tokens, generation.routed_experts_start)


def generate_sampling(request: ChatRequest, max_new_tokens: int) -> dict[str, Any]:
    """The ``sampling_params`` of ``request`` (what the turn records as its sampling provenance)."""
    return {
        "max_new_tokens": max_new_tokens,
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
        "no_stop_trim": True,
        **client_sampling(request),
    }


def generate_payload(
    prompt_ids: Sequence[int], ids_json: str | None, sampling: dict[str, Any], experts: bool, experts_start: int
) -> bytes:
    """The ``/generate`` body: the ids (their JSON text spliced in when the history kept it), the sampling
    parameters, logprobs asked for, and with ``experts`` the routed experts from ``experts_start`` on."""
    body: dict[str, Any] = {
        "sampling_params": sampling,
        "return_logprob": True,
        "logprob_start_len": -1,
        "stream": False,
    }
    if experts:
        body["return_routed_experts"] = True
        if experts_start:
            body["routed_experts_start_len"] = experts_start
    if ids_json is None:
        ids_json = ids_text(prompt_ids)
    return f'{{"input_ids":{ids_json},{dumps_body(body)[1:].decode()}'.encode()


def read_generate_answer(
    answer: Any, prompt_ids: Sequence[int], sampling: dict[str, Any], vocabulary: int | None
) -> tuple[dict[str, Any], list[int], list[float], str]:
    """A ``/generate`` answer's ``meta_info``, output ids, logprobs and finish type, checked (UpstreamError)."""
    meta = answer.get("meta_info") if isinstance(answer, dict) else None
    if not isinstance(meta, dict):
        raise UpstreamError("the upstream's /generate answer has no meta_info")
    pairs = meta.get("output_token_logprobs")
    limit = sampling["max_new_tokens"]
    if isinstance(pairs, list) and len(pairs) > limit:
        raise UpstreamError(f"the upstream answered {len(pairs)} output token ids for max_new_tokens {limit}")
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) >= 2 for p in pairs):
        raise UpstreamError("the upstream's /generate answer has no meta_info.output_token_logprobs")
    output_ids = [p[1] for p in pairs]
    logprobs = [p[0] for p in pairs]
    check_answer(prompt_ids, output_ids, logprobs, PATH, vocabulary, check_prompt=False)
    finish = meta.get("finish_reason")
    if isinstance(finish, dict) and finish.get("type") == "abort":
        raise UpstreamError(f"the upstream aborted the generation: {finish.get('message', '')}")
    finish_type = str(finish.get("type", "stop")) if isinstance(finish, dict) else str(finish or "stop")
    return meta, output_ids, logprobs, finish_type


class _WithOptions:
    """The gateway's template rendering with a request's own chat-template options."""

    def __init__(self, template: ChatTemplate, options: dict[str, Any]) -> None:
        self.template = template
        self.options = options

    def render(self, messages: list[dict[str, Any]], tools: Any) -> str:
        return self.template.render(messages, tools, self.options)

    def encode(self, text: str) -> list[int]:
        return self.template.encode(text)

    def decode(self, ids: list[int]) -> str:
        return self.template.decode(ids)
