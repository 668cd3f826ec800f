"""The demo upstream's HTTP side: its routes, JSON answers and SSE streams (the model is :mod:`.server`'s)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .server import DemoUpstream

__all__ = ["handler_for"]


def handler_for(upstream: DemoUpstream) -> type[BaseHTTPRequestHandler]:
    """The request handler class of ``upstream``'s server (one per server: it answers through ``upstream``)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes: without this, Nagle's algorithm and the
        # client's delayed ACK hold every answer ~40 ms.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def error(self, status: int, message: str, kind: str) -> None:
            self.send_json(status, {"object": "error", "message": message, "type": kind, "code": status})

        def do_GET(self) -> None:
            if self.path in ("/health", "/health_generate"):
                self.send_json(200, {})
            elif self.path == "/v1/models":
                model = {"id": upstream.model, "object": "model", "created": 0, "owned_by": "tito-demo"}
                self.send_json(200, {"object": "list", "data": [model]})
            else:
                self.error(404, "Not Found", "NotFoundError")

        def do_POST(self) -> None:
            with upstream._lock:
                upstream.peers.append(self.client_address[1])
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            except ValueError:
                self.error(400, "invalid JSON", "BadRequestError")
                return
            if self.path not in ("/generate", "/v1/chat/completions"):
                self.error(404, "Not Found", "NotFoundError")
                return
            if not upstream.before_generation(self):
                return
            if self.path == "/generate":
                answer, _ = upstream.generate(body)
                if body.get("stream"):
                    skip = (body.get("sampling_params") or {}).get("skip_special_tokens", True)
                    self.send_stream(upstream.generate_chunks(answer, skip))
                else:
                    self.send_json(200, upstream.outgoing(answer))
            else:
                chat, entry = upstream.chat(body)
                if body.get("stream"):
                    self.send_stream(chat.chunks(upstream.decode))
                else:
                    response = chat.response()
                    if upstream.provenance(entry):
                        response["metadata"] = upstream.provenance(entry)
                    self.send_json(200, upstream.outgoing(response))

        def send_stream(self, chunks: list[dict[str, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for chunk in chunks:
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

        def send_json(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            upstream.write_body(self, data)

    return Handler
