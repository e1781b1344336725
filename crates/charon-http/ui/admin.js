// Admin pages: policies (set/clear), users (add/delete, permissions) and vhosts (add/delete),
// over RabbitMQ's management API paths.

import {
  act, api, argsEditor, button, field, fmtNum, formValues, get, h, kv, mount, parseArgs, section,
  seg, select, table, toast, vhostNames,
} from "./lib.js";

const POLICY_KEYS = [
  ["dead-letter-exchange", "dlx"], ["dead-letter-routing-key", "key"], ["message-ttl", "60000"],
  ["max-length", "1000"], ["overflow", "reject-publish"], ["delivery-limit", "5"], ["expires", "600000"],
  ["dead-letter-strategy", "at-least-once"], ["queue-mode", "lazy"],
];

export async function policies(ctx) {
  const live = h("div");
  const vhosts = await vhostNames();
  const form = h("form", { id: "add-policy" },
    h("div", { class: "row" },
      field("Vhost", select("vhost", vhosts, "/")),
      field("Name", h("input", { name: "name", required: true })),
      field("Pattern", h("input", { name: "pattern", required: true, placeholder: "^orders\\." }), "regular expression on names"),
      field("Apply to", select("apply_to", [["queues", "Queues"], ["exchanges", "Exchanges"], ["all", "Exchanges and queues"],
        ["classic_queues", "Classic queues"], ["quorum_queues", "Quorum queues"]], "queues")),
      field("Priority", h("input", { name: "priority", type: "number", value: "0" }))),
    field("Definition", argsEditor("definition", POLICY_KEYS)),
    h("button", { class: "primary" }, "Add / update policy"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = formValues(form);
    let definition;
    try { definition = parseArgs(v.definition); } catch (e) { return toast(e.message, "error"); }
    if (await act(`Policy ${v.name} set`, () => api("PUT", `/api/policies/${seg(v.vhost)}/${seg(v.name)}`, {
      pattern: v.pattern, definition, priority: parseInt(v.priority || "0", 10), "apply-to": v.apply_to,
    }))) ctx.refresh();
  });
  mount(ctx.main, h("h1", {}, "Policies"), live, section("Add / update a policy", form));
  ctx.refresh = async () => {
    const list = await get("/api/policies");
    if (!ctx.current) return;
    mount(live, section(`User policies (${list.length})`, table([
      { title: "Vhost", get: (p) => p.vhost },
      { title: "Name", get: (p) => p.name },
      { title: "Pattern", get: (p) => h("span", { class: "mono" }, p.pattern) },
      { title: "Apply to", get: (p) => p["apply-to"] },
      { title: "Definition", get: (p) => kv(p.definition) },
      { title: "Priority", class: "num", get: (p) => p.priority },
      { title: "", get: (p) => button("Clear", async () => {
        if (!confirm(`Clear policy ${p.name}?`)) return;
        await act(`Policy ${p.name} cleared`, () => api("DELETE", `/api/policies/${seg(p.vhost)}/${seg(p.name)}`));
        ctx.refresh();
      }, "danger") },
    ], list, { empty: "No policies.", id: "policies-table" })));
  };
  ctx.every(ctx.refresh, 10000);
}

const tagsOf = (u) => (Array.isArray(u.tags) ? u.tags : String(u.tags || "").split(",").filter(Boolean));

