// Connections (with close) and channels.

import {
  act, api, button, fmtBytes, fmtNum, fmtRate, get, h, mount, rate, section, seg, table,
} from "./lib.js";

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
      { title: "Client", get: (c) => [c.client_properties?.connection_name, c.client_properties?.product,
        c.client_properties?.version].filter(Boolean).join(" · ") },
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
