// Shared helpers of the Charon web UI: the management API client (basic auth, RabbitMQ's
// paths), DOM building, tables, forms, formatting. No framework, no build step.

const AUTH_KEY = "charon.auth";

export const auth = {
  get header() { return sessionStorage.getItem(AUTH_KEY); },
  get user() { return sessionStorage.getItem(AUTH_KEY + ".user"); },
  set(user, password) {
    const bytes = new TextEncoder().encode(`${user}:${password}`);
    let bin = "";
    for (const b of bytes) bin += String.fromCharCode(b);
    sessionStorage.setItem(AUTH_KEY, "Basic " + btoa(bin));
    sessionStorage.setItem(AUTH_KEY + ".user", user);
  },
  clear() {
    sessionStorage.removeItem(AUTH_KEY);
    sessionStorage.removeItem(AUTH_KEY + ".user");
  },
};

/** An error answered by the API (`{"error","reason"}`), with its HTTP status. */
export class ApiError extends Error {
  constructor(status, reason) {
    super(reason);
    this.status = status;
  }
}

let onUnauthorised = () => {};
export function setUnauthorisedHandler(f) { onUnauthorised = f; }

/** Calls the management API; returns the parsed JSON (or null for an empty answer). */
export async function api(method, path, body, extraHeaders = {}) {
  const headers = { Authorization: auth.header || "", ...extraHeaders };
  // credentials "omit": the browser then never shows its own basic-auth dialog on a 401 (the
  // API sends WWW-Authenticate, as RabbitMQ's does); the Authorization header is ours.
  const init = { method, headers, credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  const text = await resp.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = text; }
  }
  if (!resp.ok) {
    const reason = (data && (data.reason || data.error)) || `${resp.status} ${resp.statusText}`;
    if (resp.status === 401 && path !== "/api/whoami") onUnauthorised();
    throw new ApiError(resp.status, typeof reason === "string" ? reason : JSON.stringify(reason));
  }
  return data;
}

export const get = (path) => api("GET", path);

/** A path segment (vhost "/" becomes %2F, as the management API wants). */
export const seg = (s) => encodeURIComponent(s);

/** Builds an element: h("div", {class: "x", onclick: f}, child, "text", [more]). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "value") el.value = v;
    else if (k === "checked") el.checked = !!v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replaces the contents of `el`. */
export function mount(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

/** A table: columns = [{title, get: row => node|text, class?}]. */
export function table(columns, rows, { empty = "Nothing here yet.", id } = {}) {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  return h("table", { class: "grid", id },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.class }, c.title)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, columns.map((c) => h("td", { class: c.class }, c.get(r)))))));
}

/** A link to a UI route. */
export const link = (route, text) => h("a", { href: "#" + route }, text);

export function fmtNum(n) {
  if (n === undefined || n === null || n === "") return "–";
  if (typeof n !== "number") return String(n);
  return n.toLocaleString("en-US");
}

export function fmtRate(r) {
  if (r === undefined || r === null) return "–";
  return (Math.round(r * 10) / 10).toLocaleString("en-US") + "/s";
}

export function fmtBytes(b) {
  if (b === undefined || b === null) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return `${Math.round(b * 10) / 10} ${u[i]}`;
}

/** A timestamp (seconds or milliseconds since the epoch, or a date string) as local time. */
export function fmtTime(t) {
  if (t === undefined || t === null) return "–";
  let d;
  if (typeof t === "number") d = new Date(t < 1e12 ? t * 1000 : t);
  else d = new Date(t);
  return isNaN(d) ? String(t) : d.toLocaleString();
}

/** `message_stats.<key>_details.rate`, or undefined. */
export const rate = (obj, key) => obj?.message_stats?.[`${key}_details`]?.rate;

