// Pages of the web UI over RabbitMQ's management API: overview, connections, channels,
// exchanges (list and one), queues (list and one), with their usual actions.

import {
  act, api, argsEditor, button, deadLetterCounts, deadLetterTarget, field, fmtBytes, fmtNum,
  fmtRate, formValues, get, h, kv, link, mount, parseArgs, rate, section, seg, select, show,
  table, toast, vhostNames,
} from "./lib.js";
import { messageList } from "./dlq.js";

const QUEUE_ARGS = [
  ["x-queue-type", "quorum"], ["x-dead-letter-exchange", "dlx"], ["x-dead-letter-routing-key", "key"],
  ["x-message-ttl", "60000"], ["x-expires", "600000"], ["x-max-length", "1000"],
  ["x-overflow", "reject-publish"], ["x-delivery-limit", "5"], ["x-max-priority", "10"],
];

/** The management API's path segment for an exchange ("" is amq.default). */
export const exSeg = (name) => seg(name === "" ? "amq.default" : name);
export const exName = (name) => (name === "" ? "(AMQP default)" : name);

// ---------------------------------------------------------------- overview

const history = [];

function sparkline(values, w = 160, hgt = 30) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w);
  svg.setAttribute("height", hgt);
  svg.setAttribute("class", "spark");
  if (values.length < 2) return svg;
  const max = Math.max(1, ...values);
  const pts = values.map((v, i) => `${(i / (values.length - 1)) * w},${hgt - 2 - (v / max) * (hgt - 4)}`);
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", pts.join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#5b3fd1");
  line.setAttribute("stroke-width", "1.5");
  svg.append(line);
  return svg;
}

const tile = (label, value, extra, bad) =>
  h("div", { class: bad ? "tile bad" : "tile" }, h("div", { class: "v" }, value), h("div", { class: "l" }, label), extra);

export async function overview(ctx) {
  const live = h("div", { id: "overview" });
  mount(ctx.main, h("h1", {}, "Overview"), live);
  ctx.every(async () => {
    const [ov, nodes, queues] = await Promise.all([
      get("/api/overview").catch(() => ({})),
      get("/api/nodes").catch(() => []),
      get("/api/queues").catch(() => []),
    ]);
    if (!ctx.current) return;
    const qt = ov.queue_totals || {};
    const ot = ov.object_totals || {};
    let deadTotal = 0;
    const byReason = {};
    for (const q of queues) {
      for (const [r, n] of Object.entries(deadLetterCounts(q))) {
        byReason[r] = (byReason[r] || 0) + n;
        deadTotal += n;
      }
    }
    history.push({ t: Date.now(), messages: qt.messages ?? 0, publish: rate(ov, "publish") ?? 0,
      deliver: rate(ov, "deliver_get") ?? 0, dead: deadTotal });
    while (history.length > 60) history.shift();
    const deadRate = history.length > 1
      ? Math.max(0, (history.at(-1).dead - history.at(-2).dead) / ((history.at(-1).t - history.at(-2).t) / 1000))
      : undefined;
    const alarms = nodes.filter((n) => n.mem_alarm || n.disk_free_alarm);
    mount(live,
      h("div", { class: "tiles" },
        tile("Messages (ready + unacked)", fmtNum(qt.messages), sparkline(history.map((x) => x.messages))),
        tile("Ready", fmtNum(qt.messages_ready)),
        tile("Unacknowledged", fmtNum(qt.messages_unacknowledged)),
        tile("Publish rate", fmtRate(rate(ov, "publish")), sparkline(history.map((x) => x.publish))),
        tile("Deliver / get rate", fmtRate(rate(ov, "deliver_get")), sparkline(history.map((x) => x.deliver))),
        tile("Ack rate", fmtRate(rate(ov, "ack"))),
        tile("Dead-lettered (total)", fmtNum(deadTotal),
          h("div", {}, Object.entries(byReason).filter(([, n]) => n > 0).map(([r, n]) => h("span", { class: `badge reason-${r}` }, `${r} ${fmtNum(n)}`)))),
        tile("Dead-letter rate", fmtRate(deadRate)),
        tile("Alarms", alarms.length ? "ALARM" : "none", null, alarms.length > 0),
      ),
      h("div", { class: "tiles" },
        tile("Connections", fmtNum(ot.connections)), tile("Channels", fmtNum(ot.channels)),
        tile("Exchanges", fmtNum(ot.exchanges)), tile("Queues", fmtNum(ot.queues ?? queues.length)),
        tile("Consumers", fmtNum(ot.consumers))),
      section("Nodes", table([
        { title: "Name", get: (n) => n.name },
        { title: "Memory", get: (n) => `${fmtBytes(n.mem_used)} / ${fmtBytes(n.mem_limit)}` },
        { title: "Disk free", get: (n) => `${fmtBytes(n.disk_free)} (limit ${fmtBytes(n.disk_free_limit)})` },
        { title: "File descriptors", get: (n) => `${fmtNum(n.fd_used)} / ${fmtNum(n.fd_total)}` },
        { title: "Uptime", get: (n) => n.uptime ? `${Math.round(n.uptime / 60000)} min` : "–" },
        { title: "Alarms", get: (n) => {
          const a = [];
          if (n.mem_alarm) a.push(h("span", { class: "badge reason-rejected" }, "memory"));
          if (n.disk_free_alarm) a.push(h("span", { class: "badge reason-rejected" }, "disk"));
          return a.length ? a : h("span", { class: "ok" }, "none");
        } },
      ], nodes, { empty: "No node details (GET /api/nodes not answered)." })),
      section("Listeners", table([
        { title: "Protocol", get: (l) => l.protocol },
        { title: "Address", get: (l) => l.ip_address },
        { title: "Port", get: (l) => l.port },
      ], ov.listeners || [], { empty: "No listeners reported." })),
      h("p", { class: "muted" }, `${ov.product_name || "Charon"} ${ov.product_version || ov.rabbitmq_version || ""} · `
        + `node ${ov.node || "?"} · refreshed every 5 s`),
    );
  });
}

