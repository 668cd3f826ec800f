"""Playing one session: the harness between the agents, the model and the turn log.

The harness keeps one conversation per agent (the main agent and any
sub-agents), renders each prompt with the chat template, asks the model for
a reply, records the turn through the capture writer, stores the reply the
way the client does (possibly re-rendered) and runs the tool calls.  It also
does what harnesses do to conversations: resend a prompt after an abort or
an empty reply, rewind to an earlier prompt, compact a long conversation
into a summary, and ask the model to continue after a reply was cut off.

It also records why a later prompt of a conversation no longer extends the
tokens an earlier turn held, where it knows (:meth:`SessionStats.causes`): an
output was re-tokenized (a non-canonical split, a cut reply), the client or
server re-rendered a reply (whitespace stripped, tool-call arguments
re-serialized), the template dropped reasoning it had rendered or writes
tool calls its own way.  The names are the drift classes'
(:data:`tito_cli.families.DRIFT_CHANGES`), so a test can hold the classifier
to them.
"""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..capture.writer import TurnLogWriter
from ..families import REASONING_DROPPED, RETOKENIZED, TOOL_ARGS_RERENDERED, WHITESPACE_TRIMMED
from .agent import MainAgent, Plan, Style, SubAgent
from .chat import Chat, Message
from .environment import MAIN_TOOLS, SUB_TOOLS, Workspace, tool_specs
from .model import LONG_OUTPUT, Action, Generation, Model
from .profiles import Features, Profile

__all__ = ["SessionStats", "TurnChanges", "play_session"]

MAIN_SYSTEM = (
    "You are a coding agent working in a Python repository. Use the tools to inspect files, run commands "
    "and edit code. Say briefly what you are doing before each step. When the task is done, reply with a "
    "short summary of your changes."
)
SUB_SYSTEM = (
    "You are a research sub-agent. You answer one question about a repository using read-only tools, and "
    "finish with a concise report. Never modify files."
)
COMPACT_REQUEST = (
    "The conversation is about to exceed the context window. Summarize it: the task, what you found, what "
    "you changed and what is left to do. Your summary will replace the conversation."
)
CONTINUATION = (
    "This session continues an earlier conversation that ran out of context. Summary of the earlier "
    "conversation:\n\n{summary}\n\nContinue with the task from where it stopped."
)
#: Chance, per merged output token, that the model spells it as its two parts (sessions with ``noncanonical``).
NONCANONICAL_RATE = 1 / 400
FOLLOWUP = "Thanks. Before we close: in one sentence, what was the root cause?"
#: Chance, per tool call, that a ``loose_json`` session's model writes its arguments without spaces.
LOOSE_JSON_RATE = 0.5
CUT_OFF = "Your last reply was cut off because it exceeded the output token limit. Continue with a smaller step."


@dataclass(slots=True)
class SessionStats:
    """What one simulated session contains (the simulator's own count, not tito's)."""

    session_id: str
    turns: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    max_prompt_tokens: int = 0
    reward: float | None = None
    events: Counter[str] = field(default_factory=Counter)
    #: Turn ``seq`` -> what the simulator knows of it, to say why a later prompt differs (:meth:`causes`).
    changes: dict[int, TurnChanges] = field(default_factory=dict)

    def causes(self, held: int, seq: int) -> frozenset[str] | None:
        """Why turn ``seq``'s prompt no longer extends what turn ``held`` held (prompt and output), if known.

        Drift class names: what replaying the conversation's outputs from ``held`` on changed in them,
        reasoning the template rendered in ``held``'s tokens but not in ``seq``'s prompt, tool calls the
        template writes its own way.  ``None`` when the two turns are not one conversation the simulator
        followed (another agent, across a rewind or a compaction, a compaction request).
        """
        a, b = self.changes.get(held), self.changes.get(seq)
        if a is None or b is None or (a.thread, a.epoch) != (b.thread, b.epoch) or held >= seq:
            return None
        between = [c for k, c in self.changes.items() if held <= k < seq and (c.thread, c.epoch) == (a.thread, a.epoch)]
        found: set[str] = set().union(*(c.output for c in between))
        if a.in_held - b.in_prompt:
            found.add(REASONING_DROPPED)
        if any(c.calls_rerendered for c in between):
            found.add(TOOL_ARGS_RERENDERED)
        return frozenset(found)


@dataclass(slots=True)
class TurnChanges:
    """One recorded turn, as :meth:`SessionStats.causes` needs it."""

    thread: str
    #: Starts at 0; a rewind or a compaction starts a new one (prompts across it are not compared).
    epoch: int
    #: What replaying this turn's output changes in it (empty for an output that never entered the conversation).
    output: set[str] = field(default_factory=set)
    #: Which of the conversation's reasoning texts the prompt holds, and the prompt and output together.
    in_prompt: frozenset[int] = frozenset()
    in_held: frozenset[int] = frozenset()
    #: The output's tool calls are written back by the template in another form (harmony).
    calls_rerendered: bool = False


