"""One turns file reached twice: through a ``latest.parquet`` symlink beside it, and a link to the folder.

Read twice, its every session would be rejected as "duplicate seq"; each
real file is read once, whatever leads to it.
"""

import os

from tests.bad_input.kit import write_good


def build(log):
    write_good(log)
    os.symlink("turns-good.parquet", log / "latest.parquet")
    os.symlink(".", log / "again")
