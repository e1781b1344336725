// The dead-letter archive (docs/archive.md, `/api/dead-letters…`): search records, groups by
// error, edit a record, replay or skip a selection or a whole group, replay jobs, audit trail.
// The navigation shows this page only when the broker answers `GET /api/dead-letters/stats`.

import {
  act, api, button, field, fmtBytes, fmtNum, fmtTime, formValues, get, h, kv, link, mount, section,
  select, table, toast,
} from "./lib.js";

const STATUSES = ["", "PENDING", "PROCESSING", "REPLAYED", "FAILED", "SKIPPED"];
const FILTER_KEYS = ["vhost", "queue", "original_queue", "reason", "status", "error", "key", "body", "since", "until"];

/** Whether the broker has the archive API. */
export async function available() {
  try {
    await get("/api/dead-letters/stats");
    return true;
  } catch {
    return false;
  }
}

const qs = (obj) => Object.entries(obj).filter(([, v]) => v !== "" && v !== undefined && v !== null)
  .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join("&");

const statusBadge = (s) => h("span", { class: `badge status-${String(s).toLowerCase()}` }, s);

function tabs(current) {
  return h("div", { class: "tabs" },
    [["records", "Records"], ["groups", "Groups by error"], ["jobs", "Replay jobs"], ["audit", "Audit trail"]]
      .map(([t, label]) => h("a", { href: `#/archive/${t}`, class: t === current ? "chip active" : "chip", id: `archive-tab-${t}` }, label)));
}

export async function render(ctx) {
  const [tab = "records", arg] = ctx.params;
  const stats = await get("/api/dead-letters/stats");
  const header = [
    h("h1", {}, "Dead-letter archive"),
    h("div", { class: "tiles" },
      h("div", { class: "tile" }, h("div", { class: "v" }, fmtNum(stats.records)), h("div", { class: "l" }, "Archived records")),
      h("div", { class: "tile" }, h("div", { class: "v" }, fmtBytes(stats.payload_bytes)), h("div", { class: "l" }, "Payload stored")),
      Object.entries(stats.by_status || {}).map(([s, n]) =>
        h("div", { class: "tile" }, h("div", { class: "v" }, fmtNum(n)), h("div", { class: "l" }, s)))),
    tabs(tab === "record" ? "records" : tab),
  ];
  if (tab === "record") return record(ctx, header, arg);
  if (tab === "groups") return groups(ctx, header, new URLSearchParams(location.hash.split("?")[1] || ""));
  if (tab === "jobs") return jobs(ctx, header);
  if (tab === "audit") return audit(ctx, header);
  return records(ctx, header, new URLSearchParams(location.hash.split("?")[1] || ""));
}

/** Replay options shared by the records and groups views. */
function replayOptions() {
  return h("form", { class: "row replay-options", onsubmit: (ev) => ev.preventDefault() },
    field("Replay to exchange", h("input", { name: "exchange", placeholder: "(original exchange)" })),
    field("Routing key", h("input", { name: "routing_key", placeholder: "(original routing key)" })),
    field("Rate (msg/s)", h("input", { name: "rate", type: "number", min: "0", placeholder: "unlimited" })),
    field("Strip x-death headers", h("input", { name: "strip_death_headers", type: "checkbox" })),
    field("Note", h("input", { name: "note", placeholder: "why (kept in the audit trail)" })));
}

function replayBody(opts, what) {
  const v = formValues(opts);
  const body = { ...what, strip_death_headers: v.strip_death_headers };
  if (v.exchange) body.exchange = v.exchange;
  if (v.routing_key) body.routing_key = v.routing_key;
  if (v.rate) body.rate = Number(v.rate);
  if (v.note) body.note = v.note;
  return body;
}