// ---------------------------------------------------------------- connections, channels

export async function connections(ctx) {
  const live = h("div");
  mount(ctx.main, h("h1", {}, "Connections"), live);
  ctx.every(async () => {
    const conns = await get("/api/connections");
    if (!ctx.current) return;
    mount(live, section(`All connections (${conns.length})`, table([
      { title: "Name", get: (c) => h("span", { class: "mono" }, c.name) },
      { title: "User", get: (c) => c.user },
      { title: "Vhost", get: (c) => c.vhost },
      { title: "Client", get: (c) => [c.client_properties?.product, c.client_properties?.version].filter(Boolean).join(" ") },
      { title: "Protocol", get: (c) => c.protocol },
      { title: "Channels", class: "num", get: (c) => fmtNum(c.channels) },
      { title: "State", get: (c) => c.state },
      { title: "From client", class: "num", get: (c) => `${fmtBytes(c.recv_oct_details?.rate ?? 0)}/s` },
      { title: "To client", class: "num", get: (c) => `${fmtBytes(c.send_oct_details?.rate ?? 0)}/s` },
      { title: "", get: (c) => button("Close", () => closeConnection(c.name), "danger") },
    ], conns, { empty: "No connections.", id: "connections-table" })));
  });
}

async function closeConnection(name) {
  const reason = prompt(`Close connection ${name}?\nReason sent to the client:`, "Closed via management UI");
  if (reason === null) return;
  await act(`Connection ${name} closed`, () =>
    api("DELETE", `/api/connections/${seg(name)}`, undefined, { "X-Reason": reason }));
}

export async function channels(ctx) {
  const live = h("div");
  mount(ctx.main, h("h1", {}, "Channels"), live);
  ctx.every(async () => {
    const chans = await get("/api/channels");
    if (!ctx.current) return;
    mount(live, section(`All channels (${chans.length})`, table([
      { title: "Channel", get: (c) => h("span", { class: "mono" }, c.name) },
      { title: "User", get: (c) => c.user },
      { title: "Vhost", get: (c) => c.vhost },
      { title: "Mode", get: (c) => [c.confirm ? "C" : "", c.transactional ? "T" : ""].join("") || "–" },
      { title: "State", get: (c) => c.state },
      { title: "Prefetch", class: "num", get: (c) => fmtNum(c.prefetch_count) },
      { title: "Unacked", class: "num", get: (c) => fmtNum(c.messages_unacknowledged) },
      { title: "Consumers", class: "num", get: (c) => fmtNum(c.consumer_count) },
      { title: "Publish", class: "num", get: (c) => fmtRate(rate(c, "publish")) },
      { title: "Deliver/get", class: "num", get: (c) => fmtRate(rate(c, "deliver_get")) },
      { title: "Ack", class: "num", get: (c) => fmtRate(rate(c, "ack")) },
    ], chans, { empty: "No channels." })));
  });
}

