"""OpenAI Responses' SSE stream: the events that carry one whole response object, in the order Codex reads."""

from __future__ import annotations

from typing import Any

from .base import sse

__all__ = ["response_events"]


def response_events(final: dict[str, Any]) -> list[bytes]:
    """``response.created`` … ``response.completed`` (or ``.incomplete``) for ``final``, one delta per item."""
    start = {**final, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    out: list[bytes] = []
    number = 0

    def emit(kind: str, data: dict[str, Any]) -> None:
        nonlocal number
        out.append(sse({"type": kind, "sequence_number": number, **data}, kind))
        number += 1

    emit("response.created", {"response": start})
    emit("response.in_progress", {"response": start})
    for index, item in enumerate(final["output"]):
        kind = item["type"]
        where = {"output_index": index, "item_id": item["id"]}
        if kind == "message":
            text = item["content"][0]["text"]
            emit(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "status": "in_progress", "content": []}},
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            emit("response.content_part.added", {**where, "content_index": 0, "part": part})
            emit("response.output_text.delta", {**where, "content_index": 0, "delta": text, "logprobs": []})
            emit("response.output_text.done", {**where, "content_index": 0, "text": text, "logprobs": []})
            emit("response.content_part.done", {**where, "content_index": 0, "part": {**part, "text": text}})
        elif kind == "function_call":
            emit(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "status": "in_progress", "arguments": ""}},
            )
            emit("response.function_call_arguments.delta", {**where, "delta": item["arguments"]})
            emit("response.function_call_arguments.done", {**where, "arguments": item["arguments"]})
        else:
            text = item["summary"][0]["text"]
            emit(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "summary": [], "content": []}},
            )
            part = {"type": "summary_text", "text": ""}
            emit("response.reasoning_summary_part.added", {**where, "summary_index": 0, "part": part})
            emit("response.reasoning_summary_text.delta", {**where, "summary_index": 0, "delta": text})
            emit("response.reasoning_summary_text.done", {**where, "summary_index": 0, "text": text})
            emit(
                "response.reasoning_summary_part.done",
                {**where, "summary_index": 0, "part": {**part, "text": text}},
            )
        emit("response.output_item.done", {"output_index": index, "item": item})
    emit("response.incomplete" if final["status"] == "incomplete" else "response.completed", {"response": final})
    return out
