// Exchanges: list, declare, one exchange with its bindings (bind/unbind), publish, delete.

import {
  act, api, argsEditor, button, field, fmtRate, formValues, get, h, kv, link, mount, parseArgs, rate, section, seg, select, show, table, vhostNames,
} from "./lib.js";

/** The management API's path segment for an exchange ("" is amq.default). */
export const exSeg = (name) => seg(name === "" ? "amq.default" : name);
export const exName = (name) => (name === "" ? "(AMQP default)" : name);

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

export function features(o) {
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
