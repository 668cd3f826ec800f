"""``tito view`` in a real browser: headless Chromium opens the page from disk with the network blocked.

Driven by Playwright with Debian's ``chromium`` (never a downloaded browser).
Without them the tests skip on a developer's machine and fail in CI (``CI``
set), so a CI without the browser cannot pass by skipping.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tito_cli.errors import EXIT_OK
from tito_cli.report.facts import session_row
from tito_cli.run.corpus import Corpus
from tito_cli.turns import Reject

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "logs"

#: Flags that work as root in a container; a fresh profile per run (Playwright makes one).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

#: A real browser starts for this module.
pytestmark = pytest.mark.slow


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"browser tests cannot run in CI: {why} (.ci/run installs chromium and the browser extra)")
    pytest.skip(why)


@dataclass
class Tab:
    page: Any
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[browser]')")
    executable = chromium_path()
    if executable is None:
        _unavailable("no chromium on PATH (apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def demo_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("view") / "demo.html"
    result = tito("view", "--all", "--logs", str(DEMO), "--out", str(out))
    assert result.exit_code == EXIT_OK, result.stderr
    return out


@pytest.fixture(scope="module")
def demo_samples(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("rebuild") / "samples.parquet"
    result = tito("rebuild", str(DEMO), "--out", str(out))
    assert result.exit_code == EXIT_OK, result.stderr
    return pq.read_table(out, columns=["session_id", "sample_index", "tokens", "loss_mask"]).to_pylist()


@pytest.fixture
def tab(browser: Any, demo_html: Path) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
    page = context.new_page()
    opened = Tab(page)
    def console(message: Any) -> None:
        if message.type in ("error", "warning"):
            opened.errors.append(f"{message.type}: {message.text}")

    page.on("console", console)
    page.on("pageerror", lambda e: opened.errors.append(f"page error: {e}"))

    def block(route: Any) -> None:
        url = route.request.url
        if url.startswith("file:"):
            route.continue_()
        else:
            opened.requests.append(url)
            route.abort()

    context.route("**/*", block)
    page.goto(demo_html.as_uri())
    page.wait_for_selector("#sessions-table")
    yield opened
    context.close()
    # Nothing but the file itself was asked for, and nothing went wrong on the way.
    assert opened.requests == []
    assert opened.errors == []


# Resolves once the page's own hashchange handler (registered first, so run first) has drawn the
# route (it draws synchronously); at once when the hash is already there (no event comes then).
_GO = """f => new Promise(done => {
    if (location.hash === f) { done(); return; }
    window.addEventListener("hashchange", () => done(), { once: true });
    setTimeout(done, 10000);
    location.hash = f;
})"""


def go(tab: Tab, fragment: str) -> None:
    tab.page.evaluate(_GO, fragment)


def test_every_session_page_renders(tab: Tab) -> None:
    ids = Corpus.open([DEMO]).session_ids()
    assert tab.page.locator("#sessions-table tbody tr").count() == len(ids)
    for sid in ids:
        go(tab, f"#/s/{sid}")
        assert tab.page.locator("#session-page h1").inner_text() == sid
        assert tab.page.locator("#corpus-page").is_hidden()
    go(tab, "#/")
    assert tab.page.locator("#corpus-page").is_visible()


def test_the_tree_expands(tab: Tab) -> None:
    # The first session with a branch below the top level (those start closed).
    for sid in Corpus.open([DEMO]).session_ids():
        go(tab, f"#/s/{sid}")
        closed = tab.page.locator("#tree details:not([open])")
        if closed.count():
            break
    else:
        pytest.fail("no demo session has a nested branch")
    branch = closed.first
    node = branch.get_attribute("data-node")
    body = tab.page.locator(f'#tree details[data-node="{node}"] > div')
    assert not body.is_visible()
    branch.locator("> summary").click()
    assert tab.page.locator(f'#tree details[data-node="{node}"]').get_attribute("open") is not None
    assert body.is_visible()
    tab.page.get_by_role("button", name="collapse all").click()
    assert tab.page.locator("#tree details[open]").count() == 0
    tab.page.get_by_role("button", name="expand all").click()
    assert tab.page.locator("#tree details:not([open])").count() == 0


def visible_sessions(tab: Tab) -> list[str]:
    rows = tab.page.locator("#sessions-table tbody tr:not([hidden])")
    return [rows.nth(i).get_attribute("data-session") for i in range(rows.count())]


def test_filtering_and_sorting_the_sessions_table(tab: Tab) -> None:
    rows = {r["session"]: r for r in map(session_row, Corpus.open([DEMO]).results())}
    tab.page.fill("#filter-text", "0001")
    assert visible_sessions(tab) == sorted(s for s in rows if "0001" in s)
    tab.page.fill("#filter-text", "")
    tab.page.check("#filters input[value=forked]")
    forked = sorted(s for s, r in rows.items() if r["forks"])
    assert visible_sessions(tab) == forked
    assert tab.page.locator("#filter-count").inner_text() == f"{len(forked)} of {len(rows)} sessions"
    tab.page.check("#filters input[value=realigned]")
    assert visible_sessions(tab) == sorted(s for s, r in rows.items() if r["forks"] and r["realigns"])
    tab.page.uncheck("#filters input[value=forked]")
    tab.page.uncheck("#filters input[value=realigned]")
    # Sorting by trained tokens, twice for descending.
    header = tab.page.locator('#sessions-table th[data-key="trained"]')
    header.click()
    header.click()
    by_trained = sorted(rows, key=lambda s: (-rows[s]["trained"], s))
    assert visible_sessions(tab) == by_trained


def test_trained_tokens_in_the_dom_are_the_samples_file(tab: Tab, demo_samples: list[dict[str, Any]]) -> None:
    # The largest sample of the demo, and one with the most trained tokens.
    largest = max(demo_samples, key=lambda r: len(r["tokens"]))
    most_trained = max(demo_samples, key=lambda r: sum(r["loss_mask"]))
    for row in (largest, most_trained):
        sid, k = row["session_id"], row["sample_index"]
        go(tab, f"#/s/{sid}/sample/{k}")
        sample = tab.page.locator(f"#sample-{k}")
        assert sample.get_attribute("open") is not None
        # Dispatched, not clicked: the button moves down (and hides) while chunks keep being drawn.
        sample.locator(".more button").dispatch_event("click")
        tokens = sample.locator(".tokens .t")
        assert tokens.count() == len(row["tokens"])
        assert sample.locator(".tokens .t.tr").count() == sum(row["loss_mask"])
        assert sample.locator(".trained-count").inner_text().replace(",", "") == str(sum(row["loss_mask"]))


def drifting_session(tab: Tab) -> dict[str, Any]:
    """The first session on the page with a drift point shown in a sample (from the page's own data)."""
    found: dict[str, Any] = tab.page.evaluate(
        """() => Object.values(JSON.parse(document.getElementById("tito-data").textContent).sessions)
                 .map(s => ({id: s.id, drift: (s.drift || []).filter(d => d.sample !== null)}))
                 .find(s => s.drift.length)"""
    )
    assert found, "no demo session has a fork or realign"
    return found


def test_scrolling_draws_a_sample_to_its_end(tab: Tab, demo_samples: list[dict[str, Any]]) -> None:
    """Tokens are drawn in chunks as they scroll into view, until the last one (no "show all")."""
    row = max(demo_samples, key=lambda r: len(r["tokens"]))
    go(tab, f"#/s/{row['session_id']}/sample/{row['sample_index']}")
    box = tab.page.locator(f"#sample-{row['sample_index']} .tokens").first
    assert int(box.get_attribute("data-drawn") or 0) < len(row["tokens"])  # drawn lazily
    for _ in range(2000):
        if int(box.get_attribute("data-drawn") or 0) == len(row["tokens"]):
            break
        tab.page.mouse.wheel(0, 2000)
        tab.page.wait_for_timeout(20)
    assert int(box.get_attribute("data-drawn") or 0) == len(row["tokens"])
    assert box.locator(".t").count() == len(row["tokens"])


def test_a_tall_screen_is_filled_with_tokens(tab: Tab, demo_samples: list[dict[str, Any]]) -> None:
    """The next chunk is drawn while the end of what is drawn is still in view, without any scrolling."""
    row = max(demo_samples, key=lambda r: len(r["tokens"]))
    tab.page.set_viewport_size({"width": 1280, "height": 16000})
    go(tab, f"#/s/{row['session_id']}/sample/{row['sample_index']}")
    sample = tab.page.locator(f"#sample-{row['sample_index']}")
    # Until drawing stops: unchanged for half a second (a loaded machine can pause a
    # frame for more than one poll), for at most 15 seconds.
    drawn, steady = -1, 0
    for _ in range(150):
        tab.page.wait_for_timeout(100)
        now = int(sample.locator(".tokens").first.get_attribute("data-drawn") or 0)
        steady = steady + 1 if now == drawn else 0
        if steady == 5:
            break
        drawn = now
    more = sample.locator(".more")
    if drawn < len(row["tokens"]):
        # The "show all" line below the drawn tokens is off the screen: the screen is full.
        assert more.bounding_box()["y"] > 16000  # type: ignore[index]


def test_a_drift_point_links_to_its_divergence(tab: Tab) -> None:
    go(tab, f"#/s/{drifting_session(tab)['id']}")
    links = tab.page.locator(".drift a", has_text="show in sample")
    assert links.count() > 0
    links.first.click()
    hit = tab.page.locator(".tokens .t.hit")
    hit.first.wait_for()  # drawn by the jump, however long a loaded machine takes
    assert hit.count() == 1
    assert hit.is_visible()
    # The marked token is the first difference of a drift point (the same index).
    assert "dv" in (hit.get_attribute("class") or "")


def test_screenshots(tab: Tab, tmp_path: Path) -> None:
    session = drifting_session(tab)
    point = session["drift"][0]
    shots = {
        "corpus": "#/",
        "session": f"#/s/{session['id']}",
        "sample": f"#/s/{session['id']}/sample/{point['sample']}/{point['index']}",
    }
    for name, fragment in shots.items():
        go(tab, fragment)
        path = tmp_path / f"{name}.png"
        tab.page.screenshot(path=str(path))
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_size > 10_000  # a drawn page, not a blank one


def test_a_log_without_tokenizer_shows_token_ids(browser: Any, tmp_path: Path) -> None:
    from tests.support.scenario_logs import scenario_log

    logs = scenario_log("agent", tmp_path / "logs", tokenizer=None)
    out = tmp_path / "ids.html"
    result = tito("view", "--all", "--logs", str(logs), "--out", str(out))
    assert result.exit_code == EXIT_OK, result.stderr
    session = next(r for r in Corpus.open([logs]).results() if not isinstance(r, Reject) and r.samples)
    context = browser.new_context(offline=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(out.as_uri() + f"#/s/{session.session_id}/sample/0")
    tokens = page.locator("#sample-0 .tokens").first.locator(".t")
    ids = session.samples[0].tokens.tolist()
    assert tokens.count() == len(ids)
    assert [t.strip() for t in tokens.all_inner_texts()[:20]] == [str(i) for i in ids[:20]]
    context.close()
    assert errors == []
