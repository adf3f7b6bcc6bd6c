// The shell: who is logged in, the navigation, and the Fleet view. Every request goes
// to this origin with the session cookie; a state-changing one carries the session's
// CSRF token (read from GET /api/session) in the X-CSRF-Token header.

let csrf = null;

async function api(method, path) {
  const headers = {};
  if (method !== "GET" && csrf) headers["X-CSRF-Token"] = csrf;
  const response = await fetch(path, { method, headers, credentials: "same-origin" });
  if (response.status === 401) {
    window.location.assign("/login");
    throw new Error("logged out");
  }
  if (!response.ok) {
    let message = `${method} ${path}: ${response.status}`;
    try { message = (await response.json()).error.message; } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  return response.status === 204 ? null : response.json();
}

function showError(error) {
  const box = document.getElementById("error");
  box.textContent = error.message;
  box.hidden = false;
}

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text ?? "";
  return td;
}

async function showFleet() {
  const agents = await api("GET", "/api/agents");
  const body = document.querySelector("#agents tbody");
  body.replaceChildren(...agents.map((agent) => {
    const row = document.createElement("tr");
    row.dataset.agent = agent.name;
    row.append(cell(agent.name), cell(agent.backend), cell(agent.model), cell(agent.worker.state));
    return row;
  }));
  document.getElementById("no-agents").hidden = agents.length > 0;
}

function route() {
  const view = window.location.hash === "#board" ? "board" : "fleet";
  for (const name of ["fleet", "board"]) {
    document.getElementById(name).hidden = name !== view;
    const link = document.getElementById(`nav-${name}`);
    if (name === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (view === "fleet") showFleet().catch(showError);
}

async function logOut() {
  await api("POST", "/logout");
  window.location.assign("/login");
}

async function start() {
  const session = await api("GET", "/api/session");
  csrf = session.csrf_token;
  document.getElementById("who-name").textContent = session.user;
  document.getElementById("who-role").textContent = session.role;
  document.getElementById("logout").addEventListener("click", () => logOut().catch(showError));
  window.addEventListener("hashchange", route);
  route();
}

start().catch(showError);
