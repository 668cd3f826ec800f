"""The named policies, one module each, listed in :data:`tito_cli.algorithm.policy.POLICIES`.

Adding a policy is adding a module that subclasses
:class:`tito_cli.algorithm.policy.Policy` with a ``name`` and a ``summary``
(copy ``slime_v4.py``) and one line in ``POLICIES``; ``--policy`` then offers it.
"""

from __future__ import annotations

from .slime_03 import Slime03
from .slime_v4 import SlimeV4
from .trl import TRL

__all__ = ["TRL", "Slime03", "SlimeV4"]
