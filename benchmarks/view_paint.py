"""tito view in a real browser: page weight, time to first paint, opening and scrolling the largest sample.

    python benchmarks/view_paint.py                  # 5 runs per page
    python benchmarks/view_paint.py --runs 3 --screenshots docs/view   # also the screenshots docs/view.md shows

Pages measured, each written by ``tito view`` as a user runs it:

* ``long``: one synthetic long-context session (benchmarks/workload.py, 40 turns, prompts past 100k
  tokens), decoded with the real Qwen3 tokenizer when ``../shared/tokenizers/qwen3`` is there (ids
  otherwise); its largest sample is the 100k-token case.
* ``demo-largest``: the demo session (fixtures/logs) holding the largest sample.
* ``demo-all``: every demo session.
* ``baseline``: a page with one paragraph, measured in the same browser in the same run: the ratios
  say what tito's page costs over the browser's own floor on this machine at this moment.

For each page, in a fresh browser context per run, with the network blocked: first contentful paint
of the page opened at its largest sample (``#/s/SID/sample/K``: the session page and the sample's
first chunk of tokens), the time the page takes to draw and lay out a further chunk of 2,000 tokens,
then the scroll to the sample's end a screen at a time (each step waits for a
frame; tokens are drawn in chunks as they come into view), reporting the total and the longest frame.
Medians over the runs.  Uses Playwright with the system's Chromium (``apt-get install chromium``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from workload import REPO, WorkloadSpec, ensure  # noqa: E402

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
QWEN3 = REPO.parent / "shared" / "tokenizers" / "qwen3"

#: The page's own work per chunk: draw the next 2,000 tokens and lay them out, five times (median).
CHUNK = """() => {
  const handle = [...window.titoView.handles.values()][0];
  const box = document.querySelector("details.sample[open] .tokens");
  const times = [];
  for (let k = 0; k < 5; k++) {
    const t0 = performance.now();
    handle.drawTo(Number(box.dataset.drawn) + 2000);
    box.getBoundingClientRect();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return {chunk_ms: times[2]};
}"""

SCROLL = """async () => {
  const box = document.querySelector("details.sample[open] .tokens");
  const total = Number(box.closest("details").dataset.tokens);
  const frame = () => new Promise((r) => requestAnimationFrame(() => r(performance.now())));
  let last = await frame(), longest = 0, steps = 0;
  const start = last;
  while (Number(box.dataset.drawn) < total || box.getBoundingClientRect().bottom > innerHeight) {
    window.scrollBy(0, innerHeight * 0.9);
    const now = await frame();
    longest = Math.max(longest, now - last);
    last = now;
    if (++steps > 100000) break;
  }
  return {total_ms: last - start, longest_frame_ms: longest, steps, spans: box.querySelectorAll(".t").length};
}"""


def tito(*args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tito_cli", *args], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"tito {' '.join(args)} failed:\n{done.stderr}")
    return time.perf_counter() - start


def largest_sample(logs: Path, tokenizer: list[str]) -> tuple[str, int, int]:
    """(session, sample index, tokens) of the largest sample, from ``tito inspect --json`` of each session."""
    done = subprocess.run(
        [sys.executable, "-m", "tito_cli", "ls", str(logs), "--json"], cwd=REPO, capture_output=True, text=True
    )
    best = ("", 0, -1)
    for row in json.loads(done.stdout):
        if not row["samples"]:
            continue
        out = subprocess.run(
            [sys.executable, "-m", "tito_cli", "inspect", row["session"], str(logs), "--json", "--ids"],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        for s in json.loads(out.stdout)["samples"]:
            if s["tokens"] > best[2]:
                best = (row["session"], s["index"], s["tokens"])
    return best


def measure(browser: Any, page_path: Path, fragment: str, scroll: bool) -> dict[str, float]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_path.as_uri() + fragment, wait_until="load")
    # Polled from here: the page's Content-Security-Policy forbids the eval a wait_for_function needs.
    paint = None
    for _ in range(600):
        paint = page.evaluate("() => performance.getEntriesByName('first-contentful-paint').map((e) => e.startTime)")
        if paint:
            break
        page.wait_for_timeout(50)
    if not paint:
        raise SystemExit(f"{page_path.name}: no first contentful paint")
    figures = {"first_paint_ms": paint[0]}
    if scroll:
        figures.update(page.evaluate(CHUNK))
        figures.update(page.evaluate(SCROLL))
    context.close()
    if errors:
        raise SystemExit(f"{page_path.name}: page errors {errors}")
    return figures


def screenshots(browser: Any, demo_all: Path, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1100, "height": 700}, offline=True)
    page = context.new_page()
    page.goto(demo_all.as_uri())
    data = page.evaluate("JSON.parse(document.getElementById('tito-data').textContent).sessions")

    # A session with a realign, and of those the one with the most drift points that show in a sample.
    def shown(s: dict[str, Any]) -> tuple[bool, int]:
        points = [d for d in s.get("drift", []) if d["sample"] is not None]
        return any(d["kind"] == "realign" for d in points), len(points)

    session = max(data.values(), key=lambda s: (*shown(s), s["id"]))
    # A realign if there is one: the trained output, the cut and the realigned prompt tokens side by side.
    points = [d for d in session["drift"] if d["sample"] is not None]
    point = next((d for d in points if d["kind"] == "realign"), points[0])
    shots = {
        "corpus.png": "#/",
        "session.png": f"#/s/{session['id']}",
        "tree.png": f"#/s/{session['id']}",
        "sample.png": f"#/s/{session['id']}/sample/{point['sample']}/{point['index']}",
    }
    for name, fragment in shots.items():
        page.evaluate("f => { location.hash = f; }", fragment)
        page.wait_for_timeout(150)
        if name == "tree.png":
            page.locator("#tree").scroll_into_view_if_needed()
            page.evaluate("window.scrollBy(0, -60)")
        page.screenshot(path=str(folder / name))
        print(f"wrote {folder / name} ({(folder / name).stat().st_size / 1e3:.0f} kB)")
    context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="browser runs per page (0: only the screenshots)")
    parser.add_argument("--screenshots", type=Path, help="write the docs' screenshots of the demo page here")
    parser.add_argument(
        "--tokenizer", type=Path, default=QWEN3, help="tokenizer of the long page (default: ../shared/tokenizers/qwen3)"
    )
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs Debian's chromium (apt-get install chromium)")

    work = Path(tempfile.mkdtemp(prefix="tito-view-bench-"))
    long_logs = ensure(WorkloadSpec(sessions=1, turns=40))
    tokenizer = ["--tokenizer", str(args.tokenizer)] if args.tokenizer.is_dir() else []
    demo = Path("fixtures") / "logs"  # relative: the page's title shows the folder as given
    pages: dict[str, tuple[Path, str]] = {}
    build: dict[str, float] = {}

    sid, k, n = largest_sample(long_logs, tokenizer)
    pages["long"] = (work / "long.html", f"#/s/{sid}/sample/{k}")
    build["long"] = tito("view", sid, "--logs", str(long_logs), *tokenizer, "--out", str(pages["long"][0]))
    print(f"long: session {sid}, sample {k}: {n:,} tokens ({'Qwen3 tokenizer' if tokenizer else 'token ids'})")

    sid, k, n = largest_sample(demo, [])
    pages["demo-largest"] = (work / "demo-largest.html", f"#/s/{sid}/sample/{k}")
    build["demo-largest"] = tito("view", sid, "--logs", str(demo), "--out", str(pages["demo-largest"][0]))
    print(f"demo-largest: session {sid}, sample {k}: {n:,} tokens")
    pages["demo-all"] = (work / "demo-all.html", f"#/s/{sid}/sample/{k}")
    build["demo-all"] = tito("view", "--all", "--logs", str(demo), "--out", str(pages["demo-all"][0]))

    baseline = work / "baseline.html"
    baseline.write_text("<!doctype html><meta charset=utf-8><title>baseline</title><p>baseline</p>\n")
    pages["baseline"] = (baseline, "")

    results: dict[str, list[dict[str, float]]] = {name: [] for name in pages}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS, headless=True)
        for _ in range(args.runs):
            for name, (path, fragment) in pages.items():  # interleaved: a slow spell hits every page
                results[name].append(measure(browser, path, fragment, scroll=name != "baseline"))
        if args.screenshots is not None:
            screenshots(browser, pages["demo-all"][0], args.screenshots)
        browser.close()

    if args.runs < 1:
        shutil.rmtree(work)
        return
    floor = statistics.median(r["first_paint_ms"] for r in results["baseline"])
    print(f"\n{args.runs} runs per page, medians; baseline first paint {floor:.0f} ms")
    print(
        f"{'page':<14} {'size':>9} {'build s':>8} {'first paint':>12} {'x baseline':>10}"
        f" {'2k-token chunk':>14} {'scroll to end':>14} {'longest frame':>14} {'spans':>8}"
    )
    for name, runs in results.items():
        if name == "baseline":
            continue
        size = pages[name][0].stat().st_size
        fp = statistics.median(r["first_paint_ms"] for r in runs)
        total = statistics.median(r["total_ms"] for r in runs)
        longest = statistics.median(r["longest_frame_ms"] for r in runs)
        spans = int(statistics.median(r["spans"] for r in runs))
        chunk = statistics.median(r["chunk_ms"] for r in runs)
        print(
            f"{name:<14} {size / 1e6:>7.2f}MB {build[name]:>8.1f} {fp:>10.0f}ms {fp / floor:>10.1f}"
            f" {chunk:>12.0f}ms {total:>12.0f}ms {longest:>12.0f}ms {spans:>8,}"
        )
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
