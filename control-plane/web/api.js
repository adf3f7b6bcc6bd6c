// The page's one way to the API, and what the logged-in person may do. Every request
// goes to this origin with the session cookie; a state-changing one carries the
// session's CSRF token (from GET /api/session) in the X-CSRF-Token header.

/** Who is logged in: `{user, role, may: [act…], csrf_token, event_id}`, and the closed
 * sets forms offer, `backends` and `presets` (GET /api/session). */
export const session = { user: null, role: null, may: [], csrf_token: null, event_id: null, backends: [], presets: [] };

/** Whether the person's role allows `act` (an act of `may`: "talk", "manage_tasks", …). */
export function may(act) {
  return session.may.includes(act);
}

/** An API error: the server's message, with the HTTP status. */
export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

/**
 * `method` on `path` (under this origin), with `body` as JSON when given (a FormData
 * goes as it is). The JSON answer, or null for a 204. A 401 sends the browser to the
 * login page; any other failure throws an ApiError with the API's own message.
 */
export async function api(method, path, body) {
  const headers = {};
  if (method !== "GET" && session.csrf_token) headers["X-CSRF-Token"] = session.csrf_token;
  let payload;
  if (body instanceof FormData) payload = body;
  else if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  }
  const response = await fetch(path, { method, headers, body: payload, credentials: "same-origin" });
  if (response.status === 401) {
    window.location.assign("/login");
    throw new ApiError("logged out", 401);
  }
  if (!response.ok) {
    let message = `${method} ${path}: ${response.status}`;
    try { message = (await response.json()).error.message; } catch (_) { /* not JSON */ }
    throw new ApiError(message, response.status);
  }
  return response.status === 204 ? null : response.json();
}

/** Reads the session (`start` calls it once, before anything else). */
export async function loadSession() {
  Object.assign(session, await api("GET", "/api/session"));
}

/**
 * Shows `error` where the person acted: in `near` (an element with class "error",
 * or one is put after it), else in the page's own error line.
 */
export function showError(error, near) {
  let box = document.getElementById("error");
  if (near) {
    box = near.classList.contains("error") ? near : near.nextElementSibling;
    if (!box || !box.classList.contains("error") || box.id === "error") {
      box = el("p", { class: "error", role: "alert" });
      near.after(box);
    }
  }
  box.textContent = error.message ?? String(error);
  box.hidden = false;
}

/** Hides the error `showError(…, near)` showed. */
export function clearError(near) {
  const box = near ? (near.classList.contains("error") ? near : near.nextElementSibling) : document.getElementById("error");
  if (box && box.classList.contains("error")) box.hidden = true;
}

/**
 * A new element: `el("button", {type: "button", onclick: f}, "Approve")`. Attributes
 * starting with "on" are listeners; `class`, `dataset` and the rest are set as they
 * are; children are nodes or text (never HTML: text is never parsed).
 */
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

/** "3 s", "4 min", "2 h": how long since an RFC 3339 time (or between two). */
export function since(from, to = new Date()) {
  const seconds = Math.max(0, Math.round((new Date(to) - new Date(from)) / 1000));
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min`;
  return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
}

/** The page's address of a view and its parameters: `hashFor("chat", "scout", 4)` → "#chat/scout/4". */
export function hashFor(name, ...params) {
  return "#" + [name, ...params.map((p) => encodeURIComponent(String(p)))].join("/");
}
