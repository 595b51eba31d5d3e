// specsuite report: draws a case page's charts (uPlot) and fills the long tables of case and run pages from
// the page's embedded JSON. Every text from the data goes in through textContent (never innerHTML), and
// every link is one the generator computed from its own safe file names.
"use strict";

(function () {
  const BAD = new Set(["failed", "drifted", "error", "interrupted"]);
  const COLOR = { value: "#2f6fdd", floor: "#777", band: "rgba(47, 111, 221, 0.18)", bad: "#cf222e",
                  change: "#e16f00", base: "#9aa4b5", config: "#7a3fb0" };
  const RUNS_SHOWN = 200; // the runs table shows the newest ones first; a button shows the rest
  const charts = (window.specsuiteCharts = {}); // each drawn chart by its figure's id (for a look from devtools)

  function el(tag, props, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined) continue;
      if (k === "text") node.textContent = String(v);
      else if (k === "className") node.className = v;
      else node.setAttribute(k, String(v));
    }
    for (const kid of kids) {
      if (kid !== null && kid !== undefined) node.append(kid);
    }
    return node;
  }
  const num = (v, digits = 4) => (v === null || v === undefined || !isFinite(v) ? "–" : Number(v).toFixed(digits));
  const pct = (v) => (v === null || v === undefined ? "–" : (v >= 0 ? "+" : "") + (v * 100).toFixed(1) + " %");
  // a commit cut to 7 hex digits; a build (b9246) or a tree's content hash (tree-…) whole (llamacpp.identity)
  const short = (sha) => { const s = String(sha || ""); return /^[0-9a-f]{7,40}$/.test(s) ? s.slice(0, 7) : s; };
  const when = (iso) => String(iso || "").slice(0, 16).replace("T", " ");
  const badge = (kind, words) => el("span", { className: "badge " + kind, text: words, title: words });
  const cell = (text, className) => el("td", { className, text });
  const link = (href, text) => el("a", { href, text });

  function data() {
    const node = document.getElementById("site-data");
    return node ? JSON.parse(node.textContent) : null;
  }

  // --- a case page ------------------------------------------------------------------------------------

  function xAxis(d) {
    return {
      space: 70,
      incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000],
      values: (u, splits) => splits.map((v) => (Number.isInteger(v) && d.commit[v] ? short(d.commit[v]) : "")),
    };
  }

  // events on a series, by kind: the line, its dash and the span's shade; a configuration change (a changed
  // default or build option, on every chart of the case) is a dotted line
  const EVENTS = {
    change: { line: COLOR.change, fill: "rgba(225, 111, 0, 0.13)", dash: [6, 4] },
    config: { line: COLOR.config, fill: "rgba(122, 63, 176, 0.10)", dash: [2, 3] },
  };
  const LABEL_ROWS = 3; // label rows under a chart's top edge; a label that fits none is left to the table

  function drawEvents(u, d, key) {
    // each event of this chart: a dashed line between the last run before and the first after a single
    // change, or a shaded span between the first and the last of adjacent ones; its label on the first row
    // where it overprints no earlier label
    const ctx = u.ctx, px = devicePixelRatio, top = u.bbox.top, bottom = u.bbox.top + u.bbox.height;
    const left = u.bbox.left, right = u.bbox.left + u.bbox.width, rows = [];
    for (const e of d.events || []) {
      if (e.metric !== null && e.metric !== key) continue;
      const style = EVENTS[e.kind] || EVENTS.change;
      const x0 = u.valToPos(e.first - 0.5, "x", true), x1 = u.valToPos(e.last - 0.5, "x", true);
      if (x1 < left || x0 > right) continue; // zoomed away
      if (x1 > x0) {
        ctx.fillStyle = style.fill;
        ctx.fillRect(Math.max(x0, left), top, Math.min(x1, right) - Math.max(x0, left), bottom - top);
      }
      ctx.strokeStyle = style.line;
      ctx.setLineDash(style.dash.map((v) => v * px));
      for (const x of x1 > x0 ? [x0, x1] : [x0]) {
        if (x < left || x > right) continue;
        ctx.beginPath();
        ctx.moveTo(x, top);
        ctx.lineTo(x, bottom);
        ctx.stroke();
      }
      const w = ctx.measureText(e.label).width, pad = 4 * px;
      const lx = Math.max(left, x0 + pad + w <= right ? x0 + pad : x0 - pad - w);
      const row = [...Array(LABEL_ROWS).keys()].find((r) =>
        (rows[r] || []).every(([a, b]) => lx + w + pad <= a || lx >= b + pad));
      if (row === undefined) continue;
      (rows[row] = rows[row] || []).push([lx, lx + w]);
      const y = top + (12 + 13 * row) * px;
      ctx.fillStyle = "rgba(255, 255, 255, 0.85)"; // legible over the lines it crosses
      ctx.fillRect(lx - 2 * px, y - 10 * px, w + 4 * px, 13 * px);
      ctx.fillStyle = style.line;
      ctx.fillText(e.label, lx, y);
    }
  }

  function drawMarks(d, key, vals, floor) {
    // floors: a dashed segment across each run's slot (a recalibrated floor steps); events (change
    // points) of this metric; failing runs without a value of this metric: a red triangle on the axis
    return (u) => {
      const ctx = u.ctx, bottom = u.bbox.top + u.bbox.height, px = devicePixelRatio;
      ctx.save();
      ctx.lineWidth = 1.5 * px;
      ctx.setLineDash([6 * px, 4 * px]);
      ctx.strokeStyle = COLOR.floor;
      (floor || []).forEach((f, i) => {
        if (f === null) return;
        const y = u.valToPos(f, "y", true);
        ctx.beginPath();
        ctx.moveTo(u.valToPos(i - 0.5, "x", true), y);
        ctx.lineTo(u.valToPos(i + 0.5, "x", true), y);
        ctx.stroke();
      });
      ctx.lineWidth = 2 * px;
      ctx.font = 11 * px + "px system-ui, sans-serif";
      ctx.textAlign = "left"; // uPlot leaves the y axis's alignment (right) set
      ctx.textBaseline = "alphabetic";
      drawEvents(u, d, key);
      ctx.setLineDash([]);
      ctx.fillStyle = COLOR.bad;
      vals.forEach((v, i) => {
        if (v !== null || !BAD.has(d.kind[i])) return;
        const x = u.valToPos(i, "x", true), s = 5 * px;
        ctx.beginPath();
        ctx.moveTo(x, bottom - 2 * s);
        ctx.lineTo(x - s, bottom);
        ctx.lineTo(x + s, bottom);
        ctx.fill();
      });
      ctx.restore();
    };
  }

  function hoverText(d, label, vals) {
    return (i) =>
      i === null || i === undefined
        ? ""
        : `${short(d.commit[i])} · run ${d.run[i]} · ${d.status[i]} · ${label} ${num(vals[i])}` +
          (d.speed_lo[i] !== null && label === "speedup" ? ` (rounds ${num(d.speed_lo[i], 3)} to ${num(d.speed_hi[i], 3)})` : "");
  }

  // A y axis that fits what it shows: a rate (a key ending in _rate: accepted over drafted) runs 0 to 1;
  // any other metric spans its values, floors and rounds, at least MIN_SPAN of their size around their
  // middle (a constant series is a flat line mid-chart, not the 0 to 2x uPlot makes of it), never below 0
  const MIN_SPAN = 0.1;
  function yRange(key, values) {
    if (/_rate$/.test(key)) return [0, 1];
    const got = values.filter((v) => v !== null && v !== undefined && isFinite(v));
    if (!got.length) return [0, 1];
    const lo = Math.min(...got), hi = Math.max(...got);
    const span = Math.max(hi - lo, MIN_SPAN * Math.max(Math.abs(lo), Math.abs(hi))) || 1;
    const mid = (lo + hi) / 2, half = span * 0.6; // a tenth of the span free above and below
    return [Math.max(0, mid - half), mid + half];
  }

  function metricChart(d, m, fig) {
    const n = d.run.length, vals = d.values[m.key];
    const xs = Array.from({ length: n }, (_, i) => i);
    const series = [{ label: "commit", value: (u, v) => (v === null ? "–" : short(d.commit[v])) }];
    const cols = [xs];
    const bands = [];
    series.push({ label: m.label, stroke: COLOR.value, width: 1.5, points: { show: n <= 150, size: 5 } });
    cols.push(vals);
    if (m.key === "speedup" && d.speed_lo.some((v) => v !== null)) {
      const lo = cols.length;
      series.push({ label: "lowest round", stroke: COLOR.band, width: 1, points: { show: false } });
      series.push({ label: "highest round", stroke: COLOR.band, width: 1, points: { show: false } });
      cols.push(d.speed_lo, d.speed_hi);
      bands.push({ series: [lo + 1, lo], fill: COLOR.band });
    }
    const floor = d.floors[m.key];
    if (floor && floor.some((v) => v !== null)) {
      // drawn by drawMarks; the series puts floors in the legend and in the y range
      series.push({ label: "floor", stroke: COLOR.floor, dash: [6, 4], width: 1, points: { show: false },
                    paths: () => null });
      cols.push(floor);
    }
    series.push({ label: "failing run", stroke: COLOR.bad, fill: COLOR.bad, width: 0, paths: () => null,
                  points: { show: true, size: 9, stroke: COLOR.bad, fill: COLOR.bad } });
    cols.push(vals.map((v, i) => (BAD.has(d.kind[i]) ? v : null)));
    return plot(fig, {
      series, bands,
      scales: { x: { time: false, range: () => [-0.5, Math.max(n - 0.5, 0.5)] },
                y: { range: yRange(m.key, cols.slice(1).flat()) } },
      axes: [xAxis(d), { size: 56 }],
      hooks: { draw: [drawMarks(d, m.key, vals, floor)] },
    }, cols, hoverText(d, m.label, vals), (i) => "../../runs/" + d.slug[i] + ".html");
  }

  function plot(fig, opts, cols, hover, href) {
    const target = fig.querySelector(".plot"), out = fig.querySelector(".hover");
    const width = Math.max(320, target.clientWidth || fig.clientWidth || 600);
    const u = new uPlot({
      width, height: 230,
      cursor: { sync: { key: "case" }, points: { size: 7 } },
      legend: { show: false }, // the line under the chart says what the cursor is on
      hooks: {},
      ...opts,
    }, cols, target);
    charts[fig.id] = u;
    const idle = out.textContent;
    u.over.addEventListener("mousemove", () => { out.textContent = hover(u.cursor.idx) || idle; });
    u.over.addEventListener("mouseleave", () => { out.textContent = idle; });
    if (href) {
      u.over.addEventListener("click", () => {
        if (u.cursor.idx !== null && u.cursor.idx !== undefined) window.location.href = href(u.cursor.idx);
      });
    }
    return u;
  }

  function perPositionChart(d, fig) {
    const pp = d.per_position;
    if (!pp.latest) {
      fig.classList.add("nodata");
      fig.querySelector(".plot").textContent = pp.note;
      return null;
    }
    const rates = [pp.latest.rates, pp.baseline ? pp.baseline.rates : []];
    const k = Math.max(rates[0].length, rates[1].length);
    const xs = Array.from({ length: k }, (_, i) => i + 1);
    const pad = (r) => xs.map((_, i) => (r[i] === undefined ? null : r[i]));
    const series = [{ label: "position" },
      { label: "latest " + short(pp.latest.commit), fill: COLOR.value, stroke: COLOR.value,
        paths: uPlot.paths.bars({ size: [0.35, 60], align: -1 }), points: { show: false } }];
    const cols = [xs, pad(rates[0])];
    if (pp.baseline) {
      series.push({ label: "baseline " + short(pp.baseline.commit), fill: COLOR.base, stroke: COLOR.base,
                    paths: uPlot.paths.bars({ size: [0.35, 60], align: 1 }), points: { show: false } });
      cols.push(pad(rates[1]));
    }
    const note = fig.querySelector("figcaption");
    note.append(el("span", { className: "why", text: " · baseline: " + (pp.baseline ? pp.note : pp.note || "none") }));
    const hover = (i) => (i === null || i === undefined ? "" :
      `position ${i + 1}: latest ${num(cols[1][i])}` + (pp.baseline ? `, baseline ${num(cols[2][i])}` : ""));
    return plot(fig, {
      series,
      scales: { x: { time: false, range: () => [0.4, k + 0.6] }, y: { range: [0, 1] } },
      axes: [{ incrs: [1, 2, 5, 10], values: (u, s) => s.map((v) => (Number.isInteger(v) ? String(v) : "")) }, { size: 56 }],
      cursor: { sync: { key: "per-position" }, points: { show: false } },
    }, cols, hover, null);
  }

  function npChart(d, fig) {
    // a sweep's members: aggregate speedup by np, the latest run beside its baseline, and 1.0 (no gain)
    const b = d.by_np;
    if (!fig || !b) return null;
    const nps = [...new Set([...b.latest.nps, ...(b.baseline ? b.baseline.nps : [])])].sort((x, y) => x - y);
    const xs = nps.map((_, i) => i + 1);
    const at = (run) => nps.map((n) => { const i = run.nps.indexOf(n); return i < 0 ? null : run.speedups[i]; });
    const series = [{ label: "np" },
      { label: "latest " + short(b.latest.commit), stroke: COLOR.value, width: 2, points: { size: 7 } }];
    const cols = [xs, at(b.latest)];
    if (b.baseline) {
      series.push({ label: "baseline " + short(b.baseline.commit), stroke: COLOR.base, width: 2, points: { size: 7 } });
      cols.push(at(b.baseline));
    }
    const one = (u) => {
      const ctx = u.ctx, y = u.valToPos(1, "y", true), px = devicePixelRatio;
      ctx.save();
      ctx.strokeStyle = COLOR.floor;
      ctx.lineWidth = px;
      ctx.setLineDash([6 * px, 4 * px]);
      ctx.beginPath();
      ctx.moveTo(u.bbox.left, y);
      ctx.lineTo(u.bbox.left + u.bbox.width, y);
      ctx.stroke();
      ctx.restore();
    };
    const hover = (i) => (i === null || i === undefined ? "" :
      `np ${nps[i]}: latest ${num(cols[1][i], 3)}x` + (b.baseline ? `, baseline ${num(cols[2][i], 3)}x` : ""));
    const ys = cols.slice(1).flat().filter((v) => v !== null);
    return plot(fig, {
      series,
      scales: { x: { time: false, range: () => [0.6, nps.length + 0.4] },
                y: { range: () => [0, Math.max(1.2, ...ys) * 1.1] } },
      axes: [{ incrs: [1], values: (u, s) => s.map((v) => (Number.isInteger(v) && nps[v - 1] ? "np " + nps[v - 1] : "")) },
             { size: 56 }],
      hooks: { draw: [one] },
      cursor: { sync: { key: "by-np" }, points: { size: 7 } },
    }, cols, hover, null);
  }

  function runsTable(d, all) {
    const tbody = document.querySelector("#runs tbody");
    tbody.replaceChildren();
    const n = d.run.length, shown = all ? n : Math.min(n, RUNS_SHOWN);
    for (let i = n - 1; i >= n - shown; i--) {
      const status = el("td", {}, badge(d.kind[i], d.status[i]));
      if (d.message[i] && d.kind[i] !== "passed") status.append(el("div", { className: "why", text: d.message[i] }));
      const tr = el("tr", { className: "status-" + d.kind[i] },
        el("td", {}, el("code", { text: short(d.commit[i]) })), cell(when(d.started[i])), status);
      for (const m of d.metrics) tr.append(cell(num(d.values[m.key][i], m.digits), "num"));
      tr.append(el("td", {}, link("../../runs/" + d.slug[i] + ".html", d.run[i])));
      tbody.append(tr);
    }
    if (shown < n) {
      const more = el("button", { className: "more", type: "button", text: `show all ${n} runs` });
      more.addEventListener("click", () => { more.remove(); runsTable(d, true); });
      tbody.parentElement.after(more);
    }
  }

  function casePage(d) {
    for (const m of d.metrics) metricChart(d, m, document.getElementById("chart-" + m.key));
    perPositionChart(d, document.getElementById("chart-per-position"));
    npChart(d, document.getElementById("chart-by-np"));
    runsTable(d, false);
  }

  // --- a run page -------------------------------------------------------------------------------------

  const finite = (v) => (typeof v === "number" && isFinite(v) ? v : null);
  // as the history lists a record's metrics: pos0 with its schema-1 fallback, speedup as the median of
  // the A-B-B-A rounds where there were rounds
  const pos0 = (r) => finite(r.pos0_rate) ?? finite((r.per_position_rate || [])[0]);
  const speedup = (r) => finite(r.speed && r.speed.speedup_median) ?? finite(r.speedup);
  const shellWord = (w) => (/^[\w@%+=:,./-]+$/.test(w) ? w : "'" + String(w).replaceAll("'", "'\"'\"'") + "'");

  function withFloor(v, floor, digits) {
    return num(v, digits) + (finite(floor) !== null && finite(v) !== null ? ` (≥ ${num(floor, digits)})` : "");
  }

  function summaryRow(c) {
    const r = c.record, f = r.floors || {};
    return el("tr", { className: "status-" + c.kind },
      el("td", {}, link(c.case_href, r.name)), el("td", {}, badge(c.kind, c.status)),
      el("td", { className: "reason", title: r.message || null },
        el("div", { text: r.message ? r.message.split("\n")[0] : "" })),
      cell(withFloor(finite(r.accept_rate), f.min_accept_rate, 4), "num"),
      cell(withFloor(finite(r.accept_len), f.min_accept_len, 4), "num"),
      cell(withFloor(speedup(r), f.min_speedup, 3) + (r.implausible_speed ? " implausible" : ""), "num"),
      cell(blockCost(r), "num"),
      cell(withFloor(finite(r.identical_fraction), f.min_identical_fraction, 2), "num"));
  }

  // per-block overhead as summary.md shows it: ms per verification block (x plain decode token, tokens)
  function blockCost(r) {
    if (finite(r.block_ms) === null || finite(r.block_ratio) === null) return "–";
    const tokens = finite(r.tokens_per_block) === null ? "" : `, ${num(r.tokens_per_block, 2)}`;
    return `${num(r.block_ms, 3)} (${num(r.block_ratio, 2)}x${tokens})`;
  }

  function facts(pairs) {
    const dl = el("dl", { className: "facts" });
    for (const [k, v] of pairs) {
      if (v === null || v === undefined || v === "" || (Array.isArray(v) && !v.length)) continue;
      dl.append(el("dt", { text: k }), el("dd", { text: Array.isArray(v) ? v.join(", ") : String(v) }));
    }
    return dl;
  }

  // memory and prefill, the speculation-off server's in parentheses (records before they were measured: none)
  function resources(r) {
    const m = r.memory || {}, p = r.prefill || {};
    const both = (a, b, digits) => (finite(a) === null ? null : `${num(a, digits)} (${num(finite(b), digits)})`);
    const growth = finite(m.growth_mib) === null ? null : `${num(m.growth_mib, 2)} MiB over ${m.growth_requests} requests`;
    return [
      ["peak resident MiB (speculation off)", both(m.peak_rss_mib, m.base_peak_rss_mib, 1)],
      ["memory growth after the warm-up", growth],
      ["peak GPU MiB (speculation off)", both(m.gpu_peak_mib, m.base_gpu_peak_mib, 0)],
      ["time to first token ms (speculation off)", both(p.ttft_ms, p.base_ttft_ms, 2)],
      ["prompt t/s (speculation off)", both(p.prompt_tps, p.base_prompt_tps, 1)],
    ];
  }

  function caseDetails(c) {
    const r = c.record, speed = r.speed || {};
    const box = el("details", { className: "case status-" + c.kind },
      el("summary", {}, r.name + " ", badge(c.kind, c.status)));
    if (BAD.has(c.kind)) box.open = true;
    if (r.message) box.append(el("pre", { className: "command", text: r.message }));
    const counts = [r.drafted, r.accepted, r.drafts].map((v) => (v === null || v === undefined ? "–" : v));
    box.append(facts([
      ["method", r.method], ["spec type", r.spec_type], ["n_max", r.n_max], ["target", r.target], ["draft", r.draft],
      ["drafted / accepted / drafts", counts.join(" / ")],
      ["accept rate", num(finite(r.accept_rate))], ["accept length", num(finite(r.accept_len))],
      ["position-0 rate", num(pos0(r))], ["accepted by position", r.per_position],
      ["rate by position", (r.per_position_rate || []).map((v) => num(v))],
      ["decode t/s (speculation off)", `${num(finite(r.decode_tps), 2)} (${num(finite(r.baseline_decode_tps), 2)})`],
      ["speedup", num(speedup(r), 3)], ["A-B-B-A round speedups", (speed.speedups || []).map((v) => num(v, 3))],
      ["ms per verification block (x plain decode token, tokens per block)", blockCost(r)],
      ["plain decode ms per token (speculation off)", num(finite(r.token_ms), 4)],
      ["identical tokens", num(finite(r.identical_fraction), 2)],
      ["wall", finite(r.wall_s) === null ? null : num(r.wall_s, 1) + " s"],
      ...resources(r),
    ]));
    if (r.baseline) {
      const p = el("p", {}, "history baseline: commit ", el("code", { text: short(r.baseline.commit) }), " run ");
      p.append(c.baseline_slug ? link(c.baseline_slug + ".html", r.baseline.run_id || "?") : (r.baseline.run_id || "?"));
      if ((r.baseline.regressions || []).length) p.append(" · regressed: " + r.baseline.regressions.join(", "));
      box.append(p);
      const changed = [...(r.baseline.config_changes || []), ...((r.drift || {}).config_changes || [])];
      if (changed.length) box.append(el("p", { className: "why", text: "configuration changed: " + changed.join("; ") }));
    }
    box.append(el("p", {}, "server command", c.log_href ? " · " : "", c.log_href ? link(c.log_href, "log") : ""));
    const command = (r.command || []).map(shellWord).join(" ");
    box.append(el("pre", { className: "command", text: command || "(none recorded)" }));
    for (const w of r.warnings || []) box.append(el("p", { className: "why", text: "warning: " + w }));
    return box;
  }

  // a run page's cases come failures first (pages.PARTS): a heading row per part; the cases not in this
  // build are counted in one row whose names open on a click, and have no counters to detail
  const ABSENT = "not in this build";

  function partRow(part, n) {
    return el("tr", { className: "part" }, el("th", { colspan: 8, text: `${part} (${n})` }));
  }

  function absentRow(cases) {
    const names = el("details", {}, el("summary", { text: `${cases.length} case(s) not in this build ` +
      "(the build predates them; not failures)" }));
    const list = el("ul", { className: "absent" });
    for (const c of cases) {
      const why = c.record.reason || (c.record.message || "").split("\n")[0];
      list.append(el("li", {}, link(c.case_href, c.record.name), why ? " " : null,
        why ? el("span", { className: "why-inline", text: "(" + why + ")" }) : null));
    }
    names.append(list);
    return el("tr", { className: "part absent" }, el("td", { colspan: 8 }, names));
  }

  function runPage(d) {
    const tbody = document.querySelector("#summary-cases tbody");
    const box = document.getElementById("cases");
    const parts = new Map();
    for (const c of d.cases) {
      if (!parts.has(c.part)) parts.set(c.part, []);
      parts.get(c.part).push(c);
    }
    for (const [part, cases] of parts) {
      if (part === ABSENT) {
        tbody.append(absentRow(cases));
        continue;
      }
      tbody.append(partRow(part, cases.length));
      for (const c of cases) {
        tbody.append(summaryRow(c));
        box.append(caseDetails(c));
      }
    }
    const models = document.querySelector("#models tbody");
    for (const name of Object.keys(d.models).sort()) {
      const m = d.models[name] || {};
      models.append(el("tr", {}, cell(name), el("td", {}, el("code", { text: m.sha256 || "?" })),
        cell(m.size === null || m.size === undefined ? "?" : m.size, "num")));
    }
    const servers = document.getElementById("baselines");
    for (const b of d.servers) {
      const head = el("summary", {}, "speculation-off server for " + b.key);
      if (b.log_href) head.append(" · ", link(b.log_href, "log"));
      servers.append(el("details", {}, head,
        el("pre", { className: "command", text: (b.command || []).map(shellWord).join(" ") })));
    }
  }

  const d = data();
  const page = document.body.dataset.page;
  if (page === "case") casePage(d);
  else if (page === "run") runPage(d);
  document.body.dataset.ready = "1";
  performance.mark("specsuite-drawn");
})();
