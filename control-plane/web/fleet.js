// Fleet: every agent at once — its worker's state (and which dial-in worker), backend
// and model, its running threads with their current step and elapsed time, what
// waits on a person (approvals and questions: what each waits on, and since when),
// and its usage. Read once (GET /api/agents, /api/approvals, each agent's threads),
// then kept current from the feed alone: `agent` (created, changed, destroyed),
// `worker`, `thread_created`, `status`, `step_started`, `step_ended`, `approval`,
// `approval_answered`. The header's badge counts the pending approvals from the same
// state, on every view.

import { api, el, hashFor, since } from "./api.js";
import * as live from "./live.js";

/** Threads shown as running (the API's statuses). */
const RUNNING = new Set(["running", "waiting_for_permission"]);

const state = {
  agents: new Map(), // name -> the agent as GET /api/agents shows it
  threads: new Map(), // name -> Map(thread id -> {id, status, step_number, current_step, created_at})
  approvals: new Map(), // approval id -> the approval as GET /api/approvals shows it
  usageSeen: new Set(), // "<agent>.<thread>.<step>": a step's usage counted once
  reading: new Set(), // names of agents being read (GET /api/agents/{name})
  workerMeanwhile: new Map(), // name -> a worker event for an agent being read
};
let loading = null;
/** Events that came while `load()` read the snapshot: applied after it, so none is lost. */
let queued = null;
let section = null;
let ticker = null;

/** The fleet's state (the agents view reads the agents from it too). */
export function agents() {
  return [...state.agents.values()].sort((a, b) => a.name.localeCompare(b.name));
}

/** Calls `fn()` after each change of the fleet's state (another view may follow it). */
const watchers = new Set();
export function onChange(fn) {
  watchers.add(fn);
  return () => watchers.delete(fn);
}

function changed() {
  renderBadge();
  if (section && !section.hidden) render();
  for (const fn of watchers) {
    try { fn(); } catch (error) { console.error("fleet watcher", error); }
  }
}

async function threadsOf(name) {
  const list = await api("GET", `/api/agents/${encodeURIComponent(name)}/threads`);
  return new Map(list.filter((t) => RUNNING.has(t.status)).map((t) => [t.id, t]));
}

/** Reads everything again (at start, and after the feed was reset). */
export function load() {
  queued = [];
  loading = (async () => {
    try {
      const [list, approvals] = await Promise.all([api("GET", "/api/agents"), api("GET", "/api/approvals")]);
      const threads = await Promise.all(list.map((agent) => threadsOf(agent.name).catch(() => new Map())));
      state.agents = new Map(list.map((agent) => [agent.name, agent]));
      state.threads = new Map(list.map((agent, i) => [agent.name, threads[i]]));
      state.approvals = new Map(approvals.filter((a) => a.status === "pending").map((a) => [a.id, a]));
    } finally {
      // The handlers are idempotent: an event the snapshot already holds changes nothing.
      const meanwhile = queued ?? [];
      queued = null;
      for (const apply of meanwhile) apply();
      changed();
    }
  })();
  return loading;
}

/** `handler`, or, while the snapshot is read, `handler` queued until it is in. */
function follow(kind, handler) {
  live.on(kind, (data) => {
    if (queued) queued.push(() => handler(data));
    else handler(data);
  });
}

async function refreshAgent(name) {
  state.reading.add(name);
  try {
    const agent = await api("GET", `/api/agents/${encodeURIComponent(name)}`);
    // A worker event that came while it was read is at least as new.
    if (state.workerMeanwhile.has(name)) agent.worker = state.workerMeanwhile.get(name);
    state.workerMeanwhile.delete(name);
    state.agents.set(name, agent);
    if (!state.threads.has(name)) state.threads.set(name, new Map());
  } catch (error) {
    if (error.status !== 404) throw error;
    forget(name);
  } finally {
    state.reading.delete(name);
    state.workerMeanwhile.delete(name);
  }
  changed();
}

