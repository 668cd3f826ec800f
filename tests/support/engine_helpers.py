"""Tiny builders for engine unit tests: messages and turns with synthetic ids."""

from __future__ import annotations

from typing import Any

import numpy as np

from tito_cli.turns import Turn


def msg(role: str, content: str, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **extra}


def turn(
    seq: int,
    messages: list[dict[str, Any]],
    prompt: list[int],
    output: list[int],
    response: dict[str, Any] | str | None = "auto",
    logprobs: list[float] | None = None,
) -> Turn:
    if response == "auto":
        response = msg("assistant", f"r{seq}")
    return Turn(
        seq=seq,
        prompt_ids=np.asarray(prompt, dtype=np.int32),
        output_ids=np.asarray(output, dtype=np.int32),
        output_logprobs=None if logprobs is None else np.asarray(logprobs, dtype=np.float32),
        finish_reason="stop",
        prompt_messages=messages,
        response_message=response,  # type: ignore[arg-type]
    )
