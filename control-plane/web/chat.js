// Chat: pick an agent, send it a message, and follow a thread live: its steps as
// they start and end, the model's text as it streams, approvals to answer in the
// thread, and its whole history (paged from the API, only the visible rows drawn).
//
// How the live text stays exact: GET …/threads/{id} answers `live` (the text the
// open model step streamed so far, and the feed's position then, `event_id`). The
// page shows that text and appends only the `text` events newer than `event_id`.
// Messages are keyed by id, steps by number, approvals by id, so an event the
// snapshot already held is applied once. Events that arrive while a snapshot is
// being read wait for it, then are applied the same way.

import { api, el, may, hashFor, since, showError, clearError } from "./api.js";
import * as live from "./live.js";

const FINISHED = new Set(["completed", "failed", "killed"]);
const ROW_ESTIMATE = 64; // px, for rows not yet measured
const OVERSCAN = 600; // px drawn above and below what is visible

let section = null;
let agentName = null;
let threadId = null;
let generation = 0; // bumps on every show(): late answers of an older one are dropped

/** What the page knows of the thread on screen. */
const state = {
  thread: null, // the summary (status, metrics)
  messages: new Map(), // id -> message
  steps: new Map(), // number -> step
  approvals: new Map(), // id -> {id, tool, actions, why, status, by}
  next: null, // the URL of the next page of the history, while there is more
  loading: false, // a page or the snapshot is being read
  buffered: [], // events that came while the snapshot was read
  stream: null, // {step, text, cutoff, ended}
  replyTo: null, // the message id a message sent now answers
  replyChosen: false, // the person picked it (else: the newest message)
};

// ---- the virtualised history -------------------------------------------------

const heights = new Map(); // row key -> measured px
let rows = []; // the sorted items: {key, time, order, item}
let drawn = new Map(); // key -> {node, rev}
let revs = new Map(); // key -> a number that changes when the item changes
let drawQueued = false;
let stickToBottom = true;
/** Where draw() last scrolled the history to (as the browser clamped it). */
let ownTop = null;

function timeOf(text) {
  const t = Date.parse(text ?? "");
  return Number.isNaN(t) ? Number.MAX_SAFE_INTEGER : t;
}

function rebuildRows() {
  rows = [];
  for (const m of state.messages.values()) {
    rows.push({ key: `m${m.id}`, time: timeOf(m.created_at), order: 1, id: m.id, item: m });
  }
  for (const s of state.steps.values()) {
    rows.push({ key: `s${s.number}`, time: timeOf(s.started_at), order: 0, id: s.number, item: s });
  }
  rows.sort((a, b) => a.time - b.time || a.order - b.order || a.id - b.id);
}

function bump(key) {
  revs.set(key, (revs.get(key) ?? 0) + 1);
}

function history() {
  return section.querySelector("#chat-history");
}

function atBottom(box) {
  return box.scrollTop + box.clientHeight >= box.scrollHeight - 24;
}

/** Redraws the history (rows changed); it stays at the bottom if it was there. */
function changed() {
  rebuildRows();
  queueDraw();
}

function queueDraw() {
  if (drawQueued) return;
  drawQueued = true;
  requestAnimationFrame(() => {
    drawQueued = false;
    draw();
  });
}

/** Scrolls `box` to `top`: where it landed. */
function scrollTo(box, top) {
  box.scrollTop = top;
  return box.scrollTop;
}