async function records(ctx, header, params) {
  const filter = h("form", { class: "row", id: "archive-search" },
    FILTER_KEYS.map((k) => field(k.replace("_", " "), k === "status"
      ? select("status", STATUSES.map((s) => [s, s || "any"]), params.get(k) || "")
      : h("input", { name: k, value: params.get(k) || "", style: "width:130px" }))),
    h("button", { class: "primary" }, "Search"));
  const list = h("div", { id: "archive-records" });
  const selected = new Set();
  const opts = replayOptions();
  const filterValues = () => Object.fromEntries(Object.entries(formValues(filter)).filter(([, v]) => v !== ""));
  let page = 1;
  const load = async () => {
    const res = await get(`/api/dead-letters?${qs({ ...filterValues(), page, page_size: 50 })}`);
    const items = res.items || [];
    mount(list,
      // An `error`/`body` total over 10,000 (a header term's over 100,000) is a lower bound (total_relation "gte").
      h("p", { class: "muted" }, `${fmtNum(res.total)}${res.total_relation === "gte" ? "+" : ""} record(s) match · page ${res.page} · `,
        page > 1 ? button("← previous", () => { page--; load(); }, "chip") : null, " ",
        (res.total_relation === "gte" ? items.length === 50 : res.total > page * 50)
          ? button("next →", () => { page++; load(); }, "chip") : null),
      table([
        { title: "", get: (r) => {
          const b = h("input", { type: "checkbox", class: "pick", checked: selected.has(r.id) });
          b.addEventListener("change", () => (b.checked ? selected.add(r.id) : selected.delete(r.id)));
          return b;
        } },
        { title: "Id", class: "num", get: (r) => link(`/archive/record/${r.id}`, String(r.id)) },
        { title: "Status", get: (r) => statusBadge(r.status) },
        { title: "Original queue", get: (r) => r.original_queue ?? "–" },
        { title: "Reason", get: (r) => h("span", { class: `badge reason-${r.reason}` }, r.reason ?? "–") },
        { title: "Error", get: (r) => r.error_message ?? "" },
        { title: "Key", get: (r) => r.key ?? "" },
        { title: "Replays", class: "num", get: (r) => fmtNum(r.replay_count) },
        { title: "Archived", get: (r) => fmtTime(r.created_at) },
      ], items, { id: "archive-table", empty: "No archived dead letter matches." }));
  };
  filter.addEventListener("submit", (ev) => { ev.preventDefault(); page = 1; selected.clear(); load(); });
  const byIdsOrFilter = () => (selected.size ? { ids: [...selected] } : null);
  mount(ctx.main, header,
    section("Search", filter),
    section("Records", list,
      h("h2", {}, "With the selected records (or, with none selected, everything the search matches)"), opts,
      h("div", { class: "actions" },
        button("Replay", async () => {
          const what = byIdsOrFilter() || { filter: filterValues() };
          if (!what.ids && !Object.keys(what.filter).length) return toast("Search first, or select records: replaying the whole archive needs the CLI.", "error");
          await act("Replay requested", async () => {
            const r = await api("POST", "/api/dead-letters/replay", replayBody(opts, what));
            toast(`Replay job ${r.job}: ${r.total} record(s)`);
          });
          selected.clear();
          load();
        }, "primary"),
        button("Skip", async () => {
          const reason = prompt("Why skip them (kept in the audit trail)?", "");
          if (reason === null) return;
          const what = byIdsOrFilter() || { filter: filterValues() };
          await act("Skipped", () => api("POST", "/api/dead-letters/skip", { ...what, reason }));
          selected.clear();
          load();
        }),
        button("Delete", async () => {
          if (!selected.size) return toast("Select the records to delete.", "error");
          if (!confirm(`Delete ${selected.size} archived record(s) for good?`)) return;
          await act("Deleted", () => api("POST", "/api/dead-letters/delete", { ids: [...selected] }));
          selected.clear();
          load();
        }, "danger"))));
  await load();
}

async function groups(ctx, header, params) {
  const by = "original_queue,reason,error_fingerprint,status";
  // Filters from the route's query (`#/archive/groups?error=…`) narrow every group and its actions.
  const terms = Object.fromEntries([...params].filter(([k, v]) => v && k !== "by" && k !== "exact_total"));
  const extra = qs({ ...terms, ...(params.get("exact_total") === "true" ? { exact_total: "true" } : {}) });
  const list = h("div", { id: "archive-groups" });
  const opts = replayOptions();
  const load = async () => {
    const gs = await get(`/api/dead-letters/groups?by=${by}${extra ? `&${extra}` : ""}`);
    const filterOf = (g) => ({ ...terms, ...Object.fromEntries(by.split(",").filter((k) => g[k] !== undefined && g[k] !== null).map((k) => [k, g[k]])) });
    mount(list, table([
      { title: "Original queue", get: (g) => g.original_queue ?? "–" },
      { title: "Reason", get: (g) => h("span", { class: `badge reason-${g.reason}` }, g.reason ?? "–") },
      { title: "Status", get: (g) => statusBadge(g.status) },
      { title: "Error (sample)", get: (g) => g.error_message ?? h("span", { class: "muted" }, "no error header") },
      // A lower bound (`count_relation` "gte"): an `error`/`body` filter's groups of its newest 10,000 matches.
      { title: "Count", class: "num", get: (g) => `${fmtNum(g.count)}${g.count_relation === "gte" ? "+" : ""}` },
      { title: "Oldest", get: (g) => fmtTime(g.oldest) },
      { title: "Newest", get: (g) => fmtTime(g.newest) },
      { title: "", get: (g) => h("div", { class: "actions" },
        link(`/archive/records?${qs(filterOf(g))}`, "Show"),
        button("Replay group", async () => {
          await act("Replay requested", async () => {
            const r = await api("POST", "/api/dead-letters/replay", replayBody(opts, { filter: filterOf(g) }));
            toast(`Replay job ${r.job}: ${r.total} record(s)`);
          });
          load();
        }, "primary"),
        button("Skip group", async () => {
          const reason = prompt("Why skip this group?", "");
          if (reason === null) return;
          await act("Group skipped", () => api("POST", "/api/dead-letters/skip", { filter: filterOf(g), reason }));
          load();
        })) },
    ], gs, { id: "groups-table", empty: "The archive is empty." }),
      gs.some((g) => g.count_relation === "gte")
        ? h("p", { class: "muted", id: "groups-newest" }, "The groups cover the newest 10,000 matches; counts are lower bounds.")
        : null);
  };
  mount(ctx.main, header, section("Dead letters grouped by original queue, reason, error and status",
    h("h2", {}, "Replay options (for \"Replay group\")"), opts, list));
  await load();
}