// ---------------------------------------------------------------- exchanges

export async function exchanges(ctx) {
  const live = h("div");
  const vhosts = await vhostNames();
  const form = h("form", { class: "row", id: "add-exchange" },
    field("Vhost", select("vhost", vhosts, "/")),
    field("Name", h("input", { name: "name", required: true })),
    field("Type", select("type", ["direct", "fanout", "topic", "headers", "x-delayed-message"], "direct")),
    field("Durable", h("input", { type: "checkbox", name: "durable", checked: true })),
    field("Auto delete", h("input", { type: "checkbox", name: "auto_delete" })),
    field("Internal", h("input", { type: "checkbox", name: "internal" })),
    field("Arguments", argsEditor("arguments", [["alternate-exchange", "ae"], ["x-delayed-type", "direct"]])),
    h("button", { class: "primary" }, "Add exchange"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = formValues(form);
    await act(`Exchange ${v.name} declared`, () => api("PUT", `/api/exchanges/${seg(v.vhost)}/${seg(v.name)}`, {
      type: v.type, durable: v.durable, auto_delete: v.auto_delete, internal: v.internal,
      arguments: parseArgs(v.arguments),
    })) && ctx.refresh?.();
  });
  mount(ctx.main, h("h1", {}, "Exchanges"), live, section("Add a new exchange", form));
  const load = async () => {
    const list = await get("/api/exchanges");
    if (!ctx.current) return;
    mount(live, section(`All exchanges (${list.length})`, table([
      { title: "Vhost", get: (x) => x.vhost },
      { title: "Name", get: (x) => link(`/exchange/${seg(x.vhost)}/${exSeg(x.name)}`, exName(x.name)) },
      { title: "Type", get: (x) => x.type },
      { title: "Features", get: (x) => features(x) },
      { title: "Message rate in", class: "num", get: (x) => fmtRate(rate(x, "publish_in")) },
      { title: "Message rate out", class: "num", get: (x) => fmtRate(rate(x, "publish_out")) },
    ], list, { id: "exchanges-table" })));
  };
  ctx.refresh = load;
  ctx.every(load);
}

function features(o) {
  const out = [];
  if (o.durable) out.push(h("span", { class: "badge", title: "durable" }, "D"));
  if (o.auto_delete) out.push(h("span", { class: "badge", title: "auto-delete" }, "AD"));
  if (o.internal) out.push(h("span", { class: "badge", title: "internal" }, "I"));
  if (o.exclusive) out.push(h("span", { class: "badge", title: "exclusive" }, "Excl"));
  for (const [k, v] of Object.entries(o.arguments || {})) {
    if (k === "x-dead-letter-exchange" || k === "x-queue-type") continue;
    out.push(h("span", { class: "badge", title: `${k} = ${show(v)}` }, k.replace(/^x-/, "")));
  }
  return out;
}

/** A "publish message" form posting to `/api/exchanges/{vhost}/{exchange}/publish`. */
export function publishForm(vhost, exchange, routingKey = "") {
  const form = h("form", { class: "publish-form" },
    h("div", { class: "row" },
      field("Routing key", h("input", { name: "routing_key", value: routingKey })),
      field("Delivery mode", select("delivery_mode", [["1", "1 - non-persistent"], ["2", "2 - persistent"]], "2"))),
    field("Headers", h("textarea", { name: "headers", rows: 2, placeholder: "key = value" })),
    field("Properties", h("textarea", { name: "props", rows: 2, placeholder: "content_type = text/plain\nmessage_id = 42" })),
    field("Payload", h("textarea", { name: "payload", rows: 4 })),
    h("button", { class: "primary" }, "Publish message"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = formValues(form);
    await act("Message published", async () => {
      const properties = { delivery_mode: parseInt(v.delivery_mode, 10), headers: parseArgs(v.headers), ...parseArgs(v.props) };
      const r = await api("POST", `/api/exchanges/${seg(vhost)}/${exSeg(exchange)}/publish`, {
        properties, routing_key: v.routing_key, payload: v.payload, payload_encoding: "string",
      });
      if (r && r.routed === false) throw new Error("the message was not routed to any queue");
    });
  });
  return form;
}

