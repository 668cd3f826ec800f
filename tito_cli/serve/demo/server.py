"""DemoUpstream: SGLang's native ``/generate`` and vLLM's chat wire, answered through a real tokenizer.

It follows the wires exactly where the gateway reads them (``../shared/formats/WIRE.md``):

* ``POST /generate`` (SGLang ``GenerateReqInput``): ``input_ids`` (or ``text``) and
  ``sampling_params`` in; ``text``, ``output_ids`` and ``meta_info`` (``id``, ``finish_reason`` as a
  dict ``{"type": "stop", "matched": id}`` / ``{"type": "length", "length": n}``, ``prompt_tokens``,
  ``completion_tokens``, ``cached_tokens``, and with ``return_logprob`` ``output_token_logprobs`` as
  ``[logprob, token_id, text or null]``) out; ``stream`` gives ``data:`` chunks with the cumulative
  text, ids and logprobs, then ``data: [DONE]``.
* ``POST /v1/chat/completions`` (vLLM with ``return_token_ids``): it renders the chat template itself
  (with the request's ``chat_template_kwargs``), answers ``prompt_token_ids`` at the root,
  ``choices[0].token_ids``, logprobs in ``choices[0].logprobs.content[]``, the message parsed by the
  family's reasoning and tool parsers; streamed, the prompt ids come in the first chunk and token ids as
  per-chunk deltas.
* ``GET /v1/models``, ``GET /health``.
* Provenance, when told (:attr:`DemoUpstream.experts_shape`, :attr:`DemoUpstream.version_every`): asked
  ``return_routed_experts``, ``meta_info.routed_experts`` is the base64 of raw int32 rows
  ``[len(tokens) - 1 - routed_experts_start_len, layers, topk]``, row ``i`` a function of ``tokens[:i + 1]``
  alone (:func:`prefix_routing`: what an engine computes with that prefix as its input); the weight version
  changes every ``version_every`` generated tokens (so within a call too), reported as SGLang does:
  ``meta_info.weight_version`` (the version at the call's end) and ``meta_info.weight_versions`` spans over
  the output, on the chat route in a top-level ``metadata``.

A *script* maps the conversation of a request — the messages for chat (a :class:`~.agent.Messages`,
carrying the request's tools), the decoded prompt text for generate — to the raw model output text;
the server tokenizes it with the real tokenizer, appends the family's end-of-turn marker, cuts at
``max_new_tokens`` / ``max_tokens`` (finish reason length), and gives each token a deterministic
logprob. Every answer is kept in ``ledger`` (under a lock). It listens on 127.0.0.1 unless told
otherwise, on a free port (or ``port``), in a background thread.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from ...families import family_named
from .agent import Messages
from .handler import handler_for
from .wire import ChatAnswer, assistant_message

__all__ = ["DemoUpstream", "Script", "prefix_routing"]

#: The request's conversation (messages for chat, the decoded prompt text for generate) -> raw output text.
Script = Callable[[Any], str]


def prefix_routing(tokens: list[int], shape: tuple[int, int], experts: int = 64) -> np.ndarray:
    """Rows ``[len(tokens), layers, topk]``: row ``i`` is a function of ``tokens[:i + 1]`` alone (a hash chain)."""
    layers, topk = shape
    rows = np.empty((len(tokens), layers, topk), dtype=np.int32)
    state = b"tito-routing"
    for i, token in enumerate(tokens):
        state = hashlib.blake2b(state + int(token).to_bytes(4, "little"), digest_size=16).digest()
        picks = np.frombuffer(hashlib.shake_128(state).digest(layers * topk), dtype=np.uint8)
        rows[i] = (picks.astype(np.int32) % experts).reshape(layers, topk)
    return rows


class DemoUpstream:
    """The server (a context manager); ``url`` is its base URL. ``tokenizer`` is a loaded transformers tokenizer."""

    def __init__(
        self,
        script: Script,
        tokenizer: Any,
        *,
        model: str = "tito-demo",
        host: str = "127.0.0.1",
        port: int = 0,
        family: str = "qwen3",
    ) -> None:
        self.script = script
        self.model = model
        self.tokenizer = tokenizer
        self._backend = tokenizer.backend_tokenizer
        #: The model family whose outputs the script writes: its end marker ends an output that has none.
        self.profile = family_named(family)
        self.end = self._backend.token_to_id(self.profile.end_of_turn[0])
        self.ledger: list[dict[str, Any]] = []
        #: ``(layers, topk)`` of the routed experts answered when asked (None: never answered).
        self.experts_shape: tuple[int, int] | None = None
        #: The weight version changes every this many generated tokens (None: no version reported).
        self.version_every: int | None = None
        #: Generated tokens so far (what the weight version counts).
        self.generated = 0
        #: The client port of each POST, in arrival order: which requests shared a connection.
        self.peers: list[int] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.server = ThreadingHTTPServer((host, port), handler_for(self))
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="demo-upstream")

    def __enter__(self) -> DemoUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving: requests in flight are cut short, the port is released."""
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` or until the server closes (True then)."""
        return self._closing.wait(seconds)

    # -- the model ----------------------------------------------------------------------------

    @staticmethod
    def logprob(position: int, token: int) -> float:
        """A deterministic, float32-exact logprob in [-1.52, -0.015] (what a sampler would report)."""
        return -float(((token * 7 + position * 13) % 97) + 1) / 64.0

    def encode(self, text: str) -> list[int]:
        return list(self._backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return str(self._backend.decode(ids, skip_special_tokens=skip_special_tokens))

    def _output(self, text: str, limit: int | None) -> tuple[list[int], bool]:
        ended = text.endswith(self.profile.end_of_turn)  # (harmony's call ends <|call|>, not <|return|>)
        ids = [*self.encode(text), *([] if ended else [self.end])]
        if limit is not None and len(ids) > limit:
            return ids[:limit], True
        return ids, False

    def _cached(self, prompt: list[int]) -> int:
        """Tokens shared with the longest prefix among recent prompts (a radix cache's hit)."""
        best = 0
        for entry in self.ledger[-8:]:
            n = 0
            for a, b in zip(prompt, entry["prompt_ids"], strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return best

    def _log(self, entry: dict[str, Any]) -> None:
        with self._lock:
            entry["cached_tokens"] = self._cached(entry["prompt_ids"])
            entry["weight_versions"] = self._versions(len(entry["output_ids"]))
            self.ledger.append(entry)

    def _versions(self, outputs: int) -> list[dict[str, Any]] | None:
        """Spans ``{version, start, end}`` over this call's outputs (lock held), or None without versions."""
        every = self.version_every
        if every is None:
            return None
        spans: list[dict[str, Any]] = []
        for index in range(outputs):
            version = f"v{self.generated // every}"
            self.generated += 1
            if spans and spans[-1]["version"] == version:
                spans[-1]["end"] = index + 1
            else:
                spans.append({"version": version, "start": index, "end": index + 1})
        return spans

    def provenance(self, entry: dict[str, Any]) -> dict[str, Any]:
        """The weight versions an answer reports (``weight_version`` at its end, ``weight_versions`` spans)."""
        spans = entry.get("weight_versions")
        if spans is None:
            return {}
        last = spans[-1]["version"] if spans else f"v{self.generated // (self.version_every or 1)}"
        return {"weight_version": last, "weight_versions": spans}

    def routed_experts(self, body: dict[str, Any], tokens: list[int]) -> str | None:
        """``meta_info.routed_experts`` for a request that asks: rows ``[start, len(tokens) - 1)``, base64."""
        if not body.get("return_routed_experts") or self.experts_shape is None:
            return None
        start = int(body.get("routed_experts_start_len") or 0)
        rows = prefix_routing(tokens[:-1], self.experts_shape)[start:]
        return base64.b64encode(np.ascontiguousarray(rows, dtype="<i4").tobytes()).decode()

    def generate(self, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """SGLang's /generate answer (and its ledger entry)."""
        prompt = list(body["input_ids"]) if body.get("input_ids") is not None else self.encode(body["text"])
        sampling = body.get("sampling_params") or {}
        output, cut = self._output(self.script(self.decode(prompt)), sampling.get("max_new_tokens", 128))
        logprobs = [self.logprob(i, t) for i, t in enumerate(output)]
        entry = {"api": "generate", "body": body, "prompt_ids": prompt, "output_ids": output, "logprobs": logprobs}
        self._log(entry)
        skip = sampling.get("skip_special_tokens", True)
        finish = {"type": "length", "length": len(output)} if cut else {"type": "stop", "matched": self.end}
        with_text = bool(body.get("return_text_in_logprobs"))
        meta: dict[str, Any] = {
            "id": body.get("rid") or secrets.token_hex(16),
            "finish_reason": finish,
            "prompt_tokens": len(prompt),
            "completion_tokens": len(output),
            "cached_tokens": entry["cached_tokens"],
            "e2e_latency": 0.001,
        }
        meta.update(self.provenance(entry))
        experts = self.routed_experts(body, [*prompt, *output])
        if experts is not None:
            meta["routed_experts"] = experts
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = [
                [lp, t, self.decode([t]) if with_text else None] for lp, t in zip(logprobs, output, strict=True)
            ]
        answer = {"text": self.decode(output, skip), "output_ids": output, "meta_info": meta}
        return answer, entry

    def generate_chunks(self, answer: dict[str, Any], skip: bool) -> list[dict[str, Any]]:
        """The streamed form: cumulative text, ids and logprobs per chunk, the finish reason on the last."""
        output = answer["output_ids"]
        meta = answer["meta_info"]
        chunks = []
        for n in range(1, len(output) + 1):
            last = n == len(output)
            chunk_meta = {**meta, "finish_reason": meta["finish_reason"] if last else None, "completion_tokens": n}
            if "output_token_logprobs" in meta:
                chunk_meta["output_token_logprobs"] = meta["output_token_logprobs"][:n]
            chunks.append({"text": self.decode(output[:n], skip), "output_ids": output[:n], "meta_info": chunk_meta})
        return chunks

    def chat(self, body: dict[str, Any]) -> tuple[ChatAnswer, dict[str, Any]]:
        """vLLM's chat answer with return_token_ids, and its ledger entry."""
        messages, tools = body["messages"], body.get("tools")
        options = body.get("chat_template_kwargs") or {}
        text = self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=False, **options
        )
        prompt = self.encode(text)
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        output, cut = self._output(self.script(Messages(messages, tools)), limit)
        logprobs = [self.logprob(i, t) for i, t in enumerate(output)]
        entry = {"api": "chat", "body": body, "prompt_ids": prompt, "output_ids": output, "logprobs": logprobs}
        self._log(entry)
        parsed = self.profile.parse_output(self.decode(output))
        calls = [
            {
                "id": f"chatcmpl-tool-{secrets.token_hex(8)}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
            }
            for c in parsed.tool_calls
        ]
        finish = "length" if cut else ("tool_calls" if calls else "stop")
        answer = ChatAnswer(
            id=f"chatcmpl-{secrets.token_hex(8)}",
            created=int(time.time()),
            model=body.get("model", self.model),
            prompt=prompt,
            output=output,
            tokens=[f"token_id:{t}" for t in output],
            logprobs=logprobs,
            message=assistant_message(parsed.content or None, calls, parsed.reasoning),
            finish=finish,
            want_ids=bool(body.get("return_token_ids")),
            want_logprobs=bool(body.get("logprobs")),
        )
        return answer, entry

    # -- HTTP --------------------------------------------------------------------------------

    def before_generation(self, handler: BaseHTTPRequestHandler) -> bool:
        """Called before each generation request is answered; False when ``handler`` already answered it.

        The tests' stand-in overrides it to inject faults.
        """
        return True

    def outgoing(self, answer: dict[str, Any]) -> dict[str, Any]:
        """A non-streamed generation answer just before it is sent (the tests' stand-in tampers with it)."""
        return answer

    def write_body(self, handler: BaseHTTPRequestHandler, data: bytes) -> None:
        """Send a JSON answer's body (the tests' stand-in drips it out a byte at a time)."""
        handler.wfile.write(data)
