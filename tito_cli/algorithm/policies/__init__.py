"""The named policies, one module each; every module here is imported and registers its policy.

Adding a policy is adding a module that subclasses
:class:`tito_cli.algorithm.policy.Policy` with a ``name`` (copy
``slime_v4.py``); ``--policy`` then offers it.
"""

from __future__ import annotations

import importlib
import pkgutil

from .slime_03 import Slime03
from .slime_v4 import SlimeV4

__all__ = ["Slime03", "SlimeV4"]

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
