// The shell: who is logged in, the navigation, and the router. The URL's hash names
// the view and what it shows, so a reload shows the same thing:
//   #fleet                 every agent at once
//   #chat/<agent>[/<id>]   an agent's threads, and one thread
//   #board[/<task id>]     the task board, and one task
//   #agents[/<name>]       creating and configuring agents
// Each view is a module with `show(section, params)` (called on every visit, with
// the hash's parts after the view's name) and, optionally, `hide()`.

import { api, loadSession, session, showError, clearError } from "./api.js";
import * as live from "./live.js";
import * as fleet from "./fleet.js";
import * as chat from "./chat.js";
import * as board from "./board.js";
import * as agents from "./agents.js";

const views = { fleet, chat, board, agents };
let current = null;

/** The view and its parameters the hash names (`#chat/scout/4` → ["chat", ["scout", "4"]]). */
function parseHash(hash) {
  const [name, ...params] = hash.replace(/^#/, "").split("/").map(decodeURIComponent);
  return views[name] ? [name, params.filter((p) => p !== "")] : ["fleet", []];
}

function route() {
  const [name, params] = parseHash(window.location.hash);
  clearError();
  if (current && current !== name) views[current].hide?.();
  current = name;
  for (const view of Object.keys(views)) {
    document.getElementById(`view-${view}`).hidden = view !== name;
    const link = document.getElementById(`nav-${view}`);
    if (view === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  Promise.resolve(views[name].show(document.getElementById(`view-${name}`), params)).catch((e) => showError(e));
}

async function logOut() {
  await api("POST", "/logout");
  window.location.assign("/login");
}

async function start() {
  await loadSession();
  document.getElementById("who-name").textContent = session.user;
  document.getElementById("who-role").textContent = session.role;
  document.getElementById("logout").addEventListener("click", () => logOut().catch((e) => showError(e)));
  for (const view of Object.values(views)) view.init?.();
  window.addEventListener("hashchange", route);
  // After a reset, the view on screen reads what it shows again.
  live.onResync(() => route());
  route();
  live.start();
}

start().catch((e) => showError(e));