export async function exchange(ctx) {
  const [vhost, name] = ctx.params;
  const x = await get(`/api/exchanges/${seg(vhost)}/${exSeg(name)}`);
  const bindings = h("div");
  const addForm = h("form", { class: "row" },
    field("To", select("dtype", [["q", "Queue"], ["e", "Exchange"]], "q")),
    field("Destination", h("input", { name: "destination", required: true })),
    field("Routing key", h("input", { name: "routing_key" })),
    field("Arguments", h("textarea", { name: "arguments", rows: 1 })),
    h("button", { class: "primary" }, "Bind"));
  const load = async () => {
    const list = await get(`/api/exchanges/${seg(vhost)}/${exSeg(name)}/bindings/source`).catch(() => []);
    mount(bindings, table([
      { title: "To", get: (b) => b.destination_type === "queue"
        ? link(`/queue/${seg(b.vhost)}/${seg(b.destination)}`, b.destination) : link(`/exchange/${seg(b.vhost)}/${exSeg(b.destination)}`, b.destination) },
      { title: "Type", get: (b) => b.destination_type },
      { title: "Routing key", get: (b) => h("span", { class: "mono" }, b.routing_key) },
      { title: "Arguments", get: (b) => kv(b.arguments) },
      { title: "", get: (b) => button("Unbind", () => unbind(b).then(load), "danger") },
    ], list, { empty: "No bindings from this exchange." }));
  };
  addForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = formValues(addForm);
    await act("Binding added", () => api("POST",
      `/api/bindings/${seg(vhost)}/e/${exSeg(name)}/${v.dtype}/${seg(v.destination)}`,
      { routing_key: v.routing_key, arguments: parseArgs(v.arguments) }));
    load();
  });
  mount(ctx.main,
    h("h1", {}, `Exchange ${exName(name)}`, h("span", { class: "muted" }, ` in vhost ${vhost}`)),
    h("div", { class: "split" },
      section("Details", kv({ type: x.type, durable: x.durable, auto_delete: x.auto_delete, internal: x.internal,
        policy: x.policy, "rate in": fmtRate(rate(x, "publish_in")), "rate out": fmtRate(rate(x, "publish_out")) }),
      h("h2", {}, "Arguments"), kv(x.arguments)),
      section("Publish message", publishForm(vhost, name))),
    section("Bindings", bindings, h("h2", {}, "Add binding from this exchange"), addForm),
    name === "" || name.startsWith("amq.") ? null : section("Delete this exchange",
      button("Delete exchange", async () => {
        if (!confirm(`Delete exchange ${name}?`)) return;
        if (await act(`Exchange ${name} deleted`, () => api("DELETE", `/api/exchanges/${seg(vhost)}/${exSeg(name)}`))) {
          location.hash = "#/exchanges";
        }
      }, "danger")),
  );
  await load();
}

export async function unbind(b) {
  const d = b.destination_type === "queue" ? "q" : "e";
  const props = b.properties_key ?? (b.routing_key === "" ? "~" : b.routing_key);
  await act("Binding removed", () => api("DELETE",
    `/api/bindings/${seg(b.vhost)}/e/${exSeg(b.source)}/${d}/${seg(b.destination)}/${seg(props)}`));
}

// ---------------------------------------------------------------- queues

function queueFeatures(q) {
  const out = features(q);
  const dl = deadLetterTarget(q);
  if (dl) {
    out.push(h("span", { class: "badge dlx", title: `dead-letters to exchange "${dl.exchange}"${dl.routingKey ? ` with key ${dl.routingKey}` : ""}` },
      `DLX → ${exName(dl.exchange)}`));
  }
  if (q.policy) out.push(h("span", { class: "badge", title: "policy" }, `policy ${q.policy}`));
  return out;
}

function deadCell(q) {
  const c = deadLetterCounts(q);
  const entries = Object.entries(c).filter(([, n]) => n > 0);
  if (!entries.length) return "–";
  return entries.map(([r, n]) => h("span", { class: `badge reason-${r}`, title: `dead-lettered: ${r}` }, `${r} ${fmtNum(n)}`));
}