function draw() {
  const box = history();
  const spacer = box.querySelector(".chat-spacer");
  const offsets = new Array(rows.length + 1);
  offsets[0] = 0;
  for (let i = 0; i < rows.length; i++) offsets[i + 1] = offsets[i] + (heights.get(rows[i].key) ?? ROW_ESTIMATE);
  const total = offsets[rows.length];
  // The streamed text is the history's last row, so it grows inside the box: nothing
  // outside it (the approvals, the composer) moves while the model writes.
  const stream = box.querySelector("#chat-streaming");
  stream.style.top = `${total}px`;
  spacer.style.height = `${total + (stream.hidden ? 0 : stream.offsetHeight)}px`;
  // Follow the end only once the whole history is read (else it would read every page).
  const follow = stickToBottom && !state.next;
  if (follow) ownTop = scrollTo(box, total);
  const top = box.scrollTop - OVERSCAN;
  const bottom = box.scrollTop + box.clientHeight + OVERSCAN;
  const keep = new Map();
  let remeasure = false;
  for (let i = 0; i < rows.length; i++) {
    if (offsets[i + 1] < top) continue;
    if (offsets[i] > bottom) break;
    const row = rows[i];
    const rev = revs.get(row.key) ?? 0;
    let entry = drawn.get(row.key);
    if (!entry || entry.rev !== rev) {
      const node = row.key.startsWith("m") ? messageRow(row.item) : stepRow(row.item);
      node.dataset.key = row.key;
      if (entry) entry.node.replaceWith(node);
      else box.append(node);
      entry = { node, rev };
    }
    entry.node.style.top = `${offsets[i]}px`;
    keep.set(row.key, entry);
  }
  for (const [key, entry] of drawn) if (!keep.has(key)) entry.node.remove();
  drawn = keep;
  for (const [key, entry] of drawn) {
    const h = entry.node.offsetHeight;
    if (h > 0 && h !== heights.get(key)) {
      heights.set(key, h);
      remeasure = true;
    }
  }
  if (remeasure) queueDraw();
  else if (follow) ownTop = scrollTo(box, box.scrollHeight);
  // Near the end of what is read: read the next page.
  if (state.next && !state.loading && box.scrollTop + box.clientHeight >= total - OVERSCAN) readNextPage();
}

function onScroll() {
  const box = history();
  // Only the person's own scrolling decides whether the history follows the end: the
  // event of a scroll draw() made can come after a new row grew the box, when the
  // box is briefly not at its end.
  if (box.scrollTop !== ownTop) stickToBottom = atBottom(box);
  queueDraw();
}

// ---- rows ----------------------------------------------------------------------

