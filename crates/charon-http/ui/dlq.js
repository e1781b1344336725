// The dead-letter queue browser: peeks messages without consuming them
// (`GET /api/queues/{vhost}/{name}/messages?offset=&count=`, Charon's extension), shows each
// message's x-death history, filters by reason and original queue, and replays a selection to
// its original exchange and routing keys or moves it elsewhere — inside the broker, with
// `POST .../messages/replay` (properties and headers unchanged) — discards it
// (`POST .../messages/remove`), or purges the queue.

import {
  act, api, deadLetterTarget, field, fmtNum, fmtTime, get, h, kv, link, mount, section, seg, table,
  toast,
} from "./lib.js";

const exName = (name) => (name === "" ? "(AMQP default)" : name);

/** What the UI needs to know of a message's dead-lettering, from its headers. */
export function deathInfo(m) {
  const headers = m.properties?.headers || {};
  const deaths = Array.isArray(headers["x-death"]) ? headers["x-death"] : [];
  const first = deaths.at(-1);
  const last = deaths[0];
  const origQueue = headers["x-first-death-queue"] ?? first?.queue;
  const origExchange = headers["x-first-death-exchange"] ?? first?.exchange;
  const entry = deaths.find((d) => d.queue === origQueue && d.exchange === origExchange) || first;
  const keys = entry?.["routing-keys"] || (m.routing_key !== undefined ? [m.routing_key] : []);
  return {
    deaths,
    dead: deaths.length > 0,
    reason: headers["x-last-death-reason"] ?? last?.reason,
    firstReason: headers["x-first-death-reason"] ?? first?.reason,
    origQueue,
    origExchange,
    keys,
    times: deaths.reduce((n, d) => n + (typeof d.count === "number" ? d.count : 1), 0),
    lastTime: last?.time,
  };
}

/** The message's id in its queue (for removal), as the peek output gives it. */
const msgId = (m) => m.id ?? m.msg_id ?? m.message_id_internal;

function payloadText(m) {
  if (m.payload_encoding === "base64") {
    return `(base64, ${fmtNum(m.payload_bytes)} bytes) ${m.payload}`;
  }
  return m.payload ?? "";
}

const reasonBadge = (r) => (r ? h("span", { class: `badge reason-${r}` }, r) : h("span", { class: "muted" }, "–"));

/** The x-death history of a message as a table (most recent first, as in the header). */
export function deathTable(deaths) {
  return table([
    { title: "Reason", get: (d) => reasonBadge(d.reason) },
    { title: "Queue", get: (d) => d.queue },
    { title: "Exchange", get: (d) => exName(d.exchange ?? "") },
    { title: "Routing keys", get: (d) => h("span", { class: "mono" }, (d["routing-keys"] || []).join(", ")) },
    { title: "Count", class: "num", get: (d) => fmtNum(d.count) },
    { title: "Time", get: (d) => fmtTime(d.time) },
    { title: "Other", get: (d) => {
      const rest = Object.fromEntries(Object.entries(d).filter(([k]) =>
        !["reason", "queue", "exchange", "routing-keys", "count", "time"].includes(k)));
      return Object.keys(rest).length ? kv(rest) : "";
    } },
  ], deaths, { empty: "Not dead-lettered (no x-death header)." });
}

function messageDetails(m, info, collapsible = false) {
  const props = { ...(m.properties || {}) };
  const headers = { ...(props.headers || {}) };
  delete props.headers;
  delete headers["x-death"];
  const content = h("div", { class: "deaths" },
      h("h2", {}, "x-death history"), deathTable(info.deaths),
      h("h2", {}, "Properties"), kv(props),
      h("h2", {}, "Other headers"), kv(headers),
      h("h2", {}, "Payload"), h("pre", { class: "payload" }, payloadText(m)));
  return collapsible ? h("details", {}, h("summary", {}, "Details"), content) : content;
}

/** Messages as returned by `/get` (no selection): for the queue page. */
export function messageList(msgs) {
  return h("div", {}, msgs.map((m, i) => {
    const info = deathInfo(m);
    return h("div", { class: "card message" },
      h("div", {}, h("strong", {}, `Message ${i + 1}`), " · routing key ", h("span", { class: "mono" }, m.routing_key),
        " · exchange ", exName(m.exchange ?? ""), m.redelivered ? " · redelivered" : "",
        info.dead ? [" · dead-lettered: ", reasonBadge(info.reason), ` from ${info.origQueue}`] : null),
      h("pre", { class: "payload" }, payloadText(m)),
      messageDetails(m, info, true));
  }));
}

