"""``tito serve``."""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from .._paths import SHIPPED_NAMES
from ..errors import EXIT_USAGE, MissingDependencyError, TitoError
from ..families import FAMILIES
from ..serve.config import ServeConfig, option_flag
from .app import app, exit_codes_help, guarded

T = TypeVar("T")


class SettingError(TitoError):
    """A ``tito serve`` setting that cannot work (``ServeConfig``'s or start-up's ``ValueError``): one line, exit 2."""

    exit_code = EXIT_USAGE


def _serve(log_level: str, **options: Any) -> None:
    try:
        from ..serve.run import serve as run_gateway
    except ImportError as exc:
        raise MissingDependencyError(
            f"tito serve needs the serve extra ({exc.name} is missing)", tip='pip install "tito-cli[serve]"'
        ) from None
    config = config_of(**options)
    try:
        run_gateway(config, log_level=log_level)
    except ValueError as exc:
        raise SettingError(str(exc)) from None


def config_of(**options: Any) -> ServeConfig:
    """The :class:`ServeConfig` of the ``serve`` command's parsed options (``--log-level`` aside); a setting
    that cannot work is a usage error."""
    settings = {name: _from_option(name, value) for name, value in options.items()}
    return _checked(ServeConfig, **{name: value for name, value in settings.items() if value is not _DEFAULT})


def _options() -> list[inspect.Parameter]:
    """One typer option per :class:`ServeConfig` field that has help: its default the field's (one list of
    defaults), its help the field's ``metadata["help"]``; ``--log-level`` besides."""
    filled = {"{shipped}": ", ".join(SHIPPED_NAMES), "{families}": ", ".join(FAMILIES.names())}
    made = []
    for setting in dataclasses.fields(ServeConfig):
        if "help" not in setting.metadata:
            continue  # a library caller's setting (create_app), not an option
        flag = option_flag(setting.name)
        assert flag is not None
        meta = setting.metadata
        default = setting.default
        if default is dataclasses.MISSING:
            default = ... if setting.default_factory is dataclasses.MISSING else None
        kind, default = _option_kind(setting.name, default)
        extra = {key: meta[key] for key in ("min", "metavar") if key in meta}
        text = meta["help"]
        for mark, names in filled.items():
            text = text.replace(mark, names)
        option = typer.Option(default, flag, help=text, **extra)
        made.append(inspect.Parameter(setting.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind))
    level = typer.Option("warning", "--log-level", help="uvicorn's and the gateway's log level.")
    made.append(inspect.Parameter("log_level", inspect.Parameter.KEYWORD_ONLY, default=level, annotation=str))
    return made


def _option_kind(name: str, default: Any) -> tuple[Any, Any]:
    """The option's type on the command line and its default there (JSON text, LAYERS,TOPK, repeated values)."""
    hint = typing.get_type_hints(ServeConfig)[name]
    if name in _AS_TEXT:
        return str, None
    if typing.get_origin(hint) is tuple:
        return list[str], list(default)
    if hint == Path:
        return Path, default
    for simple in (bool, int, float, str):
        if hint == simple or hint == (simple | None):
            return simple, default
    raise AssertionError(f"ServeConfig.{name}: no command-line form for {hint}")


#: Settings typed on the command line as text, read by these (not given: the field's default).
_AS_TEXT: dict[str, Callable[[str], Any]] = {}
_DEFAULT = object()


def _from_option(name: str, value: Any) -> Any:
    """An option's value as the ServeConfig field takes it."""
    if name in _AS_TEXT:
        return _DEFAULT if value is None else _AS_TEXT[name](value)
    if isinstance(value, list):
        return tuple(value)
    if name == "logs" and value is not None:
        return Path(value)  # (typer makes it one when it runs the command; click's parsing alone gives text)
    return value


def _checked(make: Callable[..., T], **settings: Any) -> T:
    """``make(**settings)`` (the ``ServeConfig``, which checks itself), its ``ValueError`` a usage error."""
    try:
        return make(**settings)
    except ValueError as exc:
        raise SettingError(str(exc)) from None


def _shape(text: str) -> tuple[int, int]:
    """``--routed-experts-shape LAYERS,TOPK``: two positive integers, or a usage error."""
    try:
        layers, topk = (int(part) for part in text.split(","))
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not LAYERS,TOPK (two integers)") from None
    if layers < 1 or topk < 1:
        raise typer.BadParameter(f"{text!r}: both numbers must be at least 1")
    return layers, topk


def _json_object(text: str | None) -> dict[str, Any]:
    """``--chat-template-kwargs``: a JSON object, or a usage error saying what it is instead."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise typer.BadParameter(f"not JSON ({exc})", param_hint="--chat-template-kwargs") from None
    if not isinstance(value, dict):
        raise typer.BadParameter(
            f"a JSON object is needed, not {type(value).__name__}", param_hint="--chat-template-kwargs"
        )
    return value


_AS_TEXT.update(chat_template_kwargs=_json_object, routed_experts_shape=_shape)


def _command(**options: Any) -> None:
    _serve(**options)


_command.__signature__ = inspect.Signature(_options())  # type: ignore[attr-defined]
serve = app.command(
    name="serve",
    help="Run the capture gateway: answer agent CLIs in the Anthropic Messages, OpenAI Responses and Chat "
    "Completions dialects, call the inference server, and record every generation call as a turn "
    "(docs/serve.md). Serves until SIGTERM or Ctrl-C, then finishes in-flight requests and closes the log.\n\n"
    + exit_codes_help(),
)(guarded(_command))
