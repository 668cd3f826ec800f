"""The inference-server stand-in for the gateway tests: SGLang's native /generate and vLLM's chat wire.

The only stand-in the gateway tests use (an inference server needs a GPU).  It follows the wires
exactly where the gateway reads them:

* ``POST /generate`` (SGLang ``GenerateReqInput``): ``input_ids`` (or ``text``) and
  ``sampling_params`` in; ``text``, ``output_ids`` and ``meta_info`` (``id``, ``finish_reason`` as a
  dict ``{"type": "stop", "matched": id}`` / ``{"type": "length", "length": n}``, ``prompt_tokens``,
  ``completion_tokens``, ``cached_tokens``, and with ``return_logprob`` ``output_token_logprobs`` as
  ``[logprob, token_id, text or null]``) out; ``stream`` gives ``data:`` chunks with the cumulative
  text, ids and logprobs, then ``data: [DONE]``.
* ``POST /v1/chat/completions`` (vLLM with ``return_token_ids``): it renders the chat template itself,
  answers ``prompt_token_ids`` at the root, ``choices[0].token_ids``, logprobs in
  ``choices[0].logprobs.content[]``, the message parsed by the Qwen3 reasoning and tool parsers;
  streamed, the prompt ids come in the first chunk and token ids as per-chunk deltas.
* ``GET /v1/models``, ``GET /health``.

A *script* maps the conversation of a request — the messages for chat, the decoded prompt text for
generate — to the raw model output text (Qwen3 markers: ``<think>``, ``<tool_call>``); the stand-in
tokenizes it with the real tokenizer, appends ``<|im_end|>``, cuts at ``max_new_tokens`` /
``max_tokens`` (finish reason length), and gives each token a deterministic logprob.  Every answer
is kept in ``ledger`` (under a lock): the api, the body, the prompt ids received, the output ids and
logprobs generated.  ``fail_next`` makes the next request(s) answer 5xx, hang, drop the
connection, answer late, or drip the answer a byte at a time; ``tamper_next`` rewrites the next
answer's JSON (ids or logprobs no real server would send: the gateway's checks are tested with them);
``delay`` slows every generation request.  Listens on 127.0.0.1
only, on a free port (or ``port``), in a background thread.
"""

from __future__ import annotations

import contextlib
import functools
import json
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tito_cli.families import family_named
from tito_cli.tokenizer import load

from .helpers import REPO
from .vllm_wire import ChatAnswer, assistant_message

__all__ = ["QWEN3", "Fault", "StandIn", "qwen3_output"]

QWEN3 = REPO / "fixtures" / "tokenizers" / "qwen3"

#: The request's conversation (messages for chat, the decoded prompt text for generate) -> raw output text.
Script = Callable[[Any], str]


def qwen3_output(content: str = "", reasoning: str | None = None, calls: Sequence[tuple[str, Any]] = ()) -> str:
    """The raw text Qwen3 writes for a reply: reasoning block, content, then one block per tool call."""
    text = f"<think>\n{reasoning}\n</think>\n\n" if reasoning is not None else ""
    text += content
    for name, arguments in calls:
        block = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        text += ("\n" if text and not text.endswith("\n") else "") + f"<tool_call>\n{block}\n</tool_call>"
    return text


@dataclass
class Fault:
    """One injected fault: ``status`` (answer ``code``), ``hang`` (silent ``seconds``, then drop), ``close``
    (drop at once), ``slow`` (answer normally after ``seconds``), ``drip`` (the answer's headers at once, then
    its body one byte every ``seconds``)."""

    kind: str
    code: int = 503
    seconds: float = 30.0


@functools.lru_cache(maxsize=8)
def _tokenizer(folder: Path) -> Any:
    """The tokenizer in ``folder``, loaded once per test process (each load of Qwen3's takes about a second;
    a stand-in only encodes and decodes with it)."""
    return load(folder)