async function record(ctx, header, id) {
  const r = await get(`/api/dead-letters/${encodeURIComponent(id)}`);
  const form = h("form", { id: "edit-record" },
    field("Payload", h("textarea", { name: "payload", rows: 8, value: r.payload })),
    field("Payload encoding", select("payload_encoding", ["string", "base64"], r.payload_encoding)),
    field("Headers (JSON)", h("textarea", { name: "headers", rows: 6, value: JSON.stringify(r.headers, null, 2) })),
    field("Note", h("input", { name: "note", placeholder: "what was fixed" })),
    h("button", { class: "primary" }, "Save edit"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = formValues(form);
    let headers;
    try { headers = JSON.parse(v.headers); } catch (e) { return toast(`Headers are not JSON: ${e.message}`, "error"); }
    if (await act(`Record ${id} saved`, () => api("PUT", `/api/dead-letters/${encodeURIComponent(id)}`,
      { payload: v.payload, payload_encoding: v.payload_encoding, headers, note: v.note }))) await record(ctx, header, id);
  });
  mount(ctx.main, header,
    h("h2", {}, `Record ${r.id} `, statusBadge(r.status)),
    h("div", { class: "split" },
      section("Where it came from", kv({
        vhost: r.vhost, "archive queue": r.queue, "original queue": r.original_queue, "original exchange": r.original_exchange,
        "routing keys": (r.original_routing_keys || []).join(", "), reason: r.reason, deaths: r.death_count,
        "message id": r.message_id, key: r.key, archived: fmtTime(r.created_at), replays: r.replay_count,
        "last replayed": fmtTime(r.last_replayed_at), "resolved by": r.resolved_by, note: r.resolution_note,
      }), h("h2", {}, "Error"), h("pre", { class: "payload" }, [r.error_message, r.error_stacktrace].filter(Boolean).join("\n\n") || "none"),
      h("h2", {}, "Properties"), kv(r.properties)),
      section("Edit", form)),
    section("Actions", h("div", { class: "actions" },
      button("Replay to original exchange", async () => {
        await act("Replay started", () => api("POST", "/api/dead-letters/replay", { ids: [r.id] }));
      }, "primary"),
      button("Skip", async () => {
        const reason = prompt("Why skip it?", "");
        if (reason === null) return;
        await act("Skipped", () => api("POST", "/api/dead-letters/skip", { ids: [r.id], reason }));
      }))),
    section("Edit history (originals)", table([
      { title: "Changed", get: (x) => fmtTime(x.changed_at) },
      { title: "By", get: (x) => x.changed_by },
      { title: "Payload before", get: (x) => h("pre", { class: "payload" }, x.payload ?? "") },
    ], r.history || [], { empty: "Never edited." })),
    section("Audit", h("p", {}, link(`/archive/audit`, "Audit trail"))));
}

async function jobs(ctx, header) {
  const list = h("div");
  mount(ctx.main, header, section("Replay jobs", list));
  ctx.every(async () => {
    const js = await get("/api/dead-letters/jobs");
    const items = Array.isArray(js) ? js : js.items || [];
    if (!ctx.current) return;
    mount(list, table([
      { title: "Job", class: "num", get: (j) => j.id },
      { title: "State", get: (j) => statusBadge(j.state) },
      { title: "Progress", get: (j) => `${fmtNum(j.replayed)} replayed · ${fmtNum(j.failed)} failed · ${fmtNum(j.pending)} pending of ${fmtNum(j.total)}` },
      { title: "Rate", get: (j) => (j.rate ? `${j.rate}/s` : "unlimited") },
      { title: "Errors", get: (j) => (j.errors || []).slice(0, 3).map((e) => h("div", { class: "error" }, typeof e === "string" ? e : JSON.stringify(e))) },
      { title: "", get: (j) => (j.state === "RUNNING" ? button("Cancel", () =>
        act(`Job ${j.id} cancelled`, () => api("DELETE", `/api/dead-letters/jobs/${j.id}`)), "danger") : "") },
    ], items, { empty: "No replay job yet." }));
  }, 3000);
}

async function audit(ctx, header) {
  const res = await get("/api/dead-letters/audit?page_size=200");
  mount(ctx.main, header, section("Audit trail: who did what to which records", table([
    { title: "When", get: (a) => fmtTime(a.at) },
    { title: "Who", get: (a) => a.actor },
    { title: "Action", get: (a) => h("span", { class: "badge" }, a.action) },
    { title: "Records", get: (a) => (Array.isArray(a.record_ids) ? a.record_ids.join(", ") : a.record_ids ?? "") },
    { title: "Filter", get: (a) => (a.filter ? JSON.stringify(a.filter) : "") },
    { title: "Note", get: (a) => a.note ?? "" },
    { title: "Result", get: (a) => (typeof a.result === "string" ? a.result : JSON.stringify(a.result)) },
  ], res.items || [], { id: "audit-table", empty: "Nothing done yet." })));
}
