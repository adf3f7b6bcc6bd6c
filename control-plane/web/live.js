// The page's one live stream: GET /api/events as an EventSource, from the position
// GET /api/session gave (`session.event_id`), so what the page read after taking it
// and what the stream sends meet with nothing lost. The browser reconnects by itself
// with Last-Event-ID and gets exactly what it missed; when the server says `reset`
// (the gap is no longer kept, or it restarted) or the stream had to be opened anew,
// every view re-reads what it shows (`onResync`). Views apply events idempotently
// (by message id, step number, approval id), since a re-read may already hold some.

import { session } from "./api.js";

const handlers = new Map(); // kind -> Set of functions
const resyncs = new Set();
let source = null;
let lastId = null;
let retry = null;

/** The event id's order: `<boot>.<seq>`; a later boot is newer than any of an earlier one. */
export function newer(id, than) {
  if (!than) return true;
  if (!id) return false;
  const [boot, seq] = id.split(".");
  const [thanBoot, thanSeq] = than.split(".");
  if (boot !== thanBoot) return parseInt(boot, 16) > parseInt(thanBoot, 16);
  return Number(seq) > Number(thanSeq);
}

/**
 * Calls `handler(data, id)` for every event of `kind` (the feed's kinds: "message",
 * "step_started", "approval", "task", …; `data` carries `agent` and `thread_id`).
 * Returns the function that stops it.
 */
export function on(kind, handler) {
  if (!handlers.has(kind)) {
    handlers.set(kind, new Set());
    if (source) listen(source, kind);
  }
  handlers.get(kind).add(handler);
  return () => handlers.get(kind).delete(handler);
}

/** Calls `handler(reason)` whenever what the page shows must be read again. */
export function onResync(handler) {
  resyncs.add(handler);
  return () => resyncs.delete(handler);
}

/** The id of the newest event the page has seen. */
export function position() {
  return lastId;
}

function dispatch(kind, event) {
  if (event.lastEventId) lastId = event.lastEventId;
  let data;
  try { data = JSON.parse(event.data); } catch (_) { return; }
  for (const handler of handlers.get(kind) ?? []) {
    try { handler(data, event.lastEventId); } catch (error) { console.error(kind, error); }
  }
}

function listen(target, kind) {
  target.addEventListener(kind, (event) => dispatch(kind, event));
}

function resync(reason) {
  for (const handler of resyncs) {
    try { handler(reason); } catch (error) { console.error("resync", error); }
  }
}

function setState(state) {
  const badge = document.getElementById("live");
  if (badge) {
    badge.dataset.state = state;
    badge.textContent = state === "live" ? "Live" : "Reconnecting…";
  }
}

function open(from) {
  const url = from ? `/api/events?last_event_id=${encodeURIComponent(from)}` : "/api/events";
  source = new EventSource(url, { withCredentials: true });
  for (const kind of handlers.keys()) listen(source, kind);
  source.addEventListener("reset", (event) => {
    // The stream goes on live from here: what came before is read again.
    resync(JSON.parse(event.data).reason);
  });
  source.addEventListener("open", () => setState("live"));
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) {
      // The browser gave up (the server refused or is gone): open it again from the
      // last event seen, in a while.
      setState("reconnecting");
      clearTimeout(retry);
      retry = setTimeout(() => open(lastId), 2000);
    } else {
      setState("reconnecting");
    }
  });
}

/** Opens the stream from `session.event_id` (call once, after the session is read). */
export function start() {
  lastId = session.event_id;
  open(lastId);
}