class StandIn:
    """The stand-in server (a context manager); ``url`` is its base URL once entered."""

    def __init__(
        self,
        script: Script,
        tokenizer: str | Path = QWEN3,
        *,
        model: str = "qwen3-standin",
        port: int = 0,
        family: str = "qwen3",
    ) -> None:
        self.script = script
        self.model = model
        self.tokenizer = _tokenizer(Path(tokenizer).resolve())
        self._backend = self.tokenizer.backend_tokenizer
        #: The model family whose outputs the script writes: its end marker ends an output that has none.
        self.profile = family_named(family)
        self.end = self._backend.token_to_id(self.profile.end_of_turn[0])
        self.ledger: list[dict[str, Any]] = []
        #: Seconds every generation request waits before it is answered.
        self.delay = 0.0
        self.faults_served: list[str] = []
        #: The client port of each POST, in arrival order: which requests shared a connection.
        self.peers: list[int] = []
        self._faults: deque[Fault] = deque()
        self._tampers: deque[Callable[[dict[str, Any]], Any]] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="standin")

    def __enter__(self) -> StandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)

    # -- faults ------------------------------------------------------------------------------

    def fail_next(self, kind: str = "status", *, count: int = 1, code: int = 503, seconds: float = 30.0) -> None:
        """The next ``count`` generation requests fail: ``status`` (answer ``code``), ``hang``, ``close``, ``slow``."""
        if kind not in ("status", "hang", "close", "slow", "drip"):
            raise ValueError(f"unknown fault {kind!r}")
        with self._lock:
            self._faults.extend(Fault(kind, code, seconds) for _ in range(count))

    def tamper_next(self, rewrite: Callable[[dict[str, Any]], Any], *, count: int = 1) -> None:
        """``rewrite(answer)`` changes the next ``count`` non-streamed generation answers in place before they are
        sent: what a broken or hostile server would answer."""
        with self._lock:
            self._tampers.extend(rewrite for _ in range(count))

    def _tampered(self, answer: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            rewrite = self._tampers.popleft() if self._tampers else None
        if rewrite is not None:
            rewrite(answer)
        return answer

    def _take_fault(self) -> Fault | None:
        with self._lock:
            fault = self._faults.popleft() if self._faults else None
            if fault is not None:
                self.faults_served.append(fault.kind)
            return fault

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
            other = entry["prompt_ids"]
            n = 0
            for a, b in zip(prompt, other, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return best

    def _log(self, entry: dict[str, Any]) -> None:
        with self._lock:
            entry["cached_tokens"] = self._cached(entry["prompt_ids"])
            self.ledger.append(entry)

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
        text = self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        prompt = self.encode(text)
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        output, cut = self._output(self.script(messages), limit)
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

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes: without this, Nagle's algorithm and the
            # client's delayed ACK hold every answer ~40 ms.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                if self.path in ("/health", "/health_generate"):
                    self._send(200, {})
                elif self.path == "/v1/models":
                    model = {"id": standin.model, "object": "model", "created": 0, "owned_by": "standin"}
                    self._send(200, {"object": "list", "data": [model]})
                else:
                    self._send(404, {"object": "error", "message": "Not Found", "type": "NotFoundError", "code": 404})

            def do_POST(self) -> None:
                with standin._lock:
                    standin.peers.append(self.client_address[1])
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                if self.path not in ("/generate", "/v1/chat/completions"):
                    self._send(404, {"object": "error", "message": "Not Found", "type": "NotFoundError", "code": 404})
                    return
                fault = standin._take_fault()
                self._drip = fault.seconds if fault is not None and fault.kind == "drip" else None
                if fault is not None and fault.kind == "slow":
                    standin._closing.wait(fault.seconds)
                elif fault is not None and fault.kind != "drip":
                    self._fail(fault)
                    return
                if standin.delay:
                    standin._closing.wait(standin.delay)
                if self.path == "/generate":
                    answer, _ = standin.generate(body)
                    if body.get("stream"):
                        skip = (body.get("sampling_params") or {}).get("skip_special_tokens", True)
                        self._stream(standin.generate_chunks(answer, skip))
                    else:
                        self._send(200, standin._tampered(answer))
                else:
                    chat, _ = standin.chat(body)
                    if body.get("stream"):
                        self._stream(chat.chunks(standin.decode))
                    else:
                        self._send(200, standin._tampered(chat.response()))

            def _fail(self, fault: Fault) -> None:
                if fault.kind == "status":
                    error = {
                        "object": "error",
                        "message": "stand-in fault",
                        "type": "ServiceUnavailable",
                        "code": fault.code,
                    }
                    self._send(fault.code, error)
                    return
                if fault.kind == "hang":
                    standin._closing.wait(fault.seconds)
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)

            def _stream(self, chunks: list[dict[str, Any]]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                drip, self._drip = getattr(self, "_drip", None), None
                if drip is None:
                    self.wfile.write(data)
                    return
                for i in range(len(data)):  # bounded: one byte each interval until the body is out or we close
                    if standin._closing.wait(drip):
                        return
                    try:
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                    except OSError:
                        return

        return Handler


def main(argv: list[str] | None = None) -> None:
    """``python -m tests.serve_standin --port N``: the stand-in on its own, answering one fixed reply.

    For docs/serve.md's walk-through (no GPU there); it exits by itself after ``--exit-after`` seconds.
    """
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--reply", default="Hello from the stand-in.")
    parser.add_argument("--reasoning", default="The user greets me.")
    parser.add_argument("--exit-after", type=float, default=300.0)
    args = parser.parse_args(argv)
    text = qwen3_output(args.reply, args.reasoning)
    with StandIn(lambda conversation: text, port=args.port) as standin:
        standin._closing.wait(args.exit_after)


if __name__ == "__main__":
    main()
