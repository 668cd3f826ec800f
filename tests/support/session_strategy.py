"""The hypothesis strategy of the property tests: random sessions grown the way agent harnesses grow them
(docs/reliability.md, "Property tests"), with a toy chat template (a role token, one token per character)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

ROLE_TOKEN = {"system": 1, "user": 2, "assistant": 3, "tool": 4}


texts = st.text(alphabet="ab", max_size=2)


tokens = st.integers(0, 12)


logprob = st.integers(-2048, 0).map(lambda k: k / 256)  # exact in float32


#: Numbers that compare equal in Python but are different JSON text (SPEC §8.1), in groups;
#: a message may carry one, and a replay may write it as another of its group.  (No NaN: it
#: is not strict JSON, and the reader rejects a session holding one.)
EQUAL_NUMBERS: list[list[Any]] = [
    [1, 1.0, True],
    [0, 0.0, False, -0.0],
    [2**53, 2.0**53],
    [2**53 + 1],
    [0.5],
]


numbers = st.sampled_from([n for group in EQUAL_NUMBERS for n in group])


def same_value_variant(value: Any) -> list[Any]:
    """The numbers equal to ``value`` by value (its group), ``value`` first."""
    for group in EQUAL_NUMBERS:
        if any(type(n) is type(value) and n == value for n in group):
            return [value, *[n for n in group if n is not value]]
    return [value]


def render(message: dict[str, Any]) -> list[int]:
    """A toy chat template: role token, then one token per character."""
    return [ROLE_TOKEN[message["role"]]] + [5 + ord(c) % 4 for c in message["content"]]


@st.composite
def sessions(draw: st.DrawFn) -> dict[str, Any]:
    """One session's raw turn rows (SPEC §2 values, JSON as text), a policy and a reward."""
    # Each context is a conversation so far, as (message, token chunk) pairs, plus the
    # prompt that produced its last turn; new turns grow from any earlier context.
    contexts: list[tuple[list[tuple[dict[str, Any], list[int]]], int]] = []
    rows = []
    # Drawn first so that output lengths can sit right at it (off-by-one territory).
    threshold = draw(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 1024]))
    near = min(threshold, 13)
    sizes = st.sampled_from(sorted({0, 1, 2, 3, 4, 5, 6, max(0, near - 1), near, near + 1}))
    for seq in range(draw(st.integers(1, 14))):
        action = draw(
            st.sampled_from(
                ["new", "extend", "extend", "extend", "extend", "extend", "resend", "fork", "rewrite", "empty"]
            )
        )
        parts: list[tuple[dict[str, Any], list[int]]]
        if action == "empty":
            parts = []
        elif action == "new" or not contexts:
            system = {"role": "system", "content": draw(st.sampled_from(["S", "T"]))}
            user = {"role": "user", "content": draw(texts)}
            parts = [(system, render(system)), (user, render(user))]
        else:
            # Mostly the latest conversation (deep chains), sometimes any earlier one.
            context, prompt_len = contexts[-1] if draw(st.integers(0, 3)) else draw(st.sampled_from(contexts))
            if action == "extend":
                new = [
                    {"role": draw(st.sampled_from(["user", "tool"])), "content": draw(texts)}
                    for _ in range(draw(st.integers(1, 2)))
                ]
                if draw(st.integers(0, 2)) == 0:
                    new[-1]["n"] = draw(numbers)
                parts = context + [(m, render(m)) for m in new]
                last = len(context) - 1
                if context[last][1] and draw(st.integers(0, 2)) == 0:
                    # The template re-renders the latest response differently (drift inside
                    # the latest span: realigned when short, forked when not), or the token
                    # just before it (the boundary case: a fork).
                    message, chunk = context[last]
                    at = draw(st.integers(-1, len(chunk) - 1))
                    if at == -1 and last > 0 and context[last - 1][1]:
                        before, before_chunk = context[last - 1]
                        parts[last - 1] = (before, [*before_chunk[:-1], draw(tokens)])
                    else:
                        at = max(at, 0)
                        chunk = chunk[:at] + draw(st.lists(tokens, max_size=2)) + chunk[at + draw(st.integers(0, 2)) :]
                        parts[last] = (message, chunk)
                if draw(st.integers(0, 3)) == 0:
                    # A replay writes a number as another equal by value (1 as 1.0, 0 as false):
                    # the same message for slime-0.3, a different one for slime-v4.
                    at = draw(st.integers(0, len(parts) - 1))
                    message, chunk = parts[at]
                    if "n" in message:
                        message = {**message, "n": draw(st.sampled_from(same_value_variant(message["n"])))}
                        parts[at] = (message, chunk)
            elif action == "resend":
                parts = context[:prompt_len]
            elif action == "fork":
                cut = draw(st.integers(1, len(context)))
                message = {"role": draw(st.sampled_from(list(ROLE_TOKEN))), "content": draw(texts)}
                parts = [*context[:cut], (message, render(message))]
            else:  # rewrite: the harness replaces the latest assistant message, then continues
                rewritten = {"role": "assistant", "content": "r" + draw(texts)}
                chunk = render(rewritten) + draw(st.lists(tokens, max_size=draw(st.sampled_from([2, 12]))))
                user = {"role": "user", "content": draw(texts)}
                parts = [*context[:prompt_len], (rewritten, chunk), (user, render(user))]
        messages = [m for m, _ in parts]
        prompt_ids = [t for _, chunk in parts for t in chunk]
        # Re-tokenization drift: the prompt's ids differ from what was held, somewhere.
        for _ in range(draw(st.sampled_from([0, 0, 0, 0, 0, 1, 2]))):
            if not prompt_ids:
                break
            at = draw(st.integers(0, len(prompt_ids) - 1))
            how = draw(st.sampled_from(["replace", "insert", "delete"]))
            if how == "replace":
                prompt_ids[at] = draw(tokens)
            elif how == "insert":
                prompt_ids.insert(at, draw(tokens))
            else:
                del prompt_ids[at]
        size = draw(sizes)
        output = draw(st.lists(tokens, min_size=size, max_size=size))
        # Mostly distinct responses; sometimes one equal to a sibling's (routing takes the first).
        content = draw(texts) if draw(st.integers(0, 4)) == 0 else f"out{seq}"
        response: dict[str, Any] | None = {"role": "assistant", "content": content}
        if draw(st.integers(0, 9)) == 0:
            response = None
        elif draw(st.integers(0, 3)) == 0:
            # Truthy or not in Python terms (SPEC §8.6's use_tool).
            assert response is not None
            response["tool_calls"] = draw(st.sampled_from([[{"name": "bash"}], [], None, 0, "", {}, 1.0]))
        lp_kind = draw(st.sampled_from(["recorded", "recorded", "none", "empty"]))
        logprobs = {"none": None, "empty": [], "recorded": [draw(logprob) for _ in output]}[lp_kind]
        if not messages and draw(st.booleans()):
            # Skipped turns are not checked for a logprob count (the reference skips them first).
            logprobs = [draw(logprob)] * (len(output) + 1)
        rows.append(
            {
                "seq": seq,
                "prompt_ids": prompt_ids,
                "output_ids": output,
                "output_logprobs": logprobs,
                "prompt_messages": messages,
                "response_message": response,
                "finish_reason": draw(st.sampled_from(["stop", "stop", "length", "tool_calls"])),
                "ill_formed": draw(st.integers(0, 7)) == 0,
            }
        )
        if messages:
            chunk = [] if response is None else [(response, list(output))]
            contexts.append((parts + chunk, len(parts)))
    return {
        "rows": rows,
        "threshold": threshold,
        "reward_mode": draw(st.sampled_from(["split", "full"])),
        "max_sample_tokens": draw(st.sampled_from([None, None, 1, 4, 8, 12, 20])),
        # (Not st.floats: one_of and wide numeric draws make shrinking a failure very slow.)
        "reward": draw(st.sampled_from([0.0, 1.0, -1.0, 0.3, 1 / 3, 7.25, -123.456])),
    }
