"""A stand-in for a vLLM server: ``/v1/chat/completions`` answered in vLLM's documented shape.

It renders the prompt with the fixture tokenizer's chat template (the ids a
real server would see), answers with a scripted reply, and returns what vLLM
returns when asked for ``return_token_ids`` and ``logprobs``:
``prompt_token_ids`` at the response root, ``choices[0].token_ids``, logprobs
in ``choices[0].logprobs.content[]``; streamed, the prompt ids on the first
chunk and the token ids as per-chunk deltas.  Every answer is also kept in
``calls`` (what the model saw and generated), for tests to derive the
expected samples from.  Only what cannot run here (a GPU server) is stood in
for; it listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from transformers import AutoTokenizer

from tito_cli.serve.demo.wire import ChatAnswer, assistant_message

from .helpers import REPO

__all__ = ["Upstream"]

#: (request messages, tools) -> the assistant message to produce (content and optional tool_calls).
Script = Callable[[list[dict[str, Any]], Any], dict[str, Any]]
#: (the call's number from 1, its output token count) -> the ``metadata`` a non-streamed answer carries
#: (SGLang's and vLLM's OpenAI-compatible routes report ``weight_version``/``weight_versions`` there), or None.
Versions = Callable[[int, int], dict[str, Any] | None]


class Upstream:
    def __init__(self, script: Script, versions: Versions | None = None) -> None:
        self.tokenizer = AutoTokenizer.from_pretrained(str(REPO / "fixtures" / "tokenizer"))
        self.script = script
        self.versions = versions
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                self._send(200, {"status": "ok"} if self.path == "/health" else {"object": "list", "data": []})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": "not found"})
                    return
                answer = upstream.answer(body)
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for chunk in answer:
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                    self.close_connection = True
                else:
                    self._send(200, answer)

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Upstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)

    # -- the model ---------------------------------------------------------

    def _logprob(self, position: int, token: int) -> float:
        # Deterministic, distinct, float32-exact values (what a sampler would report).
        return -float(((token * 7 + position * 13) % 97) + 1) / 64.0

    def answer(self, body: dict[str, Any]) -> Any:
        messages, tools = body["messages"], body.get("tools")
        prompt = list(
            self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)[
                "input_ids"
            ]
        )
        reply = self.script(messages, tools)
        text = reply.get("content") or ""
        for call in reply.get("tool_calls") or []:
            f = call["function"]
            text += (
                "\n" if text else ""
            ) + f'<tool_call>\n{{"name": "{f["name"]}", "arguments": {f["arguments"]}}}\n</tool_call>'
        output = [
            *self.tokenizer.encode(text, add_special_tokens=False),
            self.tokenizer.convert_tokens_to_ids("<|im_end|>"),
        ]
        logprobs = [self._logprob(i, t) for i, t in enumerate(output)]
        assert all(math.isfinite(x) for x in logprobs)
        finish = "tool_calls" if reply.get("tool_calls") else "stop"
        message = assistant_message(reply.get("content"), reply.get("tool_calls") or [], None)
        with self._lock:
            self.calls.append(
                {
                    "messages": messages,
                    "tools": tools,
                    "prompt_ids": prompt,
                    "output_ids": output,
                    "logprobs": logprobs,
                    "finish_reason": finish,
                    "message": message,
                    "stream": bool(body.get("stream")),
                }
            )
            calls = len(self.calls)
        stream = bool(body.get("stream"))
        answer = ChatAnswer(
            id="chatcmpl-stream" if stream else f"chatcmpl-{calls}",
            created=1780000000,
            model=body.get("model") if stream else body.get("model", "fixture"),
            prompt=prompt,
            output=output,
            tokens=self.tokenizer.convert_ids_to_tokens(output),
            logprobs=logprobs,
            message=message,
            finish=finish,
            want_ids=bool(body.get("return_token_ids")),
            want_logprobs=bool(body.get("logprobs")),
        )
        if stream:
            return answer.chunks(self.tokenizer.decode)
        response = answer.response()
        metadata = self.versions(calls, len(output)) if self.versions is not None else None
        if metadata is not None:
            response["metadata"] = metadata
        return response