function duration(ms) {
  if (ms === null || ms === undefined) return "";
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

function stepRow(step) {
  const parts = [`Step ${step.number}`, step.kind, step.description];
  const meta = [];
  if (step.ended_at || step.duration_ms !== null && step.duration_ms !== undefined) meta.push(duration(step.duration_ms));
  else if (step.started_at) meta.push(el("span", { class: "chat-elapsed", dataset: { since: step.started_at } }, `running ${since(step.started_at)}`));
  else meta.push("running");
  if (step.failed) meta.push("failed");
  if (step.usage) meta.push(`${step.usage.input_tokens} in / ${step.usage.output_tokens} out tokens`);
  return el("div", { class: `chat-row chat-step${step.failed ? " chat-failed" : ""}`, dataset: { step: step.number } },
    el("span", { class: "chat-step-what" }, parts.join(" · ")),
    el("span", { class: "chat-step-meta" }, ...meta.flatMap((m, i) => (i ? [" · ", m] : [m]))));
}

function messageRow(m) {
  const head = el("div", { class: "chat-msg-head" },
    el("span", { class: "chat-role" }, m.role === "tool" ? `tool ${m.tool_name ?? ""}` : m.role),
    el("span", { class: "chat-when" }, `#${m.id}${m.pending ? " · pending" : ""}`));
  if (may("talk") && m.role !== "tool") {
    head.append(el("button", { type: "button", class: "chat-reply", onclick: () => chooseReply(m.id) }, "Reply"));
  }
  const body = [];
  if (m.role === "tool") {
    body.push(el("details", { class: "chat-tool", ontoggle: queueDraw },
      el("summary", {}, `Result of ${m.tool_name ?? "a tool"}${m.is_error ? " (error)" : ""}`),
      el("pre", {}, m.content)));
  } else if (m.content) {
    body.push(el("div", { class: "chat-text" }, m.content));
  }
  for (const call of m.tool_calls ?? []) {
    body.push(el("details", { class: "chat-tool", ontoggle: queueDraw },
      el("summary", {}, `Tool call ${call.name}`),
      el("pre", {}, prettyJson(call.arguments))));
  }
  return el("div", { class: `chat-row chat-msg chat-${m.role}`, dataset: { message: m.id } }, head, ...body);
}

function prettyJson(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { return text; }
}

// ---- the state from the API and from events ----------------------------------

function putMessage(m) {
  const old = state.messages.get(m.id);
  if (old && old.pending === m.pending && old.content === m.content) return false;
  state.messages.set(m.id, m);
  bump(`m${m.id}`);
  return true;
}

function putStep(s) {
  const old = state.steps.get(s.number);
  // A step never goes back from ended to running.
  if (old && (old.ended_at || old.duration_ms !== null && old.duration_ms !== undefined) && !s.ended_at) return false;
  state.steps.set(s.number, { ...old, ...s });
  bump(`s${s.number}`);
  return true;
}

function stepEnded(number) {
  const s = state.steps.get(number);
  return !!s && (!!s.ended_at || s.duration_ms !== null && s.duration_ms !== undefined);
}

/** Applies a page of `GET …/threads/{id}`. */
function applyPage(view) {
  state.thread = view;
  for (const m of view.messages) putMessage(m);
  for (const s of view.steps) putStep(s);
  state.next = view.next;
}

function threadPath(after) {
  const base = `/api/agents/${encodeURIComponent(agentName)}/threads/${threadId}`;
  return after ? `${base}?after=${after}` : base;
}

/**
 * The cursor after everything read: a thread's messages have places 1, 2, 3… (a
 * pending one has none yet), read from the first, so the place of the last one read
 * is how many placed ones the page holds; and the newest step's number.
 */
function cursor() {
  let message = 0;
  for (const m of state.messages.values()) if (!m.pending) message++;
  let step = 0;
  for (const s of state.steps.values()) if (s.number > step) step = s.number;
  return `${message}.${step}`;
}

async function readNextPage() {
  const mine = generation;
  state.loading = true;
  try {
    const view = await api("GET", state.next);
    if (mine !== generation) return;
    applyPage(view);
    showHead();
    changed();
  } catch (e) {
    if (mine === generation) showError(e, history());
  } finally {
    if (mine === generation) {
      state.loading = false;
      if (tailQueued) { tailQueued = false; readTail(); }
    }
  }
}

let tailQueued = false;
/** Reads what is new after the cursor (a message event carries no id to key it by). */
function readTail() {
  if (threadId === null) return;
  if (state.next) {
    // The end is not read yet (an older page is on screen): an ended stream goes.
    if (state.stream?.ended) { state.stream = null; showStream(); }
    return;
  }
  if (state.loading) { tailQueued = true; return; }
  const mine = generation;
  state.loading = true;
  api("GET", `${threadPath(cursor())}&limit=1000`).then((view) => {
    if (mine !== generation) return;
    applyPage(view);
    queueThreadList();
    if (FINISHED.has(view.status) || state.stream?.ended && answered(state.stream.step)) state.stream = null;
    showHead();
    showStream();
    changed();
    updateTarget();
  }).catch((e) => {
    if (mine === generation) showError(e, history());
  }).finally(() => {
    if (mine !== generation) return;
    state.loading = false;
    if (tailQueued) { tailQueued = false; readTail(); }
  });
}

/** Whether the model's message of step `number` is in (the streamed text is then shown there). */
function answered(number) {
  const step = state.steps.get(number);
  const from = timeOf(step?.started_at);
  for (const m of state.messages.values()) if (m.role === "assistant" && timeOf(m.created_at) >= from) return true;
  return false;
}

function mine(data) {
  return threadId !== null && data.agent === agentName && data.thread_id === threadId;
}

/** Every event of the thread on screen goes through here (or waits for the snapshot). */
function onEvent(kind, data, id) {
  if (kind === "summary" || kind === "status" || kind === "thread_created" || kind === "step_started") {
    if (data.agent === agentName) queueThreadList();
  }
  if (!mine(data)) return;
  if (state.snapshotting) { state.buffered.push([kind, data, id]); return; }
  apply(kind, data, id);
}

function apply(kind, data, id) {
  switch (kind) {
    case "step_started":
      if (state.stream?.ended) { state.stream = null; showStream(); }
      if (putStep({ number: data.number, kind: data.kind, description: data.description, started_at: data.started_at, ended_at: null, duration_ms: null, failed: false })) changed();
      if (state.thread) {
        state.thread.step_number = Math.max(state.thread.step_number ?? 0, data.number);
        state.thread.current_step = data.description;
        showHead();
      }
      break;
    case "step_ended": {
      const s = state.steps.get(data.number) ?? { number: data.number, kind: "", description: "", started_at: null };
      if (putStep({ ...s, ended_at: s.ended_at ?? new Date().toISOString(), duration_ms: data.duration_ms, failed: data.failed, usage: data.usage })) changed();
      if (state.stream && state.stream.step === data.number) {
        state.stream.ended = true;
        readTail();
      }
      break;
    }
    case "text": {
      if (stepEnded(data.step)) return;
      const s = state.stream;
      if (s && s.step === data.step) {
        if (s.cutoff && !live.newer(id, s.cutoff)) return;
        s.text += data.text;
      } else if (!s || data.step > s.step || s.ended) {
        state.stream = { step: data.step, text: data.text, cutoff: null, ended: false };
      } else return;
      showStream();
      break;
    }
    case "message":
    case "input_taken":
      readTail();
      break;
    case "status":
      if (state.thread) {
        state.thread.status = data.status;
        if (data.error) state.thread.error = data.error;
      }
      if (FINISHED.has(data.status)) {
        // The streamed text stays until the message that holds it is read (no blink).
        if (state.stream) state.stream.ended = true;
        readTail();
      }
      showHead();
      break;
    case "summary":
      if (state.thread) { state.thread.summary = data.summary; showHead(); }
      break;
    case "approval":
      if (!state.approvals.has(data.approval_id)) {
        state.approvals.set(data.approval_id, { id: data.approval_id, tool: data.tool, actions: data.actions, why: data.why, status: "pending", by: null });
        showApprovals();
      }
      break;
    case "approval_answered": {
      const a = state.approvals.get(data.approval_id) ?? { id: data.approval_id, tool: "", actions: [] };
      state.approvals.set(data.approval_id, { ...a, status: data.outcome, by: data.by ?? null });
      showApprovals();
      break;
    }
    default:
  }
}

// ---- what is on screen besides the history -------------------------------------

function showStream() {
  const box = section.querySelector("#chat-streaming");
  const s = state.stream;
  const text = s ? s.text : "";
  box.hidden = !s || text === "";
  box.dataset.step = s ? s.step : "";
  if (box.textContent !== text) box.textContent = text;
  queueDraw();
}

function showHead() {
  const t = state.thread;
  const title = section.querySelector("#chat-thread-title");
  const status = section.querySelector("#chat-thread-status");
  const metrics = section.querySelector("#chat-thread-metrics");
  const kill = section.querySelector("#chat-kill");
  if (!t) {
    title.textContent = title.title = "New thread";
    status.textContent = "";
    metrics.textContent = "";
    kill.hidden = true;
    return;
  }
  title.textContent = title.title = `Thread ${t.id}${t.summary ? `: ${t.summary}` : ""}`;
  status.textContent = t.status;
  status.dataset.status = t.status;
  const usage = t.usage ? ` · ${t.usage.input_tokens} in / ${t.usage.output_tokens} out tokens` : "";
  metrics.textContent = `${t.step_number ?? 0} steps${usage}${t.error ? ` · ${t.error}` : ""}`;
  kill.hidden = !may("stop_threads") || FINISHED.has(t.status);
}

function showApprovals() {
  const list = section.querySelector("#chat-approvals");
  list.replaceChildren(...[...state.approvals.values()].map((a) => {
    const what = el("span", { class: "chat-approval-what" },
      `${a.tool} asks: ${(a.actions ?? []).join(", ")}`);
    const item = el("li", { class: "chat-approval", dataset: { approval: a.id, status: a.status } }, what);
    if (a.why?.length) item.append(el("span", { class: "chat-why" }, a.why.join("; ")));
    if (a.status === "pending") {
      if (may("answer_approvals")) {
        item.append(
          el("button", { type: "button", class: "chat-approve", onclick: (e) => answer(a.id, "approve", e.target) }, "Approve"),
          el("button", { type: "button", class: "chat-deny", onclick: (e) => answer(a.id, "deny", e.target) }, "Deny"));
      } else {
        item.append(el("span", { class: "chat-outcome" }, "waiting for someone who may answer"));
      }
    } else {
      item.append(el("span", { class: "chat-outcome" }, `${a.status}${a.by ? ` by ${a.by}` : ""}`));
    }
    return item;
  }));
}

async function answer(id, decision, button) {
  clearError(button);
  try {
    const view = await api("POST", `/api/approvals/${encodeURIComponent(id)}`, { decision });
    const a = state.approvals.get(id) ?? { id, tool: view.tool, actions: view.actions };
    state.approvals.set(id, { ...a, status: view.status, by: view.decided_by });
    showApprovals();
  } catch (e) {
    showError(e, button);
  }
}

function chooseReply(messageId) {
  state.replyTo = messageId;
  state.replyChosen = true;
  updateTarget();
  section.querySelector("#chat-input").focus();
}

/** Says where a message sent now goes: a reply into this thread, or a new message. */
function updateTarget() {
  const target = section.querySelector("#chat-target");
  const cancel = section.querySelector("#chat-target-cancel");
  if (!state.replyChosen) {
    let newest = null;
    for (const m of state.messages.values()) if (m.role !== "tool" && (newest === null || m.id > newest)) newest = m.id;
    state.replyTo = threadId === null ? null : newest;
  }
  if (state.replyTo !== null && threadId !== null) {
    target.textContent = `Replying to message #${state.replyTo}: goes to thread ${threadId}.`;
    cancel.hidden = false;
  } else {
    target.textContent = `A new message to ${agentName ?? "the agent"}: it starts a thread or joins the one it is routed to.`;
    cancel.hidden = true;
  }
}

async function send(event) {
  event.preventDefault();
  const input = section.querySelector("#chat-input");
  const button = section.querySelector("#chat-send");
  const content = input.value;
  if (!content.trim() || !agentName) return;
  clearError(button);
  button.disabled = true;
  try {
    const body = { content };
    if (state.replyTo !== null && threadId !== null) body.reply_to = state.replyTo;
    const sent = await api("POST", `/api/agents/${encodeURIComponent(agentName)}/messages`, body);
    input.value = "";
    state.replyChosen = false;
    if (sent.thread_id !== threadId) window.location.hash = hashFor("chat", agentName, sent.thread_id);
    else readTail();
  } catch (e) {
    showError(e, button);
  } finally {
    button.disabled = false;
  }
}

async function kill(event) {
  const button = event.target;
  clearError(button);
  try {
    const answerBody = await api("DELETE", threadPath());
    if (state.thread) state.thread.status = answerBody.status;
    showHead();
  } catch (e) {
    showError(e, button);
  }
}

async function changeModel(event) {
  event.preventDefault();
  const input = section.querySelector("#chat-model");
  const button = section.querySelector("#chat-model-save");
  clearError(button);
  try {
    const agent = await api("PATCH", `/api/agents/${encodeURIComponent(agentName)}`, { model: input.value.trim() });
    input.value = agent.model ?? "";
    section.querySelector("#chat-model-shown").textContent = `Model: ${agent.model ?? "the default"}`;
  } catch (e) {
    showError(e, button);
  }
}

// ---- the thread list -------------------------------------------------------------

let listQueued = false;
function queueThreadList() {
  if (listQueued) return;
  listQueued = true;
  // Many events come at once: one read for all of them.
  setTimeout(() => { listQueued = false; showThreadList().catch(() => {}); }, 300);
}

async function showThreadList() {
  if (!agentName) return;
  const mineNow = generation;
  const threads = await api("GET", `/api/agents/${encodeURIComponent(agentName)}/threads`);
  if (mineNow !== generation) return;
  const list = section.querySelector("#chat-thread-list");
  threads.sort((a, b) => b.id - a.id);
  list.replaceChildren(...threads.map((t) => el("li", { dataset: { thread: t.id } },
    el("a", { href: hashFor("chat", agentName, t.id), "aria-current": t.id === threadId ? "page" : null },
      el("span", { class: "chat-list-title" }, t.summary ?? `Thread ${t.id}`),
      el("span", { class: "chat-list-meta" },
        el("span", { class: "chat-status", dataset: { status: t.status } }, t.status),
        ` · ${t.step_number} steps · `,
        el("span", { class: "chat-elapsed", dataset: FINISHED.has(t.status) ? {} : { since: t.created_at } }, duration(t.elapsed_ms)),
        t.current_step ? ` · ${t.current_step}` : "")))));
  section.querySelector("#chat-no-threads").hidden = threads.length > 0;
}

// ---- the view --------------------------------------------------------------------

export function init() {
  section = document.getElementById("view-chat");
  for (const kind of ["message", "step_started", "step_ended", "text", "input_taken", "status", "summary", "approval", "approval_answered", "thread_created"]) {
    live.on(kind, (data, id) => onEvent(kind, data, id));
  }
  history().addEventListener("scroll", onScroll, { passive: true });
  section.querySelector("#chat-form").addEventListener("submit", send);
  section.querySelector("#chat-target-cancel").addEventListener("click", () => {
    state.replyTo = null;
    state.replyChosen = true;
    updateTarget();
  });
  section.querySelector("#chat-kill").addEventListener("click", kill);
  section.querySelector("#chat-model-form").addEventListener("submit", changeModel);
  section.querySelector("#chat-agent").addEventListener("change", (e) => {
    window.location.hash = hashFor("chat", e.target.value);
  });
  // Only labels: no request.
  setInterval(() => {
    if (section.hidden) return;
    for (const label of section.querySelectorAll(".chat-elapsed[data-since]")) {
      if (label.dataset.since) label.textContent = label.closest(".chat-step") ? `running ${since(label.dataset.since)}` : since(label.dataset.since);
    }
  }, 1000);
  section.querySelector("#chat-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) section.querySelector("#chat-form").requestSubmit();
  });
}