export async function users(ctx) {
  const live = h("div");
  const perms = h("div");
  const vhosts = await vhostNames();
  const form = h("form", { class: "row", id: "add-user" },
    field("Username", h("input", { name: "name", required: true })),
    field("Password", h("input", { name: "password", type: "password" })),
    field("Tags", h("input", { name: "tags", placeholder: "administrator, management" }),
      "administrator, monitoring, policymaker, management, impersonator"),
    h("button", { class: "primary" }, "Add / update user"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = formValues(form);
    const tags = v.tags.split(",").map((t) => t.trim()).filter(Boolean);
    if (await act(`User ${v.name} saved`, () => api("PUT", `/api/users/${seg(v.name)}`, { password: v.password, tags: tags.join(",") }))) {
      form.reset();
      ctx.refresh();
    }
  });
  const permForm = h("form", { class: "row", id: "set-permission" },
    field("User", h("input", { name: "user", required: true })),
    field("Vhost", select("vhost", vhosts, "/")),
    field("Configure", h("input", { name: "configure", value: ".*" })),
    field("Write", h("input", { name: "write", value: ".*" })),
    field("Read", h("input", { name: "read", value: ".*" })),
    h("button", { class: "primary" }, "Set permission"));
  permForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = formValues(permForm);
    if (await act(`Permissions of ${v.user} on ${v.vhost} set`, () => api("PUT", `/api/permissions/${seg(v.vhost)}/${seg(v.user)}`,
      { configure: v.configure, write: v.write, read: v.read }))) ctx.refresh();
  });
  mount(ctx.main, h("h1", {}, "Users"), live, section("Add / update a user", form),
    section("Permissions", perms, h("h2", {}, "Set permission"), permForm));
  ctx.refresh = async () => {
    const [list, plist] = await Promise.all([get("/api/users"), get("/api/permissions").catch(() => [])]);
    if (!ctx.current) return;
    mount(live, section(`All users (${list.length})`, table([
      { title: "Name", get: (u) => u.name },
      { title: "Tags", get: (u) => tagsOf(u).map((t) => h("span", { class: "badge" }, t)) },
      { title: "Can access vhosts", get: (u) => plist.filter((p) => p.user === u.name).map((p) => p.vhost).join(", ") || "No access" },
      { title: "Has password", get: (u) => (u.password_hash ? "●" : "○") },
      { title: "", get: (u) => button("Delete", async () => {
        if (!confirm(`Delete user ${u.name}?`)) return;
        await act(`User ${u.name} deleted`, () => api("DELETE", `/api/users/${seg(u.name)}`));
        ctx.refresh();
      }, "danger") },
    ], list, { id: "users-table" })));
    mount(perms, table([
      { title: "User", get: (p) => p.user },
      { title: "Vhost", get: (p) => p.vhost },
      { title: "Configure", get: (p) => h("span", { class: "mono" }, p.configure) },
      { title: "Write", get: (p) => h("span", { class: "mono" }, p.write) },
      { title: "Read", get: (p) => h("span", { class: "mono" }, p.read) },
      { title: "", get: (p) => button("Clear", async () => {
        await act(`Permissions of ${p.user} on ${p.vhost} cleared`, () => api("DELETE", `/api/permissions/${seg(p.vhost)}/${seg(p.user)}`));
        ctx.refresh();
      }, "danger") },
    ], plist, { empty: "No permissions." }));
  };
  ctx.every(ctx.refresh, 10000);
}

export async function vhosts(ctx) {
  const live = h("div");
  const form = h("form", { class: "row", id: "add-vhost" },
    field("Name", h("input", { name: "name", required: true })),
    field("Description", h("input", { name: "description" })),
    h("button", { class: "primary" }, "Add virtual host"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = formValues(form);
    if (await act(`Vhost ${v.name} added`, () => api("PUT", `/api/vhosts/${seg(v.name)}`, { description: v.description }))) {
      form.reset();
      ctx.refresh();
    }
  });
  mount(ctx.main, h("h1", {}, "Virtual hosts"), live, section("Add a new virtual host", form));
  ctx.refresh = async () => {
    const list = await get("/api/vhosts");
    if (!ctx.current) return;
    mount(live, section(`All virtual hosts (${list.length})`, table([
      { title: "Name", get: (v) => v.name },
      { title: "Description", get: (v) => v.description || "" },
      { title: "Ready", class: "num", get: (v) => fmtNum(v.messages_ready) },
      { title: "Unacked", class: "num", get: (v) => fmtNum(v.messages_unacknowledged) },
      { title: "Total", class: "num", get: (v) => fmtNum(v.messages) },
      { title: "", get: (v) => (v.name === "/" ? "" : button("Delete", async () => {
        if (!confirm(`Delete vhost ${v.name} with all its queues and exchanges?`)) return;
        await act(`Vhost ${v.name} deleted`, () => api("DELETE", `/api/vhosts/${seg(v.name)}`));
        ctx.refresh();
      }, "danger")) },
    ], list, { id: "vhosts-table" })));
  };
  ctx.every(ctx.refresh, 10000);
}