export async function queues(ctx) {
  const live = h("div");
  const vhosts = await vhostNames();
  const filter = h("input", { placeholder: "Filter by name…", id: "queue-filter", oninput: () => ctx.refresh() });
  const form = h("form", { class: "row", id: "add-queue" },
    field("Vhost", select("vhost", vhosts, "/")),
    field("Type", select("type", ["classic", "quorum"], "classic")),
    field("Name", h("input", { name: "name", id: "new-queue-name", required: true })),
    field("Durable", h("input", { type: "checkbox", name: "durable", checked: true })),
    field("Auto delete", h("input", { type: "checkbox", name: "auto_delete" })),
    field("Arguments", argsEditor("arguments", QUEUE_ARGS)),
    h("button", { class: "primary", id: "add-queue-button" }, "Add queue"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = formValues(form);
    let args;
    try { args = parseArgs(v.arguments); } catch (e) { return toast(e.message, "error"); }
    if (v.type === "quorum") args["x-queue-type"] = "quorum";
    if (await act(`Queue ${v.name} declared`, () => api("PUT", `/api/queues/${seg(v.vhost)}/${seg(v.name)}`,
      { durable: v.durable, auto_delete: v.auto_delete, arguments: args }))) {
      form.reset();
      ctx.refresh();
    }
  });
  mount(ctx.main, h("h1", {}, "Queues"), h("div", { class: "actions" }, filter), live, section("Add a new queue", form));
  const load = async () => {
    let list = await get("/api/queues");
    if (!ctx.current) return;
    const f = filter.value.trim().toLowerCase();
    if (f) list = list.filter((q) => q.name.toLowerCase().includes(f));
    mount(live, section(`All queues (${list.length})`, table([
      { title: "Vhost", get: (q) => q.vhost },
      { title: "Name", get: (q) => link(`/queue/${seg(q.vhost)}/${seg(q.name)}`, q.name) },
      { title: "Type", get: (q) => q.type || "classic" },
      { title: "Features", get: queueFeatures },
      { title: "State", get: (q) => q.state || "running" },
      { title: "Ready", class: "num", get: (q) => fmtNum(q.messages_ready) },
      { title: "Unacked", class: "num", get: (q) => fmtNum(q.messages_unacknowledged) },
      { title: "Total", class: "num", get: (q) => fmtNum(q.messages) },
      { title: "Consumers", class: "num", get: (q) => fmtNum(q.consumers) },
      { title: "Incoming", class: "num", get: (q) => fmtRate(rate(q, "publish")) },
      { title: "Deliver/get", class: "num", get: (q) => fmtRate(rate(q, "deliver_get")) },
      { title: "Ack", class: "num", get: (q) => fmtRate(rate(q, "ack")) },
      { title: "Dead-lettered", get: deadCell },
      { title: "", get: (q) => (q.messages_ready > 0 ? link(`/dlq/${seg(q.vhost)}/${seg(q.name)}`, "Browse") : "") },
    ], list, { id: "queues-table", empty: "No queues." })));
  };
  ctx.refresh = load;
  ctx.every(load);
}

