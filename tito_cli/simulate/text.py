"""Deterministic filler text for the simulated repository and agent: names, code, prose.

Everything draws from the ``random.Random`` it is given, so a seed fixes the
text.  The output only has to look like what coding agents read and write;
nothing here is meant to be run.
"""

from __future__ import annotations

import random

__all__ = ["TextGen"]


def _words(text: str, sep: str | None = None) -> list[str]:
    return text.split(sep)


_NOUNS = _words(
    "account balance batch buffer cache client config entry event invoice item key ledger line "
    "order payment queue record report request response result row schedule session stock "
    "token total user value window"
)
_VERBS = _words(
    "apply build check collect compute convert count filter find flush format group load merge "
    "normalize parse read render resolve round score sort split sum update validate write"
)
_PARTICIPLES = _words(
    "applied built checked computed converted filtered loaded merged parsed read sorted updated validated written"
)
_ADJECTIVES = _words("active cached current default empty final first last local next partial pending raw total valid")
_WORDS = _words(
    "the a this that it its we our then so and or but if when because also only just now here "
    "file line test function value result output input change fix call return check run case "
    "expected actual instead before after first last next same different wrong right missing "
    "should would will can does did is are was be been have has not no all each every"
)
_PROJECTS = ("ledger", "billing", "inventory", "scheduler", "reports", "gateway", "catalog", "notifier", "pipeline")
_MODULES = (
    "core",
    "models",
    "utils",
    "storage",
    "api",
    "cli",
    "parsing",
    "formatting",
    "validation",
    "reports",
    "cache",
    "events",
)


class TextGen:
    """Names, code and prose drawn from one seeded generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    # -- names -------------------------------------------------------------

    def project(self) -> str:
        return self.rng.choice(_PROJECTS)

    def module_names(self, count: int) -> list[str]:
        names = list(_MODULES)
        self.rng.shuffle(names)
        while len(names) < count:
            names.append(f"{self.rng.choice(_MODULES)}_{self.rng.choice(_NOUNS)}")
        return names[:count]

    def function_name(self) -> str:
        return f"{self.rng.choice(_VERBS)}_{self.rng.choice(_ADJECTIVES)}_{self.rng.choice(_NOUNS)}"

    def variable(self) -> str:
        return self.rng.choice((self.rng.choice(_NOUNS), f"{self.rng.choice(_ADJECTIVES)}_{self.rng.choice(_NOUNS)}"))

    def class_name(self) -> str:
        return self.rng.choice(_NOUNS).capitalize() + self.rng.choice(("Store", "Manager", "Builder", "Index", "View"))

    # -- code --------------------------------------------------------------

    def expression(self) -> str:
        r = self.rng.random()
        if r < 0.2:
            return str(self.rng.choice((0, 1, 2, 10, 100, 0.5)))
        if r < 0.45:
            return f"{self.function_name()}({self.variable()})"
        if r < 0.6:
            return f"{self.variable()}.get({self.rng.choice(_NOUNS)!r})"
        if r < 0.8:
            op = self.rng.choice(("+", "-", "*", "//"))
            return f"{self.variable()} {op} {self.variable()}"
        return f"[{self.rng.choice(_NOUNS)} for {self.rng.choice(_NOUNS)} in {self.variable()}s]"

    def statements(self, indent: str, count: int, depth: int = 0) -> list[str]:
        lines: list[str] = []
        while len(lines) < count:
            r = self.rng.random()
            if r < 0.45 or depth >= 2:
                lines.append(f"{indent}{self.variable()} = {self.expression()}")
            elif r < 0.65:
                lines.append(f"{indent}if {self.variable()} is None:")
                lines += self.statements(indent + "    ", self.rng.randint(1, 2), depth + 1)
            elif r < 0.85:
                lines.append(f"{indent}for {self.rng.choice(_NOUNS)} in {self.variable()}s:")
                lines += self.statements(indent + "    ", self.rng.randint(1, 3), depth + 1)
            else:
                lines.append(f'{indent}logger.debug("{self.rng.choice(_VERBS)} %s", {self.variable()})')
        return lines

    def function(self, name: str, body_lines: int, *, method: bool = False) -> list[str]:
        args = [self.variable() for _ in range(self.rng.randint(1, 3))]
        args = list(dict.fromkeys(args))
        if method:
            args.insert(0, "self")
        indent = "    " if method else ""
        lines = [f"{indent}def {name}({', '.join(args)}):"]
        lines.append(f'{indent}    """{self.sentence(capital=True, words=(5, 10))}"""')
        lines += self.statements(indent + "    ", max(1, body_lines - 3))
        lines.append(f"{indent}    return {self.expression()}")
        return lines

    # -- prose -------------------------------------------------------------

    def sentence(self, *, capital: bool = True, words: tuple[int, int] = (6, 14)) -> str:
        """A plausible-looking sentence: a template with names filled in, or loose words."""
        r = self.rng.random()
        noun, other = self.rng.choice(_NOUNS), self.rng.choice(_NOUNS)
        if r < 0.25:
            text = f"the {noun} is {self.rng.choice(_PARTICIPLES)} before the {other} is {self.rng.choice(_ADJECTIVES)}"
        elif r < 0.45:
            text = f"`{self.function_name()}` should {self.rng.choice(_VERBS)} each {noun} once and return the {other}"
        elif r < 0.6:
            verb, adjective = self.rng.choice(_VERBS), self.rng.choice(_ADJECTIVES)
            text = f"if the {noun} is empty we {verb} the {adjective} {other} instead"
        elif r < 0.7:
            text = f"this keeps the {noun} and the {other} in the same order"
        else:
            text = " ".join(self.rng.choice(_WORDS) for _ in range(self.rng.randint(*words)))
        if capital:
            text = text[0].upper() + text[1:]
        return text + "."

    def filler(self, sentences: int) -> str:
        return " ".join(self.sentence() for _ in range(sentences))