function reset() {
  state.thread = null;
  state.messages = new Map();
  state.steps = new Map();
  state.approvals = new Map();
  state.next = null;
  state.loading = false;
  state.buffered = [];
  state.stream = null;
  state.snapshotting = false;
  if (!state.keepReply) { state.replyTo = null; state.replyChosen = false; }
  heights.clear();
  revs = new Map();
  for (const entry of drawn.values()) entry.node.remove();
  drawn = new Map();
  rows = [];
  stickToBottom = true;
  tailQueued = false;
}

export async function show(_section, params) {
  const [agent, thread] = params;
  const mineNow = ++generation;
  const sameThread = agent === agentName && Number(thread) === threadId;
  state.keepReply = sameThread;
  reset();
  // From now on this thread's events wait for its snapshot (which is read later, so
  // nothing published before it is missed).
  agentName = agent ?? null;
  threadId = thread !== undefined && /^\d+$/.test(thread) ? Number(thread) : null;
  state.snapshotting = threadId !== null;
  const agents = await api("GET", "/api/agents");
  if (mineNow !== generation) return;
  const select = section.querySelector("#chat-agent");
  select.replaceChildren(...agents.map((a) => el("option", { value: a.name }, a.name)));
  section.querySelector("#chat-no-agent").hidden = agents.length > 0;
  const chosen = agents.find((a) => a.name === agent) ?? agents[0];
  agentName = chosen?.name ?? null;
  if (!chosen || chosen.name !== agent) {
    threadId = null;
    state.snapshotting = false;
    state.buffered = [];
  }
  if (!chosen) return;
  select.value = agentName;
  section.querySelector("#chat-new").setAttribute("href", hashFor("chat", agentName));
  section.querySelector("#chat-model-shown").textContent = `Model: ${chosen.model ?? "the default"}`;
  section.querySelector("#chat-model").value = chosen.model ?? "";
  section.querySelector("#chat-model-form").hidden = !may("configure_agents");
  section.querySelector("#chat-model-shown").hidden = may("configure_agents");
  section.querySelector("#chat-form").hidden = !may("talk");
  showHead();
  showStream();
  showApprovals();
  updateTarget();
  changed();
  const listed = showThreadList();
  if (threadId !== null) await readSnapshot(mineNow);
  await listed;
}

