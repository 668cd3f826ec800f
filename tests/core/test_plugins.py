"""The one plug-in convention: a table per kind, lazy built-ins, register for tests and third parties."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from tito_cli.plugins import PluginTable, options_help


class Shape:
    name: ClassVar[str]
    summary: ClassVar[str]


class Square(Shape):
    name = "square"
    summary = "four equal sides"

    @dataclass(frozen=True)
    class Options:
        side: int = field(default=1, metadata={"help": "length of a side"})


class Circle(Shape):
    name = "circle"
    summary = "round"


def test_a_builtin_is_imported_only_when_asked_for() -> None:
    table: PluginTable[Shape] = PluginTable("shape", {"square": f"{__name__}:Square", "circle": f"{__name__}:Circle"})
    table_missing: PluginTable[Shape] = PluginTable("shape", {"gone": "tito_cli_no_such_module:Gone"})
    assert table.names() == ["square", "circle"]
    assert "gone" in table_missing  # listing never imports
    assert "tito_cli_no_such_module" not in sys.modules
    assert table.get("square") is Square
    with pytest.raises(ModuleNotFoundError):
        table_missing.get("gone")


def test_an_unknown_name_lists_the_known_ones() -> None:
    table: PluginTable[Shape] = PluginTable("shape", {"square": f"{__name__}:Square"})
    with pytest.raises(ValueError, match=r"unknown shape 'hexagon'; choose from square"):
        table.get("hexagon")


def test_register_adds_a_class_under_its_own_name_and_refuses_a_taken_one() -> None:
    table: PluginTable[Shape] = PluginTable("shape", {"square": f"{__name__}:Square"}, base=Shape)
    table.register(Circle)
    assert table.get("circle") is Circle
    assert table.help() == "square: four equal sides\ncircle: round"
    with pytest.raises(ValueError, match="already registered"):
        table.register(Circle)
    table.register(Circle, replace=True)
    table.unregister("circle")
    assert table.names() == ["square"]


def test_a_class_without_name_summary_or_base_is_refused() -> None:
    table: PluginTable[Shape] = PluginTable("shape", {}, base=Shape)

    class Nameless(Shape):
        summary = "no name"

    class Foreign:
        name = "foreign"
        summary = "not a shape"

    with pytest.raises(TypeError, match="has no name"):
        table.register(Nameless)
    with pytest.raises(TypeError, match="does not subclass Shape"):
        table.register(Foreign)  # type: ignore[arg-type]


def test_a_builtin_whose_class_answers_to_another_name_is_refused() -> None:
    table: PluginTable[Shape] = PluginTable("shape", {"triangle": f"{__name__}:Square"})
    with pytest.raises(TypeError, match="named 'square', registered as 'triangle'"):
        table.get("triangle")


def test_options_help_reads_each_fields_help() -> None:
    assert options_help(Square.Options) == {"side": "length of a side"}


def test_options_are_built_from_the_plugins_own_class_and_foreign_ones_refused() -> None:
    table: PluginTable[Shape] = PluginTable("shape", {"square": f"{__name__}:Square", "circle": f"{__name__}:Circle"})
    assert table.option_owners() == {"side": ["square"]}
    assert table.options("square") == Square.Options()
    assert table.options("square", {"side": 3}) == Square.Options(side=3)
    given = Square.Options(side=2)
    assert table.options("square", given) is given
    assert table.options("circle") is None and table.options("circle", {}) is None
    # An option of another plug-in is refused naming its owner, not ignored.
    with pytest.raises(ValueError, match="option 'side' applies to the square shape only, not circle"):
        table.options("circle", {"side": 3})
    with pytest.raises(ValueError, match="option 'radius' is unknown, not square"):
        table.options("square", {"radius": 1})
    with pytest.raises(ValueError, match=r"the shape circle takes no options, not Square\.Options"):
        table.options("circle", Square.Options())
