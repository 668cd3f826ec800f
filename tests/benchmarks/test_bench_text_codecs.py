"""``benchmarks/text_codecs.py`` (docs/performance.md): at the default level it rewrites a log as tito wrote it."""

from __future__ import annotations

import subprocess
import sys

from tests.support.helpers import REPO


def test_text_codecs_rewrites_a_log_as_tito_wrote_it_at_the_default_level() -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/text_codecs.py", "fixtures/logs", "--levels", "1", "19"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=300,
    )
    lines = done.stdout.splitlines()
    written = int(lines[0].split("(")[1].split()[0])
    rows = {int(line.split()[0]): line.split()[1:] for line in lines[2:]}
    assert sorted(rows) == [1, 19]
    # At level 1 (pyarrow's default) the rewrite is the log as written, to the footer's few bytes:
    # the same row groups, encodings and codec as capture/row_groups.py, so other levels are comparable.
    assert abs(int(rows[1][3]) - written) < 0.001 * written, (rows[1], written)
    # A higher level changes only the text columns, and makes them smaller.
    assert float(rows[19][1]) < float(rows[1][1])