@dataclass(eq=False, slots=True)
class _Thread:
    """One conversation the harness keeps."""

    name: str
    messages: list[Message]
    tools: list[dict[str, Any]]
    plan: Plan
    agent: MainAgent | SubAgent
    #: Finish reason of the previous reply, sent to the plan with the next request.
    feedback: str | None = None
    done: bool = False
    report: str = ""
    #: Every prompt sent, for rewinds.
    prompts: list[list[Message]] = field(default_factory=list)
    turns: int = 0
    #: The reasoning blocks this conversation's replies wrote; the epoch (a rewind or compaction adds one).
    reasoning: list[str] = field(default_factory=list)
    epoch: int = 0
    #: The record of the last turn answered.
    last: TurnChanges | None = None


class _Session:
    def __init__(
        self,
        chat: Chat,
        writer: TurnLogWriter,
        *,
        session_id: str,
        index: int,
        profile: Profile,
        features: Features,
        workspace: Workspace,
        rng: random.Random,
        start: datetime,
    ) -> None:
        self.chat = chat
        self.writer = writer
        self.sid = session_id
        self.index = index
        self.profile = profile
        self.features = features
        self.ws = workspace
        self.rng = rng
        self.model = Model(chat, rng)
        self.clock = start
        self.stats = SessionStats(session_id)
        self.subs: dict[str, _Thread] = {}
        self.style = Style(
            reasoning=0.5 if "reasoning" in features else 0.0,
            trailing_newline=0.5 if features.rewrite == "strip" else 0.0,
            parallel=profile.parallel,
            long_write="long_write" in features,
            wrong_fix="wrong_fix" in features,
            give_up="give_up" in features,
            subagent="subagent" in features and bool(workspace.bugs),
            extra_reads=profile.extra_reads,
        )
        self.max_tokens = profile.max_tokens
        if "truncation" in features:
            self.max_tokens = rng.randint(*profile.truncating_max_tokens)
        # The main-agent turn that gets the retry, and whether the session compacted yet.
        self.retry_turn = rng.randint(2, 4)
        self.compacted = False
        n = len(workspace.bugs)
        self.task = (
            f"The test suite of `{workspace.project}` is failing. Find the cause{'s' if n > 1 else ''} and fix "
            f"{'them' if n > 1 else 'it'}; run `python -m pytest -q` to check your work. Keep the changes minimal."
        )

    # -- the session -----------------------------------------------------------

    def play(self) -> SessionStats:
        agent = MainAgent(self.ws, self.rng, self.style)
        main = _Thread(
            "main",
            [{"role": "system", "content": MAIN_SYSTEM}, {"role": "user", "content": self.task}],
            tool_specs(MAIN_TOOLS),
            agent.plan(),
            agent,
        )
        while not main.done:
            running = [t for t in self.subs.values() if not t.done]
            if running and self.rng.random() < 0.5:
                self._step(self.rng.choice(running))
            else:
                self._step(main)
        if "followup" in self.features and not self.ws.open_bugs():
            self._followup(main)
        reward = 0.0 if self.ws.open_bugs() else 1.0
        if "unfinished" in self.features:
            self.stats.events["unfinished"] += 1
        else:
            self.stats.reward = reward
            fixed = len(self.ws.bugs) - len(self.ws.open_bugs())
            self.writer.finish_session(
                self.sid,
                reward,
                index=self.index,
                group_index=self.index // self.profile.group_size,
                label=self.ws.project,
                metadata={
                    "profile": self.profile.name,
                    "features": self.features.sorted(),
                    "bugs": len(self.ws.bugs),
                    "fixed": fixed,
                },
            )
        return self.stats

    def _step(self, thread: _Thread) -> None:
        """One reply of ``thread``'s agent, with whatever the harness does around it."""
        try:
            action = thread.plan.send(thread.feedback)
        except StopIteration:
            thread.done = True
            return
        thread.feedback = None
        if thread.name == "main":
            self._maybe_compact(thread)
        retry = self.features.retry if thread.name == "main" and thread.turns == self.retry_turn else None
        if retry in ("abort", "empty"):
            # The failed call is recorded; the harness resends the very same prompt.
            self._generate(thread, action, abort=retry == "abort", empty=retry == "empty", event=retry)
            self.stats.events[retry] += 1
        generation, response = self._generate(thread, action)
        thread.turns += 1
        stored = self._store(response, generation)
        self._note_rewrite(thread, response, stored)
        thread.messages.append(stored)
        if generation.finish_reason == "length":
            self.stats.events["truncation"] += 1
            thread.messages.append({"role": "user", "content": CUT_OFF})
            thread.feedback = "length"
            return
        calls = stored.get("tool_calls") or []
        if not calls:
            thread.done = True
            thread.report = str(stored.get("content") or "")
            return
        if len(calls) > 1:
            self.stats.events["parallel_tool_calls"] += 1
        for call in calls:
            result = self._run_tool(call)
            thread.messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        if retry == "rewind" and len(thread.prompts) >= 2 and thread.prompts[-2][:2] == thread.messages[:2]:
            # The user rewinds one step: the previous prompt is sent again.
            thread.messages = copy.deepcopy(thread.prompts[-2])
            thread.epoch += 1
            self.stats.events["rewind"] += 1

    # -- model calls -------------------------------------------------------------

    def _generate(
        self,
        thread: _Thread,
        action: Action,
        *,
        messages: list[Message] | None = None,
        tools: list[dict[str, Any]] | bool | None = True,
        abort: bool = False,
        empty: bool = False,
        event: str | None = None,
    ) -> tuple[Generation, Message | None]:
        """Render, generate, parse and record one turn."""
        prompt_messages = thread.messages if messages is None else messages
        prompt_tools = thread.tools if tools is True else (tools or None)
        prompt_text = self.chat.render(
            prompt_messages, prompt_tools, thinking="reasoning" in self.features, now=self.clock
        )
        prompt_ids = self.chat.encode_prompt(prompt_text)
        rate = NONCANONICAL_RATE if "noncanonical" in self.features else 0.0
        loose = LOOSE_JSON_RATE if "loose_json" in self.features else 0.0
        generation = self.model.generate(
            action,
            max_tokens=self.max_tokens,
            noncanonical=rate,
            abort=abort,
            empty=empty,
            loose_json=loose,
            prompt=prompt_text,
        )
        response: Message | None = None
        if generation.finish_reason != "abort":
            response = self.chat.parse(generation.text, self._call_id)
        if generation.noncanonical_at is not None:
            self.stats.events["noncanonical"] += 1
            if len(generation.ids) - generation.noncanonical_at >= LONG_OUTPUT:
                self.stats.events["noncanonical_long"] += 1
        if generation.loose_calls and generation.finish_reason != "abort":
            self.stats.events["loose_json"] += 1
        if action.reasoning and generation.finish_reason != "abort":
            self.stats.events["reasoning"] += 1
        metadata: dict[str, Any] = {"agent": thread.name}
        if event:
            metadata["event"] = event
        self.clock += timedelta(seconds=0.3 + 0.015 * len(generation.ids) + 0.00002 * len(prompt_ids))
        seq = self.writer.record_turn(
            self.sid,
            prompt_ids,
            generation.ids,
            generation.logprobs,
            generation.finish_reason,
            prompt_messages,
            response,
            tools=prompt_tools,
            metadata=metadata,
            timestamp=self.clock,
        )
        if messages is None:
            thread.prompts.append(copy.deepcopy(prompt_messages))
            self._note_turn(thread, seq, prompt_text, generation, action, response)
        self.stats.turns += 1
        self.stats.prompt_tokens += len(prompt_ids)
        self.stats.output_tokens += len(generation.ids)
        self.stats.max_prompt_tokens = max(self.stats.max_prompt_tokens, len(prompt_ids))
        return generation, response

    # -- why the history changed (SessionStats.causes) ---------------------------------------------

    def _note_turn(
        self, thread: _Thread, seq: int, prompt: str, generation: Generation, action: Action, response: Message | None
    ) -> None:
        """What turn ``seq`` of ``thread`` holds, and what replaying its output will change in it."""
        in_prompt = frozenset(i for i, r in enumerate(thread.reasoning) if r in prompt)
        record = TurnChanges(thread.name, thread.epoch, in_prompt=in_prompt, in_held=in_prompt)
        self.stats.changes[seq] = record
        if generation.finish_reason == "abort" or not generation.ids.size:
            return  # resent: this output never enters the conversation
        if generation.noncanonical_at is not None or generation.finish_reason == "length":
            record.output.add(RETOKENIZED)
        if generation.loose_calls:
            record.output.add(TOOL_ARGS_RERENDERED)
        reasoning = response.get("reasoning_content") if response is not None else None
        if isinstance(reasoning, str):
            # The block as the model wrote it (a family whose prompt opens it: across prompt and output).
            block = self.chat.family.reasoning_block(reasoning)
            if block in prompt + generation.text:
                thread.reasoning.append(block)
                record.in_held = in_prompt | {len(thread.reasoning) - 1}
        if self.chat.family.trims_content and response is not None:
            shown = self.chat.family.server_messages([response])[0].get("content")
            if isinstance(shown, str) and shown != shown.strip():
                record.output.add(WHITESPACE_TRIMMED)
        complete = generation.finish_reason != "length"
        record.calls_rerendered = bool(action.calls) and complete and self.chat.family.rerenders_tool_calls
        thread.last = record

    def _note_rewrite(self, thread: _Thread, response: Message | None, stored: Message) -> None:
        """The client's re-rendering of the reply it keeps (``rewrite``)."""
        record = thread.last
        if record is None or response is None or stored == response:
            return
        if stored.get("content") != response.get("content"):
            record.output.add(WHITESPACE_TRIMMED)
        if stored.get("tool_calls") != response.get("tool_calls"):
            record.output.add(TOOL_ARGS_RERENDERED)

    def _call_id(self) -> str:
        return f"call_{self.rng.getrandbits(48):012x}"

    def _store(self, response: Message | None, generation: Generation) -> Message:
        """The assistant message as the client keeps it, re-rendered if the client does that."""
        assert response is not None
        stored = copy.deepcopy(response)
        if self.features.rewrite == "strip" and isinstance(stored.get("content"), str):
            stored["content"] = stored["content"].strip()
        elif self.features.rewrite == "sort_keys":
            for call in stored.get("tool_calls") or []:
                arguments = json.loads(call["function"]["arguments"])
                call["function"]["arguments"] = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
        if stored != response:
            long = len(generation.ids) >= LONG_OUTPUT
            self.stats.events["rewrite_long" if long else "rewrite_short"] += 1
        return stored

    # -- harness behaviours --------------------------------------------------------

    def _followup(self, thread: _Thread) -> None:
        """The user asks one more question: a new query, after which the template drops earlier reasoning."""
        assert isinstance(thread.agent, MainAgent)
        thread.messages.append({"role": "user", "content": FOLLOWUP})
        generation, response = self._generate(thread, thread.agent.answer_followup(), event="followup")
        thread.messages.append(self._store(response, generation))
        self.stats.events["followup"] += 1

    def _maybe_compact(self, thread: _Thread) -> None:
        if self.compacted or "compaction" not in self.features:
            return
        thinking = "reasoning" in self.features
        rendered = self.chat.render(thread.messages, thread.tools, thinking=thinking, now=self.clock)
        size = len(self.chat.encode_prompt(rendered))
        if size <= self.profile.compact_at or thread.messages[-1]["role"] != "tool":
            return
        assert isinstance(thread.agent, MainAgent)
        request = [*thread.messages, {"role": "user", "content": COMPACT_REQUEST}]
        # Summaries are requested without tools: the system turn renders differently.
        summary = Action(content=thread.agent.summary(self.task))
        _, response = self._generate(thread, summary, messages=request, tools=None, event="compaction")
        assert response is not None
        text = str(response.get("content") or summary.content)
        thread.messages = [
            thread.messages[0],
            {"role": "user", "content": CONTINUATION.format(summary=text)},
        ]
        thread.epoch += 1
        self.compacted = True
        self.stats.events["compaction"] += 1

    def _run_tool(self, call: Message) -> str:
        name = call["function"]["name"]
        try:
            arguments = json.loads(call["function"]["arguments"])
        except ValueError:
            return "Error: the arguments are not valid JSON."
        self.clock += timedelta(seconds=self.rng.uniform(0.05, 2.0))
        if name == "task":
            return self._start_subagent(str(arguments.get("prompt", "")))
        if name == "agent_output":
            sub = self.subs.get(str(arguments.get("agent_id")))
            if sub is None:
                return "Error: no such agent."
            while not sub.done:
                self._step(sub)
            return sub.report
        return self.ws.call(name, arguments, self.rng)

    def _start_subagent(self, prompt: str) -> str:
        bug = next((b for b in self.ws.bugs if b.function in prompt), self.ws.bugs[0])
        name = f"agent-{len(self.subs) + 1}"
        agent = SubAgent(self.ws, self.rng, self.style, bug)
        self.subs[name] = _Thread(
            name,
            [{"role": "system", "content": SUB_SYSTEM}, {"role": "user", "content": prompt}],
            tool_specs(SUB_TOOLS),
            agent.plan(),
            agent,
        )
        self.stats.events["subagent"] += 1
        return f"Started sub-agent {name} in the background. Read its report with agent_output."


def play_session(
    chat: Chat,
    writer: TurnLogWriter,
    *,
    session_id: str,
    index: int,
    profile: Profile,
    features: Features,
    workspace: Workspace,
    rng: random.Random,
    start: datetime,
) -> SessionStats:
    """Simulate one session into ``writer``; returns what it contains."""
    session = _Session(
        chat,
        writer,
        session_id=session_id,
        index=index,
        profile=profile,
        features=features,
        workspace=workspace,
        rng=rng,
        start=start,
    )
    return session.play()
