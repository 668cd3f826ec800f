"""The one plug-in convention: a table of ``name -> "module:Class"`` per kind, imported lazily.

Every kind of plug-in (policies, output formats, importers, the gateway's client dialects and
upstreams, model-family profiles) is one :class:`PluginTable`.  A plug-in is a class that carries

* ``name`` — what the command line and the library call it (the table's key);
* ``summary`` — one line for ``--help`` and ``docs/``;
* ``Options`` (optional) — a dataclass of its own options, so that the command line can check and
  document them per plug-in instead of in one union class.

Built-in plug-ins are named by import path and imported only when asked for, so a command pays only
for the plug-ins it uses.  :meth:`PluginTable.options` turns what a caller gives (nothing, an
``Options`` instance, a mapping of its fields) into the plug-in's options, refusing an option that
belongs to another plug-in of the kind (:meth:`PluginTable.option_owners` names them).  Tests and
third parties add one with ``register`` (each kind re-exports its table's method as
``register_<kind>``): one module and one line, nothing else to edit.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Generic, Protocol, TypeVar

__all__ = ["Plugin", "PluginTable", "options_help"]


class Plugin(Protocol):
    """What every plug-in class carries (checked when the class is loaded)."""

    name: ClassVar[str]
    summary: ClassVar[str]


P = TypeVar("P")


class PluginTable(Generic[P]):
    """The plug-ins of one kind: ``name -> class``, built-ins imported the first time they are used.

    ``kind`` names the kind in messages (``"policy"``, ``"output format"``); ``base``, when given, is
    the interface every plug-in of the kind subclasses (checked on load and on ``register``).
    """

    def __init__(self, kind: str, builtin: dict[str, str], base: type[P] | None = None) -> None:
        self.kind = kind
        self._base = base
        self._targets: dict[str, str | type[P]] = dict(builtin)
        self._loaded: dict[str, type[P]] = {}

    def register(self, plugin: type[P] | str, *, name: str | None = None, replace: bool = False) -> None:
        """Add a plug-in: a class (named by its ``name``) or a ``"module:Class"`` path with ``name``.

        A name already taken is refused unless ``replace``: two plug-ins answering to one name would
        make which one runs depend on import order.
        """
        if isinstance(plugin, str):
            if name is None:
                raise ValueError(f"registering a {self.kind} by path needs name=")
            key = name
        else:
            self._check(plugin, name)
            key = name or plugin.name  # type: ignore[attr-defined]
        if key in self._targets and not replace:
            raise ValueError(f"a {self.kind} named {key!r} is already registered (pass replace=True)")
        self._targets[key] = plugin
        self._loaded.pop(key, None)

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests that registered a plug-in take it out again)."""
        self._targets.pop(name, None)
        self._loaded.pop(name, None)

    def names(self) -> list[str]:
        """Every registered name, in table order (built-ins first, in the order the table lists them)."""
        return list(self._targets)

    def __contains__(self, name: object) -> bool:
        return name in self._targets

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: str) -> type[P]:
        """The class registered as ``name``; ``ValueError`` listing the names otherwise."""
        loaded = self._loaded.get(name)
        if loaded is not None:
            return loaded
        try:
            target = self._targets[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; choose from {', '.join(self.names())}") from None
        if isinstance(target, str):
            module, _, attr = target.partition(":")
            cls: type[P] = getattr(importlib.import_module(module), attr)
            self._check(cls, name)
        else:
            cls = target
        self._loaded[name] = cls
        return cls

    def summaries(self) -> dict[str, str]:
        """``name -> summary`` for every plug-in (imports them all: for help texts and docs)."""
        return {name: self.get(name).summary for name in self.names()}  # type: ignore[attr-defined]

    def help(self) -> str:
        """The plug-ins as help text: ``name: summary`` per line."""
        return "\n".join(f"{name}: {summary}" for name, summary in self.summaries().items())

    def option_owners(self) -> dict[str, list[str]]:
        """Each option (a field of some plug-in's ``Options``) -> the plug-ins that have it, in table order."""
        owners: dict[str, list[str]] = {}
        for name in self.names():
            options = getattr(self.get(name), "Options", None)
            for option in dataclasses.fields(options) if options is not None else ():
                owners.setdefault(option.name, []).append(name)
        return owners

    def options(self, name: str, given: object = None) -> Any:
        """``name``'s options as an instance of its ``Options``: ``given`` is ``None`` (the defaults),
        such an instance, or a mapping of its fields.

        ``ValueError`` for a field it does not have, naming the plug-ins that have it (an option
        meant for another plug-in is refused rather than ignored), and for any other value.
        """
        cls = self.get(name)
        wanted: type[Any] | None = getattr(cls, "Options", None)
        if given is None:
            return wanted() if wanted is not None else None
        if wanted is not None and isinstance(given, wanted):
            return given
        if not isinstance(given, Mapping):
            expected = wanted.__qualname__ if wanted is not None else "no"
            raise ValueError(f"the {self.kind} {name} takes {expected} options, not {type(given).__qualname__}")
        known = [f.name for f in dataclasses.fields(wanted)] if wanted is not None else []
        for key in given:
            if key not in known:
                owners = self.option_owners().get(key)
                where = f"applies to the {' and '.join(owners)} {self.kind} only" if owners else "is unknown"
                raise ValueError(f"option {key!r} {where}, not {name}")
        return wanted(**given) if wanted is not None else None

    def _check(self, cls: Any, name: str | None) -> None:
        if not isinstance(cls, type):
            raise TypeError(f"a {self.kind} must be a class, got {cls!r}")
        for attr in ("name", "summary"):
            if not isinstance(getattr(cls, attr, None), str):
                raise TypeError(f"{self.kind} {cls.__qualname__} has no {attr} (a str class attribute)")
        own_name = getattr(cls, "name")  # noqa: B009  (checked to be a str above; `type` has no such attribute)
        if name is not None and own_name != name:
            raise TypeError(f"{self.kind} {cls.__qualname__} is named {own_name!r}, registered as {name!r}")
        if self._base is not None and not issubclass(cls, self._base):
            raise TypeError(f"{self.kind} {cls.__qualname__} does not subclass {self._base.__qualname__}")
        options = getattr(cls, "Options", None)
        if options is not None and not dataclasses.is_dataclass(options):
            raise TypeError(f"{self.kind} {cls.__qualname__}.Options must be a dataclass")


def options_help(options: type[Any]) -> dict[str, str]:
    """A plug-in's ``Options`` dataclass as ``field -> help`` (the field's ``metadata["help"]``)."""
    return {field.name: str(field.metadata.get("help", "")) for field in dataclasses.fields(options)}
