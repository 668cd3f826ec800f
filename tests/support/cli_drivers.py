"""Run the real agent CLIs (Claude Code, Codex) against a base URL, offline, as docs/notes/cli-wire.md describes.

Each driver makes a temporary HOME (and ``CODEX_HOME``) and a temporary working directory holding the given
files, gives the CLI a clean environment (no key or proxy from the caller's), passes the session id where an API
key would go, runs one task with a timeout (the whole process group is killed when it expires) and returns what
the CLI printed. The binaries come from ``npm ci --prefix tests/npm``; without them a test skips, or fails when
the ``CI`` environment variable is set.

Both CLIs retry failed requests on their own (Claude Code with exponential backoff for minutes, Codex up to 5
stream × 4 request retries): the drivers turn retries off, so a failure shows at once and every request a CLI
sends is one generation, never a repeat.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from .helpers import REPO

NPM_BIN = REPO / "tests" / "npm" / "node_modules" / ".bin"
INSTALL = "npm ci --prefix tests/npm"


@dataclass(frozen=True)
class CliRun:
    """One CLI process: its exit code (None when the timeout killed it), what it printed, and where it ran."""

    cli: str
    returncode: int | None
    stdout: str
    stderr: str
    workdir: Path

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def describe(self) -> str:
        """A failure message: exit status and the tail of both streams."""
        status = "timed out" if self.timed_out else f"exit {self.returncode}"
        return f"{self.cli} {status}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}"


def cli_binary(name: str) -> Path:
    """The installed CLI ``name`` (``claude`` or ``codex``); skips (fails under ``CI``) naming the install command."""
    path = NPM_BIN / name
    if not path.exists():
        message = f"{path} is missing: run `{INSTALL}` (it installs the pinned Claude Code and Codex)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def _base_env(home: Path) -> dict[str, str]:
    # Only what a CLI needs to start: nothing of the caller's keys, proxies or config leaks in.
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "NO_COLOR": "1",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
    }


def _prepare(tmp: Path, files: Mapping[str, str], *, again: bool = False) -> tuple[Path, Path]:
    home = tmp / "home"
    workdir = tmp / "work"
    home.mkdir(parents=True, exist_ok=again)
    workdir.mkdir(parents=True, exist_ok=again)
    for name, text in files.items():
        target = workdir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return home, workdir


def _run(cli: str, argv: list[str], env: dict[str, str], workdir: Path, timeout: float) -> CliRun:
    # A new session (process group), so a timeout also ends the tool processes the CLI started.
    proc = subprocess.Popen(
        argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    return CliRun(cli, code, out, err, workdir)


def run_claude(
    base_url: str,
    session: str,
    task: str,
    tmp: Path,
    *,
    files: Mapping[str, str] | None = None,
    model: str = "qwen3",
    allowed_tools: tuple[str, ...] = ("Bash",),
    timeout: float = 120.0,
    continue_conversation: bool = False,
) -> CliRun:
    """``claude -p TASK --output-format json --allowedTools ...`` with ``ANTHROPIC_BASE_URL=base_url``.

    ``base_url`` is the server root (Claude Code appends ``/v1/messages?beta=true``); the session id travels as
    ``ANTHROPIC_AUTH_TOKEN`` (``Authorization: Bearer <session>``). stdout is one JSON object (``result``,
    ``is_error``, ``num_turns``, ...).
    """
    binary = cli_binary("claude")
    # --continue: a new prompt in the conversation an earlier run left in the same HOME and folder.
    home, workdir = _prepare(tmp, files or {}, again=continue_conversation)
    (home / ".claude.json").write_text('{"hasCompletedOnboarding": true}\n', encoding="utf-8")
    env = _base_env(home)
    env.update({
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_AUTH_TOKEN": session,
        "ANTHROPIC_MODEL": model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    })
    argv = [str(binary), "-p", task, "--output-format", "json"]
    if allowed_tools:
        argv += ["--allowedTools", ",".join(allowed_tools)]
    if continue_conversation:
        argv.append("--continue")
    return _run("claude", argv, env, workdir, timeout)


def run_codex(
    base_url: str,
    session: str,
    task: str,
    tmp: Path,
    *,
    files: Mapping[str, str] | None = None,
    model: str = "qwen3",
    timeout: float = 120.0,
    sandbox: str | None = None,
) -> CliRun:
    """``codex exec --skip-git-repo-check [--sandbox SANDBOX] TASK``, a provider at ``base_url + "/v1"``.

    The provider's ``wire_api`` is ``"responses"``; ``sandbox`` ``workspace-write`` lets the task write files.

    ``base_url`` is the server root (Codex appends ``/responses`` to the provider's ``base_url``, which here ends
    in ``/v1``); the session id travels as ``OPENAI_API_KEY`` (``Authorization: Bearer <session>``). stdout is
    the final answer; stderr the transcript (commands run, errors).
    """
    binary = cli_binary("codex")
    home, workdir = _prepare(tmp, files or {})
    (home / "config.toml").write_text(
        f'model = "{model}"\n'
        'model_provider = "tito"\n'
        "\n"
        "[model_providers.tito]\n"
        'name = "tito"\n'
        f'base_url = "{base_url.rstrip("/")}/v1"\n'
        'env_key = "OPENAI_API_KEY"\n'
        'wire_api = "responses"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n",
        encoding="utf-8",
    )
    env = _base_env(home)
    env.update({"CODEX_HOME": str(home), "OPENAI_API_KEY": session})
    argv = [str(binary), "exec", "--skip-git-repo-check", *(("--sandbox", sandbox) if sandbox else ()), task]
    return _run("codex", argv, env, workdir, timeout)