// ---------------------------------------------------------------- the list of DLQs

async function dlqList(ctx) {
  const [queues, bindings] = await Promise.all([get("/api/queues"), get("/api/bindings").catch(() => [])]);
  const dlxs = new Set();
  const feeds = {};
  for (const q of queues) {
    const t = deadLetterTarget(q);
    if (t) {
      dlxs.add(`${q.vhost}\u0000${t.exchange}`);
      (feeds[`${q.vhost}\u0000${t.exchange}`] ||= []).push(q.name);
    }
  }
  const fedBy = {};
  for (const b of bindings) {
    const k = `${b.vhost}\u0000${b.source}`;
    if (b.destination_type === "queue" && dlxs.has(k)) {
      fedBy[`${b.vhost}\u0000${b.destination}`] ||= new Set();
      for (const s of feeds[k]) fedBy[`${b.vhost}\u0000${b.destination}`].add(s);
    }
  }
  const looksLikeDlq = (q) => /(dlq|dead|parking|\.dl$|-dl$|error|failed)/i.test(q.name);
  const dlqs = queues.filter((q) => fedBy[`${q.vhost}\u0000${q.name}`] || looksLikeDlq(q));
  const others = queues.filter((q) => !dlqs.includes(q));
  const col = [
    { title: "Vhost", get: (q) => q.vhost },
    { title: "Queue", get: (q) => link(`/dlq/${seg(q.vhost)}/${seg(q.name)}`, q.name) },
    { title: "Dead letters from", get: (q) => [...(fedBy[`${q.vhost}\u0000${q.name}`] || [])].join(", ") || "–" },
    { title: "Ready", class: "num", get: (q) => fmtNum(q.messages_ready) },
    { title: "", get: (q) => link(`/dlq/${seg(q.vhost)}/${seg(q.name)}`, "Open →") },
  ];
  mount(ctx.main, h("h1", {}, "Dead letters"),
    h("p", { class: "muted" }, "Queues that receive dead letters (bound to a queue's dead-letter exchange, or named like a DLQ). "
      + "Open one to see its messages without consuming them, why they died and where they came from, and to replay them."),
    section("Dead-letter queues", table(col, dlqs, { id: "dlq-table", empty: "No dead-letter queue found: no queue has a dead-letter exchange bound to a queue." })),
    others.length ? section("Other queues", h("details", {}, h("summary", {}, `Browse any other queue (${others.length})`), table(col, others))) : null);
}

// ---------------------------------------------------------------- one DLQ