/** Reads the thread's first page and its pending approvals, then the events that came meanwhile. */
async function readSnapshot(mineNow) {
  state.loading = true;
  try {
    const [view, approvals] = await Promise.all([
      api("GET", `${threadPath()}`),
      api("GET", `/api/approvals?agent=${encodeURIComponent(agentName)}`),
    ]);
    if (mineNow !== generation) return;
    applyPage(view);
    // A long history opens at its start; scrolling down reads the rest, page by page.
    if (view.next) stickToBottom = false;
    for (const a of approvals) {
      if (a.thread_id !== threadId) continue;
      state.approvals.set(a.id, { id: a.id, tool: a.tool, actions: a.actions, why: a.detail ? [a.detail] : [], status: a.status, by: a.decided_by });
    }
    state.stream = view.live && !stepEnded(view.live.step) ? { step: view.live.step, text: view.live.text, cutoff: view.live.event_id, ended: false } : null;
    state.snapshotting = false;
    state.loading = false;
    const buffered = state.buffered;
    state.buffered = [];
    for (const [kind, data, id] of buffered) apply(kind, data, id);
    showHead();
    showStream();
    showApprovals();
    updateTarget();
    changed();
  } finally {
    if (mineNow === generation) {
      state.snapshotting = false;
      state.loading = false;
    }
  }
}

export function hide() {
  generation++;
}
