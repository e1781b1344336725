// The overview page: queued messages, message rates (with sparklines), dead-lettering per reason,
// object totals, nodes with their alarms, listeners.

import {
  deadLetterCounts, fmtBytes, fmtNum, fmtRate, get, h, mount, rate, section, table,
} from "./lib.js";

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
