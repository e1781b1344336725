// The dead-letter flow view: which queues dead-letter into which exchanges and on into which
// queues (from queues' arguments / effective policy definitions and the bindings), with how
// many messages died per reason and how fast (rates from successive samples of the queues'
// dead-letter counters).

import { deadLetterCounts, deadLetterTarget, fmtNum, fmtRate, get, h, link, mount, section, seg, table } from "./lib.js";

const SVG = "http://www.w3.org/2000/svg";
const samples = new Map(); // "vhost\0queue\0reason" -> {t, n, rate}

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined) el.setAttribute(k, v);
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

/** Updates the per-reason rates of `q` from its counters; returns [{reason, count, rate}]. */
function reasonsOf(q, now) {
  const out = [];
  for (const [reason, n] of Object.entries(deadLetterCounts(q))) {
    const key = `${q.vhost}\u0000${q.name}\u0000${reason}`;
    const prev = samples.get(key);
    let r = prev?.rate;
    if (prev && now > prev.t) r = Math.max(0, (n - prev.n) / ((now - prev.t) / 1000));
    samples.set(key, { t: now, n, rate: r });
    out.push({ reason, count: n, rate: r });
  }
  return out;
}

/** Whether a binding of an exchange of `type` with `bindingKey` takes a dead letter with `key`
 * (`key` null: the message's own routing keys, unknown here). */
function bindingTakes(type, bindingKey, key) {
  if (type === "fanout" || type === "headers" || key === null) return true;
  if (type === "topic") return topicMatch(bindingKey.split("."), key.split("."));
  return bindingKey === key;
}

/** AMQP topic matching: `*` is one word, `#` zero or more. */
function topicMatch(pat, words) {
  if (!pat.length) return !words.length;
  const [p, ...rest] = pat;
  if (p === "#") return words.some((_, i) => topicMatch(rest, words.slice(i))) || topicMatch(rest, []);
  if (!words.length) return false;
  return (p === "*" || p === words[0]) && topicMatch(rest, words.slice(1));
}

/** The graph's nodes and edges from queues, exchanges and bindings. */
export function buildFlow(queues, exchanges, bindings, now) {
  const exType = new Map(exchanges.map((x) => [`${x.vhost}\u0000${x.name}`, x.type]));
  const sources = [];
  const edges = [];
  const dlxs = new Map();
  const targets = new Map();
  for (const q of queues) {
    const t = deadLetterTarget(q);
    if (!t) continue;
    const xk = `${q.vhost}\u0000${t.exchange}`;
    const reasons = reasonsOf(q, now);
    sources.push({ q, reasons, dlx: xk });
    if (!dlxs.has(xk)) dlxs.set(xk, { vhost: q.vhost, name: t.exchange, type: exType.get(xk), exists: exType.has(xk) || t.exchange === "" });
    edges.push({ kind: "dl", from: `q:${q.vhost}\u0000${q.name}`, to: `x:${xk}`, q, key: t.routingKey, reasons });
  }
  for (const [xk, x] of dlxs) {
    if (x.name === "") {
      // The default exchange routes by queue name: the dead-letter routing key names the target.
      for (const e of edges.filter((e) => e.to === `x:${xk}`)) {
        const name = e.key ?? null;
        if (name === null) continue;
        const tk = `${x.vhost}\u0000${name}`;
        targets.set(tk, { vhost: x.vhost, name });
        edges.push({ kind: "bind", from: `x:${xk}`, to: `t:${tk}`, key: name, certain: true });
      }
      continue;
    }
    for (const b of bindings) {
      if (b.vhost !== x.vhost || b.source !== x.name || b.destination_type !== "queue") continue;
      const keys = edges.filter((e) => e.to === `x:${xk}`).map((e) => e.key ?? null);
      const takes = keys.some((k) => bindingTakes(x.type, b.routing_key, k));
      if (!takes) continue;
      const tk = `${b.vhost}\u0000${b.destination}`;
      targets.set(tk, { vhost: b.vhost, name: b.destination });
      const byKey = x.type !== "fanout" && x.type !== "headers";
      edges.push({ kind: "bind", from: `x:${xk}`, to: `t:${tk}`, key: byKey ? b.routing_key : null,
        certain: !byKey || keys.every((k) => k !== null) });
    }
  }
  return { sources, dlxs, targets, edges };
}

