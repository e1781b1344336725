// Queues: list (with dead-letter badges and counters), declare with argument helpers, one queue
// (details, dead-lettering, bindings, publish, get, purge, delete).

import {
  act, api, argsEditor, button, deadLetterCounts, deadLetterTarget, field, fmtBytes, fmtNum, fmtRate, formValues, get, h, kv, link, mount, parseArgs, rate, section, seg, select, table, toast, vhostNames,
} from "./lib.js";
import { messageList } from "./dlq.js";
import { exName, exSeg, features, publishForm, unbind } from "./exchanges.js";

const QUEUE_ARGS = [
  ["x-queue-type", "quorum"], ["x-dead-letter-exchange", "dlx"], ["x-dead-letter-routing-key", "key"],
  ["x-message-ttl", "60000"], ["x-expires", "600000"], ["x-max-length", "1000"],
  ["x-overflow", "reject-publish"], ["x-delivery-limit", "5"], ["x-max-priority", "10"],
];


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