export async function queue(ctx) {
  const [vhost, name] = ctx.params;
  const path = `/api/queues/${seg(vhost)}/${seg(name)}`;
  const details = h("div");
  const bindings = h("div");
  const gotten = h("div", { id: "get-results" });
  const load = async () => {
    const q = await get(path);
    if (!ctx.current) return;
    const dl = deadLetterTarget(q);
    mount(details, h("div", { class: "split" },
      section("Details", kv({
        type: q.type || "classic", state: q.state || "running", durable: q.durable, auto_delete: q.auto_delete,
        exclusive: q.exclusive, policy: q.policy || "", consumers: q.consumers,
        "consumer utilisation": q.consumer_utilisation, memory: q.memory !== undefined ? fmtBytes(q.memory) : undefined,
        "ready": fmtNum(q.messages_ready), "unacked": fmtNum(q.messages_unacknowledged), "total": fmtNum(q.messages),
        "incoming": fmtRate(rate(q, "publish")), "deliver/get": fmtRate(rate(q, "deliver_get")), "ack": fmtRate(rate(q, "ack")),
      })),
      section("Dead-lettering",
        dl ? h("p", {}, "Dead letters go to exchange ", link(`/exchange/${seg(vhost)}/${exSeg(dl.exchange)}`, exName(dl.exchange)),
          dl.routingKey ? ` with routing key "${dl.routingKey}"` : " with their original routing keys", ".")
          : h("p", { class: "muted" }, "No dead-letter exchange: rejected or expired messages are dropped."),
        h("h2", {}, "Dead-lettered from this queue, by reason"), kv(deadLetterCounts(q)),
        h("h2", {}, "Arguments"), kv(q.arguments),
        h("h2", {}, "Effective policy definition"), kv(q.effective_policy_definition))));
  };
  const loadBindings = async () => {
    const list = await get(`${path}/bindings`).catch(() => []);
    mount(bindings, table([
      { title: "From", get: (b) => link(`/exchange/${seg(b.vhost)}/${exSeg(b.source)}`, exName(b.source)) },
      { title: "Routing key", get: (b) => h("span", { class: "mono" }, b.routing_key) },
      { title: "Arguments", get: (b) => kv(b.arguments) },
      { title: "", get: (b) => (b.source === "" ? "(default binding)" : button("Unbind", () => unbind(b).then(loadBindings), "danger")) },
    ], list, { empty: "No bindings." }));
  };
  const bindForm = h("form", { class: "row" },
    field("From exchange", h("input", { name: "source", required: true })),
    field("Routing key", h("input", { name: "routing_key" })),
    h("button", { class: "primary" }, "Bind"));
  bindForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = formValues(bindForm);
    await act("Binding added", () => api("POST", `/api/bindings/${seg(vhost)}/e/${exSeg(v.source)}/q/${seg(name)}`,
      { routing_key: v.routing_key, arguments: {} }));
    loadBindings();
  });
  const getForm = h("form", { class: "row", id: "get-form" },
    field("Ack mode", select("ackmode", [
      ["ack_requeue_true", "Nack message requeue true"], ["reject_requeue_true", "Reject requeue true"],
      ["ack_requeue_false", "Automatic ack"], ["reject_requeue_false", "Reject requeue false"]], "ack_requeue_true")),
    field("Encoding", select("encoding", [["auto", "Auto string / base64"], ["base64", "base64"]], "auto")),
    field("Messages", h("input", { name: "count", type: "number", value: "1", min: "1" })),
    h("button", { class: "primary", id: "get-button" }, "Get messages"));
  getForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = formValues(getForm);
    try {
      const msgs = await api("POST", `${path}/get`, { count: parseInt(v.count, 10), ackmode: v.ackmode, encoding: v.encoding, truncate: 50000 });
      mount(gotten, msgs.length ? messageList(msgs) : h("p", { class: "empty" }, "Queue is empty."));
      load();
    } catch (e) {
      toast(`Get failed: ${e.message}`, "error");
    }
  });
  mount(ctx.main,
    h("h1", {}, `Queue ${name}`, h("span", { class: "muted" }, ` in vhost ${vhost}`)),
    h("div", { class: "actions" },
      link(`/dlq/${seg(vhost)}/${seg(name)}`, "Browse messages without consuming them (peek) →")),
    details,
    section("Bindings", bindings, h("h2", {}, "Add binding to this queue"), bindForm),
    h("div", { class: "split" },
      section("Publish message", h("p", { class: "muted" }, "Published to the default exchange with the queue's name as routing key."),
        publishForm(vhost, "", name)),
      section("Get messages", h("p", { class: "muted" }, "Get consumes messages (like basic.get); use the browser to only look."),
        getForm, gotten)),
    section("Purge or delete",
      h("div", { class: "actions" },
        button("Purge messages", async () => {
          if (!confirm(`Purge all ready messages of ${name}?`)) return;
          await act(`Queue ${name} purged`, () => api("DELETE", `${path}/contents`));
          load();
        }, "danger"),
        button("Delete queue", async () => {
          if (!confirm(`Delete queue ${name} and its messages?`)) return;
          if (await act(`Queue ${name} deleted`, () => api("DELETE", path))) location.hash = "#/queues";
        }, "danger"))),
  );
  await loadBindings();
  ctx.every(load);
}