function draw(flow, queuesByKey) {
  const rowH = 76;
  const colW = 410; // node + room for the edge labels
  const nodeW = 200;
  const cols = [
    flow.sources.map((src) => ({ id: `q:${src.q.vhost}\u0000${src.q.name}`, cls: "queue", title: src.q.name,
      sub: `${fmtNum(src.q.messages_ready)} ready · ${src.q.vhost}`, href: `#/queue/${seg(src.q.vhost)}/${seg(src.q.name)}` })),
    [...flow.dlxs.entries()].map(([k, x]) => ({ id: `x:${k}`, cls: "exchange", title: x.name === "" ? "(AMQP default)" : x.name,
      sub: x.exists ? `exchange · ${x.type || "?"}` : "MISSING: dead letters dropped", href: `#/exchange/${seg(x.vhost)}/${seg(x.name || "amq.default")}` })),
    [...flow.targets.entries()].map(([k, t]) => {
      const q = queuesByKey.get(k);
      return { id: `t:${k}`, cls: "dlq", title: t.name, sub: q ? `${fmtNum(q.messages_ready)} ready · open DLQ` : "no such queue",
        href: `#/dlq/${seg(t.vhost)}/${seg(t.name)}` };
    }),
  ];
  const height = Math.max(1, ...cols.map((c) => c.length)) * rowH + 60;
  const width = 40 + colW * 2 + nodeW;
  const pos = new Map();
  cols.forEach((col, ci) => col.forEach((n, ri) => {
    const colH = col.length * rowH;
    pos.set(n.id, { x: 20 + ci * colW, y: 50 + (height - 50 - colH) / 2 + ri * rowH });
  }));
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, height, id: "flow-graph", role: "img", "aria-label": "dead-letter flow graph" });
  svg.append(s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto" },
    s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#9a93b8" }))));
  for (const e of flow.edges) {
    const a = pos.get(e.from);
    const b = pos.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + nodeW;
    const y1 = a.y + 22;
    const x2 = b.x;
    const y2 = b.y + 22;
    const mx = (x1 + x2) / 2;
    const hot = e.kind === "dl" && e.reasons.some((r) => r.rate > 0);
    svg.append(s("path", { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 2},${y2}`, class: hot ? "edge hot" : "edge",
      "marker-end": "url(#arrow)", "stroke-dasharray": e.kind === "bind" && !e.certain ? "5 4" : undefined }));
    // One line per reason that has dead-lettered anything: "rejected 3 (0.5/s)".
    const lines = e.kind === "dl"
      ? e.reasons.filter((r) => r.count > 0).map((r) => `${r.reason} ${fmtNum(r.count)}${r.rate ? ` · ${fmtRate(r.rate)}` : ""}`)
      : [];
    if (e.key) lines.push(`key ${e.key}`);
    lines.forEach((line, i) => svg.append(s("text", { x: mx, y: Math.min(y1, y2) - 6 - (lines.length - 1 - i) * 13,
      "text-anchor": "middle", class: "elabel" }, line)));
  }
  cols.flat().forEach((n) => {
    const p = pos.get(n.id);
    const g = s("a", { href: n.href, class: `node ${n.cls}` },
      s("rect", { x: p.x, y: p.y, width: nodeW, height: 44, rx: 8 }),
      s("text", { x: p.x + 10, y: p.y + 18 }, n.title.length > 28 ? n.title.slice(0, 27) + "…" : n.title),
      s("text", { x: p.x + 10, y: p.y + 34, class: "sub" }, n.sub));
    svg.append(g);
  });
  const heads = ["Queues that dead-letter", "Dead-letter exchanges", "Where dead letters land"];
  heads.forEach((t, i) => svg.append(s("text", { x: 20 + i * colW, y: 14, class: "elabel", fill: "#6b7385" }, t)));
  return svg;
}

export async function render(ctx) {
  const live = h("div", { class: "flow" });
  mount(ctx.main, h("h1", {}, "Dead-letter flow"),
    h("p", { class: "muted" }, "Where messages die, why and how fast: each queue with a dead-letter exchange (argument or policy), "
      + "the exchange, and the queues its bindings deliver to. Edge labels give dead-lettered counts per reason and the rate "
      + "since the last refresh (every 5 s); red edges are dead-lettering now. A dashed edge depends on the message's own routing key."),
    live);
  ctx.every(async () => {
    const [queues, exchanges, bindings] = await Promise.all([
      get("/api/queues"), get("/api/exchanges").catch(() => []), get("/api/bindings").catch(() => [])]);
    if (!ctx.current) return;
    const flow = buildFlow(queues, exchanges, bindings, Date.now());
    const byKey = new Map(queues.map((q) => [`${q.vhost}\u0000${q.name}`, q]));
    const rows = [];
    for (const src of flow.sources) {
      const dests = flow.edges.filter((e) => e.kind === "bind" && e.from === `x:${src.dlx}`).map((e) => e.to.slice(2).split("\u0000")[1]);
      const happened = src.reasons.filter((r) => r.count > 0);
      const reasons = happened.length ? happened : [{ reason: "none yet", count: 0 }];
      for (const r of reasons) rows.push({ src, r, dests, x: flow.dlxs.get(src.dlx) });
    }
    mount(live,
      section("Graph", flow.sources.length ? draw(flow, byKey)
        : h("p", { class: "empty" }, "No queue has a dead-letter exchange yet (set x-dead-letter-exchange or a dead-letter-exchange policy).")),
      section("Where messages die", table([
        { title: "Queue", get: (x) => link(`/queue/${seg(x.src.q.vhost)}/${seg(x.src.q.name)}`, x.src.q.name) },
        { title: "Vhost", get: (x) => x.src.q.vhost },
        { title: "Reason", get: (x) => h("span", { class: `badge reason-${x.r.reason}` }, x.r.reason) },
        { title: "Dead-lettered", class: "num", get: (x) => fmtNum(x.r.count) },
        { title: "Rate", class: "num", get: (x) => fmtRate(x.r.rate) },
        { title: "Via exchange", get: (x) => (x.x.name === "" ? "(AMQP default)" : x.x.name) + (x.x.exists ? "" : " (missing!)") },
        { title: "Routing key", get: (x) => deadLetterTarget(x.src.q).routingKey ?? "(original keys)" },
        { title: "Lands in", get: (x) => (x.dests.length ? x.dests.map((d) => link(`/dlq/${seg(x.src.q.vhost)}/${seg(d)}`, d)).flatMap((l, i) => (i ? [", ", l] : [l])) : h("span", { class: "error" }, "nowhere: dropped")) },
        { title: "Dropped (no DLX)", class: "num", get: (x) => fmtNum(x.src.q.dead_letters_dropped_no_dlx) },
      ], rows, { id: "flow-table", empty: "No dead-lettering queues." })));
  });
}
