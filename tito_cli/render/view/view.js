// tito view: the corpus table (sort, filter) and the session pages, drawn from the inline JSON.
// Everything the page shows is in that JSON; nothing is fetched.  Sample tokens are drawn in chunks
// as they scroll into view, so a 100k-token sample costs a few thousand DOM nodes until it is read.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("tito-data").textContent);
  const CHUNK = 2000;
  const corpusPage = document.getElementById("corpus-page");
  const sessionPage = document.getElementById("session-page");
  const statusBar = document.getElementById("status");
  const special = new Set(DATA.special);
  const WS = { " ": "␣", "\n": "↵", "\t": "⇥" };

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }
  const fmt = (n) => (n === null || n === undefined ? "" : Number(n).toLocaleString("en-US"));
  const count = (n, one, many) => `${fmt(n)} ${n === 1 ? one : many}`;
  const sessionHref = (sid, rest) => "#/s/" + encodeURIComponent(sid) + (rest || "");

  // -- the corpus table -------------------------------------------------------------------
  const table = document.getElementById("sessions-table");
  const rows = Array.from(table.tBodies[0].rows);
  const filterText = document.getElementById("filter-text");
  const flagBoxes = Array.from(document.querySelectorAll("#filters .flag"));
  const filterCount = document.getElementById("filter-count");

  function applyFilter() {
    const needle = filterText.value.trim().toLowerCase();
    const on = flagBoxes.filter((b) => b.checked).map((b) => b.value);
    let shown = 0;
    for (const row of rows) {
      const ok = row.dataset.session.toLowerCase().includes(needle) && on.every((f) => row.dataset[f] === "1");
      row.hidden = !ok;
      shown += ok;
    }
    filterCount.textContent = `${shown} of ${count(rows.length, "session", "sessions")}`;
  }
  filterText.addEventListener("input", applyFilter);
  flagBoxes.forEach((b) => b.addEventListener("change", applyFilter));

  for (const th of table.tHead.rows[0].cells) {
    th.addEventListener("click", () => {
      const key = th.dataset.key;
      const numeric = th.dataset.numeric === "1";
      const desc = th.classList.contains("sorted-asc");
      for (const other of table.tHead.rows[0].cells) other.classList.remove("sorted-asc", "sorted-desc");
      th.classList.add(desc ? "sorted-desc" : "sorted-asc");
      const attr = "v" + key.charAt(0).toUpperCase() + key.slice(1);
      const value = (r) => r.dataset[attr];
      const sorted = rows.slice().sort((a, b) => {
        const x = value(a), y = value(b);
        if (x === "" && y === "") return a.dataset.session < b.dataset.session ? -1 : 1;
        if (x === "") return 1; // nulls (rejected sessions) last, either way
        if (y === "") return -1;
        let c = numeric ? Number(x) - Number(y) : x < y ? -1 : x > y ? 1 : 0;
        if (desc) c = -c;
        return c !== 0 ? c : a.dataset.session < b.dataset.session ? -1 : 1; // ties by session id, as tito ls
      });
      table.tBodies[0].append(...sorted);
    });
  }

  // -- tokens -------------------------------------------------------------------------------
  function piece(id) {
    if (!DATA.decodes) return String(id) + " ";
    const p = DATA.vocab[id];
    return p === undefined ? `<${id}>` : p;
  }

  // One token as a span; whitespace inside it shown as ␣ ↵ ⇥ (a real line break follows ↵).
  function tokenSpan(id, cls) {
    const span = document.createElement("span");
    span._id = id;
    span.className = "t " + cls + (special.has(id) ? " sp" : "");
    const text = piece(id);
    if (!DATA.decodes || special.has(id) || !/[ \n\t]/.test(text)) { // ids: separated by a plain space
      span.textContent = text;
    } else {
      let plain = "";
      for (const ch of text) {
        if (WS[ch] === undefined) { plain += ch; continue; }
        if (plain) { span.append(plain); plain = ""; }
        span.append(el("span", { class: "ws", text: WS[ch] }));
        if (ch === "\n") span.append("\n");
      }
      if (plain) span.append(plain);
    }
    return span;
  }

  const REGION_CLASS = { first_prompt: "fp", prompt: "pr" };
  function regionClass(region, afterCut) {
    const kind = region[0], trained = region[4];
    if (kind === "output") return trained ? "tr" : "cx";
    if (kind === "prompt" && afterCut) return "ra";
    return REGION_CLASS[kind];
  }
  function regionLabel(region, afterCut) {
    const [kind, seq, start, end, trained, generated] = region;
    const n = end - start;
    const label = el("span", { class: "rl" });
    if (kind === "first_prompt") label.textContent = `── seq ${seq} first prompt · ${fmt(n)} tokens`;
    else if (kind === "prompt") {
      label.textContent = `── seq ${seq} prompt · ${fmt(n)} new tokens · context`;
      if (afterCut) label.append(el("span", { class: "cut", text: ` · realigned from ${fmt(start)}` }));
    } else {
      label.textContent = `── seq ${seq} output · ${fmt(n)} tokens · ${trained ? "trained" : "context (masked: trained elsewhere)"}`;
      if (generated !== null)
        label.append(el("span", { class: "cut", text: ` · ${fmt(generated - n)} of ${fmt(generated)} cut by the next turn's realign` }));
    }
    return label;
  }

  // Draws a sample's tokens into `box` chunk by chunk; returns a handle to draw more or jump to a token.
  // Regions are [kind, seq, start, end, trained, generated]; a prompt region right after an output cut
  // by a realign holds the realigned tokens (the prompt's version of what the model had generated).
  function sampleTokens(sample, box, marks) {
    const spans = [];
    const regions = sample.regions;
    const total = sample.ids.length;
    let drawn = 0, region = 0, labelled = 0;
    const cutBefore = (i) => i > 0 && regions[i - 1][0] === "output" && regions[i - 1][5] !== null;
    const sentinel = el("div", { class: "more" });
    const moreButton = el("button", { text: "show all", onclick: () => drawTo(total) });
    sentinel.append(moreButton);
    box.append(sentinel);
    function labelsHere(frag) {
      // Labels of the regions starting at `drawn`; empty ones (an output emptied by a realign) are passed.
      while (region < regions.length && regions[region][2] === drawn) {
        if (labelled <= region) { frag.append(regionLabel(regions[region], cutBefore(region))); labelled = region + 1; }
        if (regions[region][2] !== regions[region][3]) break;
        region++;
      }
    }
    // One chunk of tokens in a block of its own: appending a chunk lays out that block only, and a
    // chunk off the screen is not painted (content-visibility), so a 100k-token sample scrolls like a
    // short one.  A chunk ends after a line break when one comes soon, so blocks split at line ends.
    function drawChunk(frag) {
      let end = Math.min(total, drawn + CHUNK);
      for (let j = end; j < Math.min(total, end + 256); j++) {
        if (/\n$/.test(piece(sample.ids[j - 1]))) { end = j; break; }
      }
      const chunk = el("div", { class: "chunk" });
      while (drawn < end) {
        labelsHere(chunk);
        const r = regions[region];
        const cls = regionClass(r, cutBefore(region));
        const stop = Math.min(end, r[3]);
        for (let i = drawn; i < stop; i++) {
          const span = tokenSpan(sample.ids[i], cls);
          span._i = i;
          if (marks.has(i)) span.classList.add("dv");
          spans.push(span);
          chunk.append(span);
        }
        drawn = stop;
        if (drawn === r[3]) region++;
      }
      if (drawn === total) labelsHere(chunk);
      frag.append(chunk);
    }
    function drawTo(limit) {
      limit = Math.min(limit, total);
      const frag = document.createDocumentFragment();
      while (drawn < limit) drawChunk(frag);
      box.insertBefore(frag, sentinel);
      const left = total - drawn;
      moreButton.textContent = `show all (${fmt(left)} more tokens)`;
      sentinel.hidden = left === 0;
      if (left === 0 && observer) observer.disconnect();
      box.dataset.drawn = String(drawn);
    }
    // Draw chunk after chunk while the end of what is drawn is near the screen (a frame apart, so the
    // page stays responsive); the observer starts this again when scrolling brings the end near.
    const NEAR = 600;
    let filling = false;
    function fill() {
      filling = false;
      if (drawn >= total || box.offsetParent === null) return; // all drawn, or the sample is closed
      if (sentinel.getBoundingClientRect().top > innerHeight + NEAR) return;
      drawTo(drawn + CHUNK);
      filling = true;
      requestAnimationFrame(fill);
    }
    const observer = "IntersectionObserver" in window
      ? new IntersectionObserver((entries) => {
          if (entries.some((e) => e.isIntersecting) && !filling) fill();
        }, { rootMargin: `${NEAR}px` })
      : null;
    drawTo(CHUNK);
    if (observer && drawn < total) observer.observe(sentinel);
    requestAnimationFrame(fill);
    return {
      drawTo,
      jump(position) {
        drawTo(Math.max(drawn, position + CHUNK / 4));
        const span = spans[position];
        if (!span) return;
        for (const old of box.querySelectorAll(".hit")) old.classList.remove("hit");
        span.classList.add("hit");
        span.scrollIntoView({ block: "center" });
      },
    };
  }

  document.addEventListener("mouseover", (event) => {
    const t = event.target.closest(".tokens .t");
    if (!t || t._id === undefined) return;
    const names = { fp: "first prompt", pr: "prompt (context)", tr: "trained", cx: "masked output", ra: "realigned prompt", sp: "special", dv: "first difference" };
    const kinds = t.className.split(" ").filter((c) => names[c]).map((c) => names[c]).join(", ");
    statusBar.textContent = `token ${fmt(t._i)} · id ${t._id} · ${JSON.stringify(piece(t._id))} · ${kinds}`;
  });

  // -- the session page -----------------------------------------------------------------------
  function header(s) {
    const h = s.header;
    const forks = Object.values(h.forks).reduce((a, b) => a + b, 0);
    const head = el("div", { class: "session-head" },
      el("div", {}, el("a", { href: "#/", text: "← all sessions" })),
      el("h1", { text: s.id }),
      el("div", { class: "facts", text: `reward ${h.reward}${h.finished ? "" : " (no sessions row)"} · ${count(h.turns, "turn", "turns")} · ${count(h.leaves, "leaf", "leaves")} · ${count(h.samples, "sample", "samples")}` }),
      el("div", { class: "facts", text: `tokens trained ${fmt(h.trained_tokens)} · context ${fmt(h.context_tokens)} · forks ${forks} (${s.fork_summary}) · realigns ${h.realigns} · rewrite merges ${h.rewrite_merges}` }));
    if (s.notes.length) head.append(el("div", { class: "facts warn", text: s.notes.join(" · ") }));
    return head;
  }

  function driftBlock(s, d, index) {
    const box = el("div", { class: "drift " + d.kind, id: `drift-${d.seq}` });
    box.append(el("div", {},
      el("span", { class: "why", text: `seq ${d.seq} · ${d.label}` }),
      d.drift_class ? el("span", { text: ` · ${d.drift_class}` }) : null,
      el("span", { class: "facts", text: ` · first difference at token ${fmt(d.index)} of ${fmt(d.held_length)} held` }),
      d.sample !== null ? el("span", {}, " · ", el("a", { href: sessionHref(s.id, `/sample/${d.sample}/${d.index}`), text: `show in sample ${d.sample}` })) : null));
    const side = el("div", { class: "side" });
    for (const [name, ids] of [["held", d.held_ids], ["prompt", d.prompt_ids]]) {
      const tokens = el("div", { class: "tokens" });
      ids.forEach((id, i) => {
        const span = tokenSpan(id, i < d.index - d.window_start ? "pr" : name === "held" ? "cx" : "ra");
        span._i = d.window_start + i;
        if (i === d.index - d.window_start) span.classList.add("dv");
        tokens.append(span);
      });
      side.append(el("div", { class: "lab", text: name }), tokens);
    }
    box.append(side);
    return box;
  }

  function nodeLine(s, n) {
    const line = el("div", { class: "node" });
    if (n.branch) line.append(el("span", { class: "branch", text: `├ ${n.branch}` }));
    line.append(el("span", { class: "role role-" + (n.role || "x"), text: n.role || "?" }));
    if (n.kind === "generated") {
      line.append(el("span", { class: "gen", text: `seq ${n.seq} #${n.turn_index}` }),
        ` in ${fmt(n.prompt_tokens)} out ${fmt(n.output_tokens)} ${n.finish_reason} `);
      const d = n.decision;
      if (d && (d.kind === "fork" || d.kind === "realign"))
        line.append(el("a", { class: "tag-" + d.kind, href: sessionHref(s.id, `/drift/${n.seq}`), text: n.decision_label }), " ");
    } else if (n.kind === "merged") {
      const m = n.merged_rewrite;
      line.append(el("span", { class: "merged", text: `⇄ rewrite of seq ${m.abandoned_seq} merged (${m.abandoned_response_tokens} tok abandoned) ` }));
    } else if (n.role === "assistant") {
      line.append(el("span", { class: "echo", text: "echo, routing only, never trained " }));
    }
    if (n.tools) line.append(el("span", { class: "preview", text: `[${n.tools} tools] ` }));
    line.append(el("span", { class: "preview", text: n.preview }));
    line.title = n.preview;
    return line;
  }

  // The routing tree with linear runs kept flat: a <details> only where the tree branches.
  function tree(s) {
    const children = new Map();
    for (const n of s.tree) {
      if (!children.has(n.parent)) children.set(n.parent, []);
      children.get(n.parent).push(n.id);
    }
    const kids = (id) => children.get(id) || [];
    function item(id, depth) {
      const run = [s.tree[id]];
      let current = id;
      while (kids(current).length === 1) { current = kids(current)[0]; run.push(s.tree[current]); }
      const details = el("details", { open: depth < 2, "data-node": String(id) });
      details.append(el("summary", {}, nodeLine(s, run[0])));
      const body = el("div", {});
      run.slice(1).forEach((n) => body.append(nodeLine(s, n)));
      const last = s.tree[current];
      if (last.leaf !== null) {
        const target = last.samples.length ? last.samples.map((k) => el("a", { href: sessionHref(s.id, `/sample/${k}`), text: `sample ${k}` })) : ["no sample"];
        const leaf = el("div", { class: "leaf" }, `⤷ leaf ${last.leaf} → `);
        target.forEach((t, i) => { if (i) leaf.append(", "); leaf.append(t); });
        body.append(leaf);
      }
      kids(current).forEach((c) => body.append(item(c, depth + 1)));
      details.append(body);
      return details;
    }
    const box = el("div", { class: "tree", id: "tree" });
    kids(null).forEach((c) => box.append(item(c, 1)));
    return box;
  }

  function provenanceCells(r) {
    if (r.call_kind === undefined) return [el("td"), el("td"), el("td")];
    // A call that spans two weight versions stands out, as does a turn whose routed experts are incomplete.
    const mixed = new Set(r.versions).size > 1;
    const experts = r.routed_experts || "—";
    return [
      el("td", { class: mixed ? "tag-realign" : "", text: r.versions.join(" → ") || "—" }),
      el("td", { text: r.call_kind }),
      el("td", { class: experts.startsWith("missing") ? "tag-fork" : "", text: experts }),
    ];
  }

  function turnsTable(s) {
    const t = el("table", { class: "data turns" });
    // "history": how tito serve --history canonical built the prompt; only such logs carry it.
    const histories = s.turns.some((r) => r.history !== undefined);
    // "versions", "call_kind", "routed_experts": only logs that recorded provenance carry them.
    const provenance = s.turns.some((r) => r.call_kind !== undefined);
    const heads = ["seq", "#", "finish", "prompt", "output", "lp", "decision", "trained in", ...(histories ? ["history"] : []),
      ...(provenance ? ["versions", "kind", "experts"] : [])];
    t.append(el("thead", {}, el("tr", {}, ...heads.map((h) => el("th", { text: h })))));
    const body = el("tbody");
    for (const r of s.turns) {
      const d = r.decision;
      const decision = el("td", { class: "decision" + (d && d.kind === "fork" ? " tag-fork" : d && d.kind === "realign" ? " tag-realign" : "") });
      if (d && (d.kind === "fork" || d.kind === "realign")) decision.append(el("a", { href: sessionHref(s.id, `/drift/${r.seq}`), class: "tag-" + d.kind, text: r.text }));
      else decision.textContent = r.text;
      const trained = el("td");
      if (r.trained_in.length) r.trained_in.forEach((k, i) => { if (i) trained.append(", "); trained.append(el("a", { href: sessionHref(s.id, `/sample/${k}`), text: `sample ${k}` })); });
      else trained.textContent = r.status === "packed" ? "nowhere" : "—";
      body.append(el("tr", {},
        el("td", { class: "num", text: String(r.seq) }), el("td", { class: "num", text: r.turn_index === null ? "" : String(r.turn_index) }),
        el("td", { text: r.finish_reason || "" }), el("td", { class: "num", text: fmt(r.prompt_tokens) }), el("td", { class: "num", text: fmt(r.output_tokens) }),
        el("td", { text: r.logprobs === null ? "" : r.logprobs ? "yes" : "no" }), decision, trained,
        ...(histories ? [el("td", { text: r.history || "" })] : []),
        ...(provenance ? provenanceCells(r) : [])));
    }
    t.append(body);
    return t;
  }

  const handles = new Map();
  function sampleSection(s, sample) {
    const marks = new Set(s.drift.filter((d) => d.sample === sample.index).map((d) => d.index));
    const details = el("details", { class: "sample", id: `sample-${sample.index}`, "data-trained": String(sample.trained_tokens), "data-tokens": String(sample.tokens) });
    details.append(el("summary", {},
      el("b", { text: `sample ${sample.index}` }),
      ` leaf ${sample.leaf} segment ${sample.segment} · reward ${sample.reward}`,
      sample.fork_label ? el("span", { class: "tag-fork", text: ` · starts at a fork (${sample.fork_label})` }) : null,
      el("span", { class: "counts", text: `${fmt(sample.tokens)} tokens = first prompt ${fmt(sample.first_prompt_length)} + response ${fmt(sample.response_length)} (` }),
      el("span", { class: "counts trained-count", text: fmt(sample.trained_tokens) }),
      el("span", { class: "counts", text: ` trained) · turns ${sample.turn_ranges} · trained ${sample.trained_ranges}` })));
    const body = el("div", { class: "body" });
    details.append(body);
    details.addEventListener("toggle", () => {
      if (details.open && !handles.has(details)) {
        const box = el("div", { class: "tokens" });
        body.append(box);
        handles.set(details, sampleTokens(sample, box, marks));
      }
    });
    return details;
  }

  function legend() {
    const l = el("div", { class: "legend tokens" });
    for (const [cls, text] of [["fp", "prompt"], ["tr", "trained (loss 1)"], ["cx", "masked output (loss 0)"], ["ra", "realigned prompt"], ["sp", "special token"], ["dv", "first difference"]])
      l.append(el("span", { class: "t " + cls, text }));
    return l;
  }

  let current = null;
  function showSession(sid) {
    const s = DATA.sessions[sid];
    if (!s) { sessionPage.replaceChildren(el("p", { class: "err", text: `no session ${sid} in this page` }), el("a", { href: "#/", text: "← all sessions" })); return; }
    if (current === sid) return;
    current = sid;
    handles.clear();
    const parts = [header(s)];
    if (s.rejected) {
      parts.push(el("p", { class: "err", text: `rejected: ${s.rejected.reason}` }), el("p", { class: "facts", text: s.rejected.where }));
    } else {
      parts.push(el("h2", { text: `Drift points (${s.drift.length})` }));
      if (!s.drift.length) parts.push(el("p", { class: "facts", text: "no fork or realign: every prompt extended the tokens held for its path" }));
      s.drift.forEach((d, i) => parts.push(driftBlock(s, d, i)));
      parts.push(el("h2", { text: "Routing tree" }),
        el("div", {}, el("button", { text: "expand all", onclick: () => document.querySelectorAll("#tree details").forEach((d) => (d.open = true)) }), " ",
          el("button", { text: "collapse all", onclick: () => document.querySelectorAll("#tree details").forEach((d) => (d.open = false)) })),
        tree(s));
      parts.push(el("h2", { text: "Turns" }), turnsTable(s), el("p", { class: "facts", text: DATA.decision_legend }));
      parts.push(el("h2", { text: `Samples (${s.samples.length})` }), legend());
      if (!s.samples.length) parts.push(el("p", { class: "warn", text: s.notes.join(" · ") || "no samples" }));
      s.samples.forEach((sample) => parts.push(sampleSection(s, sample)));
    }
    sessionPage.replaceChildren(...parts);
  }

  function route() {
    const m = location.hash.match(/^#\/s\/([^/]+)(?:\/(sample|drift)\/(\d+)(?:\/(\d+))?)?$/);
    if (!m) {
      corpusPage.hidden = false;
      sessionPage.hidden = true;
      return;
    }
    const sid = decodeURIComponent(m[1]);
    corpusPage.hidden = true;
    sessionPage.hidden = false;
    showSession(sid);
    if (m[2] === "sample") {
      const details = document.getElementById(`sample-${m[3]}`);
      if (!details) return;
      details.open = true;
      details.dispatchEvent(new Event("toggle"));
      const handle = handles.get(details);
      if (m[4] !== undefined && handle) handle.jump(Number(m[4]));
      else details.scrollIntoView();
    } else if (m[2] === "drift") {
      const box = document.getElementById(`drift-${m[3]}`);
      if (!box) return;
      document.querySelectorAll(".drift.target").forEach((b) => b.classList.remove("target"));
      box.classList.add("target");
      box.scrollIntoView({ block: "center" });
    } else {
      window.scrollTo(0, 0);
    }
  }
  window.addEventListener("hashchange", route);
  route();
  window.titoView = { ready: true, handles };
})();