function forget(name) {
  state.agents.delete(name);
  state.threads.delete(name);
  for (const [id, approval] of state.approvals) if (approval.agent === name) state.approvals.delete(id);
}

function threadOf(data) {
  if (!state.threads.has(data.agent)) state.threads.set(data.agent, new Map());
  return state.threads.get(data.agent);
}

export function init() {
  follow("agent", (data) => {
    if (data.change === "destroyed") {
      forget(data.agent);
      changed();
    } else {
      refreshAgent(data.agent).catch((e) => console.error("agent", e));
    }
  });
  follow("worker", (data) => {
    const { agent: name, thread_id: _thread, ...worker } = data;
    if (state.reading.has(name)) state.workerMeanwhile.set(name, worker);
    const agent = state.agents.get(name);
    if (!agent) return;
    agent.worker = worker;
    changed();
  });
  follow("thread_created", (data) => {
    if (!RUNNING.has(data.status)) return;
    const threads = threadOf(data);
    if (!threads.has(data.thread_id)) {
      threads.set(data.thread_id, {
        id: data.thread_id, status: data.status, step_number: 0, current_step: null,
        created_at: new Date().toISOString(),
      });
    }
    changed();
  });
  follow("status", (data) => {
    const threads = threadOf(data);
    const thread = threads.get(data.thread_id);
    if (RUNNING.has(data.status)) {
      if (thread) thread.status = data.status;
      else threads.set(data.thread_id, {
        id: data.thread_id, status: data.status, step_number: 0, current_step: null,
        created_at: new Date().toISOString(),
      });
    } else {
      threads.delete(data.thread_id);
      // Its usage, exactly (the live count may have missed or doubled a step).
      if (["completed", "failed", "killed"].includes(data.status) && state.agents.has(data.agent)) {
        refreshAgent(data.agent).catch((e) => console.error("status", e));
      }
    }
    changed();
  });
  follow("step_started", (data) => {
    const thread = threadOf(data).get(data.thread_id);
    if (!thread || data.number < thread.step_number) return;
    thread.step_number = data.number;
    thread.current_step = data.description;
    changed();
  });
  follow("step_ended", (data) => {
    const thread = threadOf(data).get(data.thread_id);
    if (thread && thread.step_number === data.number) thread.current_step = null;
    const key = `${data.agent}.${data.thread_id}.${data.number}`;
    const agent = state.agents.get(data.agent);
    if (data.usage && agent && !state.usageSeen.has(key)) {
      state.usageSeen.add(key);
      const usage = agent.usage ?? { input_tokens: 0, output_tokens: 0 };
      agent.usage = {
        input_tokens: usage.input_tokens + data.usage.input_tokens,
        output_tokens: usage.output_tokens + data.usage.output_tokens,
      };
    }
    changed();
  });
  follow("approval", (data) => {
    if (state.approvals.has(data.approval_id)) return;
    state.approvals.set(data.approval_id, {
      id: data.approval_id, agent: data.agent, thread_id: data.thread_id, tool: data.tool,
      actions: data.actions, status: "pending", requested_at: new Date().toISOString(),
      expires_at: data.expires_at, detail: null,
    });
    changed();
    // When it was asked, and its detail, as the API has them.
    api("GET", `/api/approvals/${encodeURIComponent(data.approval_id)}`).then((approval) => {
      if (!state.approvals.has(approval.id)) return;
      if (approval.status === "pending") state.approvals.set(approval.id, approval);
      else state.approvals.delete(approval.id);
      changed();
    }).catch((e) => console.error("approval", e));
  });
  follow("approval_answered", (data) => {
    if (state.approvals.delete(data.approval_id)) changed();
  });
  live.onResync(() => load().catch((e) => console.error("fleet", e)));
  load().catch((e) => console.error("fleet", e));
}

/** The pending approvals, oldest first. */
function pending() {
  return [...state.approvals.values()].sort((a, b) => a.requested_at.localeCompare(b.requested_at));
}