/** Shows a transient notice at the top of the page. */
export function toast(text, kind = "ok") {
  const box = document.getElementById("toasts");
  const t = h("div", { class: `toast ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
  box.append(t);
  while (box.children.length > 4) box.firstChild.remove();
  setTimeout(() => t.remove(), kind === "error" ? 9000 : 4000);
}

/** Runs an action, toasting its result or error; returns whether it succeeded. */
export async function act(what, f) {
  try {
    await f();
    toast(what);
    return true;
  } catch (e) {
    toast(`${what} failed: ${e.message}`, "error");
    return false;
  }
}

/** Vhost names the user may pick from. */
export async function vhostNames() {
  try {
    return (await get("/api/vhosts")).map((v) => v.name);
  } catch {
    return ["/"];
  }
}

export function select(name, options, value) {
  return h("select", { name },
    options.map((o) => {
      const [v, label] = Array.isArray(o) ? o : [o, o];
      return h("option", { value: v, selected: v === value ? "selected" : undefined }, label);
    }));
}

/** A labelled form field. */
export const field = (label, input, hint) =>
  h("label", { class: "field" }, h("span", {}, label), input, hint ? h("small", {}, hint) : null);

/** Form values by name (checkboxes as booleans). */
export function formValues(form) {
  const out = {};
  for (const el of form.elements) {
    if (!el.name) continue;
    out[el.name] = el.type === "checkbox" ? el.checked : el.value;
  }
  return out;
}

/** Parses "key = value" lines into an object; numbers and true/false become typed values. */
export function parseArgs(text) {
  const out = {};
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line) continue;
    const i = line.indexOf("=");
    if (i < 0) throw new Error(`"${line}" is not key = value`);
    const k = line.slice(0, i).trim();
    const v = line.slice(i + 1).trim();
    out[k] = typedValue(v);
  }
  return out;
}

function typedValue(v) {
  if (/^-?\d+$/.test(v)) return parseInt(v, 10);
  if (/^-?\d+\.\d+$/.test(v)) return parseFloat(v);
  if (v === "true") return true;
  if (v === "false") return false;
  if (v.startsWith("[") || v.startsWith("{")) {
    try { return JSON.parse(v); } catch { /* keep the text */ }
  }
  return v;
}

/** An arguments textarea with buttons that add common keys. */
export function argsEditor(name, keys) {
  const ta = h("textarea", { name, rows: 3, placeholder: "key = value (one per line)" });
  const add = (k, v) => () => {
    ta.value = (ta.value.trim() ? ta.value.trim() + "\n" : "") + `${k} = ${v}`;
    ta.focus();
  };
  return h("div", { class: "args" }, ta,
    h("div", { class: "chips" }, "Add: ",
      keys.map(([k, v]) => h("button", { type: "button", class: "chip", onclick: add(k, v) }, k))));
}

/** A JSON-ish value as short text (objects as JSON). */
export function show(v) {
  if (v === undefined || v === null) return "";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

/** Key/value pairs of an object as a small definition list. */
export function kv(obj) {
  const entries = Object.entries(obj || {});
  if (!entries.length) return h("span", { class: "muted" }, "none");
  return h("dl", { class: "kv" }, entries.map(([k, v]) => [h("dt", {}, k), h("dd", {}, show(v))]));
}

/** A collapsible section. */
export const section = (title, ...body) =>
  h("section", { class: "card" }, h("h2", {}, title), ...body);

export const button = (text, onclick, cls = "") => h("button", { type: "button", class: cls, onclick }, text);

/** The queue's dead-letter counters per reason, whatever name the API gives them. */
export function deadLetterCounts(q) {
  const c = q.dead_lettered || q.dead_letter_counts || q.dead_letters || q.charon_dead_lettered;
  if (c && typeof c === "object" && !Array.isArray(c)) {
    const out = {};
    for (const [k, v] of Object.entries(c)) {
      if (typeof v === "number") out[k] = v;
      else if (v && typeof v.count === "number") out[k] = v.count;
    }
    return out;
  }
  return {};
}

/** The queue's effective dead-letter exchange and routing key (argument, else policy). */
export function deadLetterTarget(q) {
  const a = q.arguments || {};
  const p = q.effective_policy_definition || {};
  const dlx = a["x-dead-letter-exchange"] ?? p["dead-letter-exchange"] ?? q.dead_letter_exchange;
  const key = a["x-dead-letter-routing-key"] ?? p["dead-letter-routing-key"];
  return dlx === undefined || dlx === null ? null : { exchange: dlx, routingKey: key ?? null };
}
