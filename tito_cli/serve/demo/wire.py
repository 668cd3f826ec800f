"""vLLM's chat-completions answer with ``return_token_ids``, as the demo upstream puts it on the wire.

``prompt_token_ids`` at the root, ``choices[0].token_ids``, logprobs in ``choices[0].logprobs.content[]``
(vLLM's ``ChatCompletionResponse`` with ``return_token_ids``); streamed, the prompt ids on the first chunk
and one token id per chunk after it, the last chunk with an empty content delta and the finish reason.
The tests' rLLM-gateway stand-in (``tests/support/vllm_upstream.py``) answers in this shape too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ChatAnswer", "assistant_message"]


def assistant_message(content: str | None, tool_calls: list[dict[str, Any]], reasoning: str | None) -> dict[str, Any]:
    """The ``choices[0].message`` vLLM answers (every field it sets, the unused ones null)."""
    return {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": tool_calls,
        "reasoning_content": reasoning,
    }


@dataclass
class ChatAnswer:
    """One generated answer; ``tokens`` spell each output id as the server's logprobs name it."""

    id: str
    created: int
    model: Any
    prompt: list[int]
    output: list[int]
    tokens: Sequence[str]
    logprobs: Sequence[float]
    message: dict[str, Any]
    finish: str
    want_ids: bool  # the request's return_token_ids
    want_logprobs: bool  # the request's logprobs

    def _content(self) -> list[dict[str, Any]]:
        return [
            {"token": token, "logprob": lp, "bytes": None, "top_logprobs": []}
            for token, lp in zip(self.tokens, self.logprobs, strict=True)
        ]

    def response(self) -> dict[str, Any]:
        """The non-streamed answer."""
        choice: dict[str, Any] = {
            "index": 0,
            "message": self.message,
            "logprobs": {"content": self._content()} if self.want_logprobs else None,
            "finish_reason": self.finish,
            "stop_reason": None,
        }
        response: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(self.prompt),
                "completion_tokens": len(self.output),
                "total_tokens": len(self.prompt) + len(self.output),
            },
            "prompt_logprobs": None,
        }
        if self.want_ids:
            response["prompt_token_ids"] = self.prompt
            choice["token_ids"] = self.output
        return response

    def chunks(self, decode: Callable[[list[int]], str]) -> list[dict[str, Any]]:
        """The streamed answer: a role chunk (with the prompt ids), then one chunk per output token."""
        base = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model}
        first: dict[str, Any] = {
            **base,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            ],
        }
        if self.want_ids:
            first["prompt_token_ids"] = self.prompt
        chunks = [first]
        content = self._content()
        for i, token in enumerate(self.output):
            last = i == len(self.output) - 1
            choice: dict[str, Any] = {
                "index": 0,
                "delta": {"content": "" if last else decode([token])},
                "logprobs": {"content": [content[i]]} if self.want_logprobs else None,
                "finish_reason": self.finish if last else None,
            }
            if self.want_ids:
                choice["token_ids"] = [token]
            chunks.append({**base, "choices": [choice]})
        return chunks