function renderBadge() {
  const badge = document.getElementById("pending-badge");
  if (!badge) return;
  const list = pending();
  badge.hidden = list.length === 0;
  badge.querySelector(".count").textContent = String(list.length);
  badge.setAttribute("aria-label", `${list.length} pending approval${list.length === 1 ? "" : "s"}`);
  // To where the oldest is answered: its thread.
  if (list.length) badge.setAttribute("href", hashFor("chat", list[0].agent, list[0].thread_id));
}

function tokens(usage) {
  if (!usage) return "–";
  return `${usage.input_tokens.toLocaleString()} in · ${usage.output_tokens.toLocaleString()} out`;
}

function workerCell(worker) {
  return el("td", { class: "worker", dataset: { label: "Worker" } },
    el("span", { class: "state", dataset: { state: worker.state } }, worker.state),
    worker.dial_in_worker ? el("span", { class: "sub" }, worker.dial_in_worker) : null,
    worker.state !== "running" && worker.last_exit ? el("span", { class: "sub" }, worker.last_exit) : null);
}

function threadItem(agent, thread) {
  return el("li", { dataset: { thread: thread.id } },
    el("a", { href: hashFor("chat", agent, thread.id) }, `#${thread.id}`), " ",
    el("span", { class: "state", dataset: { state: thread.status } }, thread.status), " ",
    el("span", { class: "step" }, thread.current_step ? `step ${thread.step_number}: ${thread.current_step}` : "between steps"),
    " ", el("span", { class: "elapsed", dataset: { since: thread.created_at } }, since(thread.created_at)));
}

function approvalItem(approval) {
  const what = approval.kind === "question" ? "question" : `${approval.tool}: ${(approval.actions ?? []).join(", ")}`;
  return el("li", { dataset: { approval: approval.id } },
    el("a", { href: hashFor("chat", approval.agent, approval.thread_id) }, `#${approval.thread_id}`), " ",
    el("span", { class: "waits" }, `waits on ${approval.kind === "question" ? "an answer" : "approval"} for ${what}`),
    " ", el("span", { class: "elapsed", dataset: { since: approval.requested_at } }, `since ${since(approval.requested_at)}`));
}

function row(agent) {
  const threads = [...(state.threads.get(agent.name)?.values() ?? [])].sort((a, b) => a.id - b.id);
  const waiting = pending().filter((a) => a.agent === agent.name);
  return el("tr", { dataset: { agent: agent.name } },
    el("td", { dataset: { label: "Name" } }, el("a", { href: hashFor("chat", agent.name) }, agent.name)),
    el("td", { dataset: { label: "Backend" } }, agent.backend),
    el("td", { dataset: { label: "Model" } }, agent.model ?? ""),
    workerCell(agent.worker),
    el("td", { class: "threads", dataset: { label: "Threads" } },
      threads.length ? el("ul", {}, threads.map((t) => threadItem(agent.name, t))) : "none running"),
    el("td", { class: "waiting", dataset: { label: "Waiting" } },
      waiting.length ? el("ul", {}, waiting.map(approvalItem)) : "nothing"),
    el("td", { class: "usage", dataset: { label: "Usage" } }, tokens(agent.usage)));
}

function render() {
  const list = agents();
  const body = section.querySelector("#agents tbody");
  // A link that had the keyboard's focus keeps it through the redraw.
  const focused = body.contains(document.activeElement) ? document.activeElement.getAttribute("href") : null;
  body.replaceChildren(...list.map(row));
  if (focused) body.querySelector(`a[href="${CSS.escape(focused)}"]`)?.focus();
  section.querySelector("#no-agents").hidden = list.length > 0;
}

function tick() {
  if (!section || section.hidden) return;
  for (const label of section.querySelectorAll(".elapsed[data-since]")) {
    const text = since(label.dataset.since);
    label.textContent = label.closest("[data-approval]") ? `since ${text}` : text;
  }
}

export async function show(target) {
  section = target;
  await loading;
  render();
  clearInterval(ticker);
  // Only the "elapsed" labels; nothing is requested.
  ticker = setInterval(tick, 1000);
}

export function hide() {
  clearInterval(ticker);
  ticker = null;
}