export async function render(ctx) {
  if (ctx.params.length < 2) return dlqList(ctx);
  const [vhost, name] = ctx.params;
  const qpath = `/api/queues/${seg(vhost)}/${seg(name)}`;
  const state = { messages: [], selected: new Set(), reason: "", origQueue: "" };
  const summary = h("div", { id: "dlq-summary" });
  const list = h("div", { id: "dlq-messages" });
  const count = h("span", { id: "selected-count", class: "muted" }, "0 selected");
  const offsetIn = h("input", { type: "number", value: "0", min: "0", id: "peek-offset", style: "width:90px" });
  const countIn = h("input", { type: "number", value: "100", min: "1", id: "peek-count", style: "width:90px" });
  const reasonSel = h("select", { id: "filter-reason" });
  const origSel = h("select", { id: "filter-queue" });
  const moveEx = h("input", { id: "move-exchange", placeholder: "exchange ('' = default)" });
  const moveKey = h("input", { id: "move-key", placeholder: "routing key" });

  const visible = () => state.messages.filter(({ info }) =>
    (!state.reason || info.reason === state.reason) && (!state.origQueue || info.origQueue === state.origQueue));

  const updateCount = () => { count.textContent = `${state.selected.size} selected`; };

  const fillFilters = () => {
    const by = (f) => {
      const c = {};
      for (const { info } of state.messages) { const k = f(info) ?? "(none)"; c[k] = (c[k] || 0) + 1; }
      return c;
    };
    const opts = (sel, counts, current, allLabel) => {
      mount(sel, h("option", { value: "" }, allLabel),
        Object.entries(counts).map(([k, n]) => h("option", { value: k, selected: k === current ? "selected" : undefined }, `${k} (${n})`)));
    };
    opts(reasonSel, by((i) => i.reason), state.reason, "All reasons");
    opts(origSel, by((i) => i.origQueue), state.origQueue, "All original queues");
  };

  const drawList = () => {
    const rows = visible();
    const allBox = h("input", { type: "checkbox", id: "select-all", title: "Select all shown",
      checked: rows.length > 0 && rows.every((r) => state.selected.has(r.key)) });
    allBox.addEventListener("change", () => {
      for (const r of rows) { if (allBox.checked) state.selected.add(r.key); else state.selected.delete(r.key); }
      drawList();
    });
    const cols = [
      { title: allBox, get: (r) => {
        const box = h("input", { type: "checkbox", class: "pick", checked: state.selected.has(r.key), dataset: { id: String(r.key) } });
        box.addEventListener("change", () => { if (box.checked) state.selected.add(r.key); else state.selected.delete(r.key); updateCount(); });
        return box;
      } },
      { title: "#", class: "num", get: (r) => r.pos },
      { title: "Reason", get: (r) => reasonBadge(r.info.reason) },
      { title: "Original queue", get: (r) => r.info.origQueue ?? "–" },
      { title: "Replays to", get: (r) => r.info.dead ? h("span", { class: "mono" }, `${exName(r.info.origExchange ?? "")} → ${r.info.keys.join(", ")}`) : "–" },
      { title: "Deaths", class: "num", get: (r) => fmtNum(r.info.times) },
      { title: "Last died", get: (r) => fmtTime(r.info.lastTime) },
      { title: "Payload", get: (r) => h("span", { class: "mono" }, payloadText(r.m).slice(0, 80)) },
    ];
    if (!rows.length) {
      mount(list, h("p", { class: "empty" }, state.messages.length ? "No message matches the filters."
        : "No messages at this position: the queue is empty or the offset is past its end."));
      return updateCount();
    }
    // Two rows per message: its summary, and its details (hidden until "Details" is clicked).
    const body = h("tbody", {}, rows.map((r) => {
      const detail = h("tr", { class: "detail", hidden: true },
        h("td", { colspan: String(cols.length + 1) }, messageDetails(r.m, r.info)));
      const toggle = h("button", { type: "button", class: "chip details-toggle",
        onclick: () => { detail.hidden = !detail.hidden; } }, "Details");
      return [h("tr", { class: "message" }, cols.map((c) => h("td", { class: c.class }, c.get(r))), h("td", {}, toggle)), detail];
    }));
    mount(list, h("table", { class: "grid", id: "messages-table" },
      h("thead", {}, h("tr", {}, cols.map((c) => h("th", { class: c.class }, c.title)), h("th", {}))), body));
    updateCount();
  };

  const peek = async () => {
    const offset = Math.max(0, parseInt(offsetIn.value || "0", 10));
    const n = Math.max(1, parseInt(countIn.value || "100", 10));
    const [q, res] = await Promise.all([get(qpath), get(`${qpath}/messages?offset=${offset}&count=${n}`)]);
    const msgs = Array.isArray(res) ? res : res?.messages || [];
    state.messages = msgs.map((m, i) => ({ m, info: deathInfo(m), pos: offset + i + 1, key: msgId(m) ?? `pos${offset + i}` }));
    state.selected = new Set([...state.selected].filter((k) => state.messages.some((r) => r.key === k)));
    const dl = deadLetterTarget(q);
    mount(summary, kv({
      "ready messages": fmtNum(q.messages_ready), unacknowledged: fmtNum(q.messages_unacknowledged), consumers: fmtNum(q.consumers),
      "shown": `${msgs.length} from position ${offset + 1}`,
      "this queue dead-letters to": dl ? `${exName(dl.exchange)}${dl.routingKey ? ` (key ${dl.routingKey})` : ""}` : "nowhere",
    }));
    fillFilters();
    // A filter whose value no longer occurs (all such messages replayed) falls back to "all".
    state.reason = reasonSel.value;
    state.origQueue = origSel.value;
    drawList();
    if (msgs.length && msgs.every((m) => msgId(m) === undefined)) {
      toast("This broker's peek output carries no message ids: replay/discard of single messages is not possible.", "error");
    }
  };

  const chosen = () => state.messages.filter((r) => state.selected.has(r.key));

  /**
   * Moves the chosen messages inside the broker (`POST .../messages/replay`): to their original
   * exchange and routing keys (`target` undefined) or to `target` = {exchange, routing_key}.
   * A message leaves this queue only once routed (and stored, when persistent); its properties
   * and headers are kept as they are.
   */
  const republish = async (what, target) => {
    const rows = chosen();
    if (!rows.length) return toast("Select messages first.", "error");
    const ids = [];
    const failed = [];
    for (const r of rows) {
      const id = msgId(r.m);
      if (id === undefined) failed.push(`#${r.pos}: no message id in the peek output`);
      else if (!target && !r.info.dead) failed.push(`#${r.pos}: not dead-lettered: no original exchange`);
      else ids.push(id);
    }
    if (ids.length) {
      try {
        const res = await api("POST", `${qpath}/messages/replay`, { ids, ...(target || {}) });
        const pos = Object.fromEntries(rows.map((r) => [msgId(r.m), r.pos]));
        for (const f of res?.failed || []) failed.push(`#${pos[f.id] ?? f.id}: ${f.reason}`);
        const missing = res?.missing || [];
        const done = (res?.replayed || []).length;
        if (done || missing.length) {
          toast(`${what}: ${done} message(s)`
            + (missing.length ? `; ${missing.length} had already left the queue` : ""), missing.length ? "error" : "ok");
        }
      } catch (e) {
        failed.push(e.message);
      }
    }
    if (failed.length) toast(`${failed.length} message(s) not ${what.toLowerCase()}: ${failed.join("; ")}`, "error");
    state.selected.clear();
    await peek();
  };

  const replay = () => republish("Replayed");
  const move = () => {
    if (!moveEx.value && !moveKey.value) return toast("Give an exchange and/or a routing key to move to.", "error");
    return republish("Moved", { exchange: moveEx.value || "amq.default", routing_key: moveKey.value });
  };
  const discard = async () => {
    const rows = chosen();
    if (!rows.length) return toast("Select messages first.", "error");
    if (!confirm(`Discard ${rows.length} message(s) for good?`)) return;
    await act(`Discarded ${rows.length} message(s)`, () => api("POST", `${qpath}/messages/remove`, { ids: rows.map((r) => msgId(r.m)) }));
    state.selected.clear();
    await peek();
  };
  const purge = async () => {
    if (!confirm(`Purge every ready message of ${name}?`)) return;
    await act(`Queue ${name} purged`, () => api("DELETE", `${qpath}/contents`));
    state.selected.clear();
    await peek();
  };

  reasonSel.addEventListener("change", () => { state.reason = reasonSel.value; drawList(); });
  origSel.addEventListener("change", () => { state.origQueue = origSel.value; drawList(); });

  mount(ctx.main,
    h("h1", {}, `Dead letters in ${name}`, h("span", { class: "muted" }, ` · vhost ${vhost}`)),
    h("p", { class: "muted" }, "Messages are shown without being consumed (their order, redelivered flag and delivery counts do not change). ",
      "Replay moves a message back to the exchange and routing keys it was first published with (from its x-death header), headers unchanged; it leaves this queue only once routed there. ",
      link(`/queue/${seg(vhost)}/${seg(name)}`, "Queue details")),
    section("Queue", summary),
    section("Messages",
      h("div", { class: "row" },
        field("From position", offsetIn), field("How many", countIn),
        h("button", { class: "primary", id: "peek-button", onclick: () => peek().catch((e) => toast(e.message, "error")) }, "Peek"),
        field("Reason", reasonSel), field("Original queue", origSel)),
      h("div", { class: "actions" }, count,
        h("button", { type: "button", class: "primary", id: "replay-button", onclick: replay }, "Replay selected to original exchange"),
        h("span", { class: "muted" }, " or move to "), moveEx, moveKey,
        h("button", { type: "button", id: "move-button", onclick: move }, "Move selected"),
        h("button", { type: "button", class: "danger", id: "discard-button", onclick: discard }, "Discard selected"),
        h("button", { type: "button", class: "danger", id: "purge-button", onclick: purge }, "Purge queue")),
      list),
  );
  await peek();
}
