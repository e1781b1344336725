// The Charon web UI's shell: login (basic auth checked against the management API), the
// navigation, hash routes (#/queues, #/dlq/%2F/name, ...), periodic refresh and the alarm banner.

import { api, auth, h, mount, setUnauthorisedHandler, ApiError } from "./lib.js";
import { connections, channels } from "./connections.js";
import { exchange, exchanges } from "./exchanges.js";
import { overview } from "./overview.js";
import { queue, queues } from "./queues.js";
import * as admin from "./admin.js";
import * as dlq from "./dlq.js";
import * as flow from "./flow.js";
import * as archive from "./archive.js";

const NAV = [
  ["overview", "Overview"],
  ["connections", "Connections"],
  ["channels", "Channels"],
  ["exchanges", "Exchanges"],
  ["queues", "Queues"],
  ["dlq", "Dead letters"],
  ["flow", "Dead-letter flow"],
  ["archive", "Archive"],
  ["policies", "Policies"],
  ["users", "Users"],
  ["vhosts", "Vhosts"],
];

/** route name -> render(ctx) */
const ROUTES = {
  overview,
  connections,
  channels,
  exchanges,
  exchange,
  queues,
  queue,
  dlq: dlq.render,
  flow: flow.render,
  archive: archive.render,
  policies: admin.policies,
  users: admin.users,
  vhosts: admin.vhosts,
};

let timers = [];
let generation = 0;

function clearTimers() {
  timers.forEach(clearInterval);
  timers = [];
}

/** Parses "#/queue/%2F/orders" into ["queue", "/", "orders"]. */
function parseHash() {
  const parts = location.hash.replace(/^#\/?/, "").split("?")[0].split("/").filter((p) => p !== "");
  return parts.map((p) => decodeURIComponent(p));
}

async function route() {
  if (!auth.header) return showLogin();
  clearTimers();
  const gen = ++generation;
  const [name = "overview", ...params] = parseHash();
  const render = ROUTES[name] || overview;
  const navName = { queue: "queues", exchange: "exchanges" }[name] || name;
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.dataset.route === navName);
  }
  const main = document.getElementById("main");
  mount(main, h("p", { class: "muted" }, "Loading…"));
  const ctx = {
    main,
    params,
    /** Calls f now and every `ms` while this page is shown. */
    every(f, ms = 5000) {
      const run = () => { if (gen === generation) f().catch(showError); };
      run();
      timers.push(setInterval(run, ms));
    },
    get current() { return gen === generation; },
  };
  try {
    await render(ctx);
  } catch (e) {
    showError(e);
  }
}

function showError(e) {
  if (e instanceof ApiError && e.status === 401) return;
  const main = document.getElementById("main");
  main.prepend(h("div", { class: "card error", role: "alert" }, `Error: ${e.message}`));
}

function showLogin(message) {
  clearTimers();
  document.getElementById("app").hidden = true;
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message || "";
  document.getElementById("username").focus();
}

function showApp() {
  document.getElementById("login").hidden = true;
  document.getElementById("app").hidden = false;
  document.getElementById("who").textContent = `User: ${auth.user}`;
  // The archive page only where the broker has the archive API.
  const archiveLink = document.getElementById("nav-archive");
  archiveLink.hidden = true;
  archive.available().then((yes) => { archiveLink.hidden = !yes; });
  pollAlarms();
}

/** Checks the credentials with `GET /api/whoami` (falling back to `/api/overview` on brokers
 * without it). */
async function checkLogin() {
  try {
    return await api("GET", "/api/whoami");
  } catch (e) {
    if (e.status === 404) {
      await api("GET", "/api/overview").catch(async (e2) => {
        if (e2.status === 404) return api("GET", "/api/queues");
        throw e2;
      });
      return { name: auth.user };
    }
    throw e;
  }
}

async function login(ev) {
  ev.preventDefault();
  const f = ev.target;
  auth.set(f.username.value, f.password.value);
  try {
    await checkLogin();
    f.password.value = "";
    showApp();
    if (!location.hash) location.hash = "#/overview";
    else route();
  } catch (e) {
    auth.clear();
    showLogin(e.status === 401 ? "Login failed: wrong username or password, or the user has no management tag."
      : `Login failed: ${e.message}`);
  }
}

let alarmTimer = null;
async function pollAlarms() {
  const banner = document.getElementById("alarm-banner");
  const check = async () => {
    if (!auth.header) return;
    try {
      const nodes = await api("GET", "/api/nodes");
      const alarms = [];
      for (const n of nodes || []) {
        if (n.mem_alarm) alarms.push(`memory alarm on ${n.name}`);
        if (n.disk_free_alarm) alarms.push(`disk alarm on ${n.name}`);
      }
      banner.hidden = alarms.length === 0;
      banner.textContent = alarms.length ? `⚠ Resource alarm: ${alarms.join(", ")} — publishers are blocked.` : "";
    } catch {
      banner.hidden = true;
    }
  };
  if (alarmTimer) clearInterval(alarmTimer);
  alarmTimer = setInterval(check, 10000);
  check();
}

function init() {
  mount(document.getElementById("nav"),
    NAV.map(([r, label]) => h("a", { href: `#/${r}`, dataset: { route: r }, id: `nav-${r}` }, label)));
  document.getElementById("login-form").addEventListener("submit", login);
  document.getElementById("logout").addEventListener("click", () => {
    auth.clear();
    showLogin();
  });
  setUnauthorisedHandler(() => {
    auth.clear();
    showLogin("Your session ended: please log in again.");
  });
  window.addEventListener("hashchange", route);
  if (auth.header) {
    checkLogin().then(() => { showApp(); route(); }, () => { auth.clear(); showLogin(); });
  } else {
    showLogin();
  }
}

init();
