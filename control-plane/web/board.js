// Board: the tasks in columns by status, creating one (with attachments), and one
// task in detail (#board/<id>): its plan (editable before Start), its questions with
// an answer box, pending approvals of its threads, the agent chain, its runs, its
// report, its history and the buttons valid in its status.
//
// Live from the one stream: each `task` event (task_id, event_id, at, kind, by,
// status, data) moves its card at once and extends the open task's history, which
// is kept by event id (a re-read that already holds an event never doubles it);
// the task's view is then read again (its plan, questions, runs, `actions`). Which
// buttons are valid is the API's `actions` (from its one status table), never
// worked out here.

import { api, el, hashFor, may, session, showError, clearError, since } from "./api.js";
import * as live from "./live.js";

/** The columns, in the order of a task's life, with the API's status words. */
const STATUSES = ["planning", "awaiting_input", "planned", "active", "waiting", "blocked",
  "review", "completed", "failed"];

/** The buttons' words as people read them, by the API's action (its route word). */
const LABELS = { start: "Start", pause: "Pause", resume: "Resume", complete: "Complete",
  fail: "Fail", reopen: "Reopen", retry: "Retry", accept: "Accept", "send-back": "Send back" };

const state = {
  section: null,
  visible: false,
  /** The list must be read again (first visit, or after a resync). */
  stale: true,
  /** Events that came while the list was being read: their tasks are read again after. */
  buffered: null,
  tasks: new Map(), // id -> task view (as listed)
  cards: new Map(), // id -> card element
  openId: null,
  open: null, // the open task's view
  history: new Map(), // event id -> event, of the open task
  approvals: new Map(), // approval id -> {approval, outcome}
  approvalsKey: null, // the threads the approvals were read for
  rendered: {}, // part -> JSON of what it shows (re-rendered only when it changes)
  refreshing: new Map(), // task id -> {running, again}
  seen: new Map(), // task id -> events seen (a read older than one is read again)
};

const manage = () => may("manage_tasks");

// ------------------------------------------------------------------ the columns

function columns() {
  return state.section.querySelector("#board-columns");
}

function column(status) {
  let list = columns().querySelector(`ul[data-status="${status}"]`);
  if (!list) {
    list = el("ul", { class: "cards", dataset: { status }, "aria-labelledby": `column-${status}` });
    columns().append(el("section", { class: "column", dataset: { status } },
      el("h2", { id: `column-${status}` }, status, " ", el("span", { class: "count" }, "0")),
      list));
  }
  return list;
}

function countColumns() {
  for (const list of columns().querySelectorAll("ul.cards")) {
    list.parentElement.querySelector(".count").textContent = String(list.children.length);
  }
}

function cardOf(task) {
  const card = el("li", { class: "card", dataset: { task: String(task.id), status: task.status } },
    el("a", { href: hashFor("board", task.id) }, `#${task.id} ${task.title}`),
    el("span", { class: "meta" }, task.assignee ? task.assignee : "no assignee"),
    task.waiting_on
      ? el("span", { class: "meta waiting" }, `waiting on ${task.waiting_on.detail}`)
      : null);
  if (String(task.id) === state.openId) card.setAttribute("aria-current", "true");
  return card;
}

/** Puts the task's card in its status' column, newest first. */
function placeCard(task) {
  const card = cardOf(task);
  state.cards.get(task.id)?.remove();
  state.cards.set(task.id, card);
  const list = column(task.status);
  const after = [...list.children].find((c) => Number(c.dataset.task) < task.id);
  list.insertBefore(card, after ?? null);
  countColumns();
}

function renderColumns(tasks) {
  columns().replaceChildren();
  state.cards.clear();
  state.tasks.clear();
  for (const status of STATUSES) column(status);
  for (const task of tasks) {
    state.tasks.set(task.id, task);
    placeCard(task);
  }
  countColumns();
}

// ------------------------------------------------------------------ live

function onTask(event) {
  const id = event.task_id;
  if (state.stale) return; // read whole at the next visit
  if (state.buffered) {
    state.buffered.add(id);
    if (String(id) === state.openId) addHistory([eventOf(event)]);
    return;
  }
  state.seen.set(id, (state.seen.get(id) ?? 0) + 1);
  const known = state.tasks.get(id);
  if (known && known.status !== event.status) {
    known.status = event.status;
    placeCard(known);
  }
  if (String(id) === state.openId) {
    addHistory([eventOf(event)]);
    const shown = state.section.querySelector("#task-status");
    if (shown && shown.textContent !== event.status) {
      // The status at once; its buttons were for the last one, until it is read.
      shown.textContent = event.status;
      shown.dataset.status = event.status;
      for (const button of state.section.querySelectorAll("#task-actions button")) button.disabled = true;
      state.rendered.head = null;
    }
  }
  refresh(id);
}

function onTaskDeleted(event) {
  if (state.stale) return;
  // While the list is read, the task is read again after it (and found gone).
  if (state.buffered) state.buffered.add(event.task_id);
  else dropTask(event.task_id);
}

function eventOf(change) {
  return { id: change.event_id, at: change.at, kind: change.kind, by: change.by, data: change.data };
}

/**
 * Reads task `id` again (its card, and the detail when open), once at a time; a
 * read that an event overtook is not applied but done again.
 */
function refresh(id) {
  let entry = state.refreshing.get(id);
  if (!entry) state.refreshing.set(id, (entry = { running: false, again: false }));
  if (entry.running) {
    entry.again = true;
    return;
  }
  entry.running = true;
  const seen = state.seen.get(id) ?? 0;
  api("GET", `/api/tasks/${id}`)
    .then((task) => {
      if ((state.seen.get(id) ?? 0) === seen) applyTask(task);
      else entry.again = true;
    })
    .catch((e) => {
      if (e.status === 404) dropTask(id);
      else console.error("task", id, e);
    })
    .finally(() => {
      entry.running = false;
      if (entry.again) {
        entry.again = false;
        refresh(id);
      }
    });
}

function dropTask(id) {
  state.tasks.delete(id);
  state.cards.get(id)?.remove();
  state.cards.delete(id);
  countColumns();
  if (String(id) === state.openId) window.location.hash = hashFor("board");
}

/** A task's view as the API answered it: its card, and the detail when it is open. */
function applyTask(task) {
  if (!state.stale) {
    const { runs: _runs, ...listed } = task;
    state.tasks.set(task.id, listed);
    placeCard(listed);
  }
  if (String(task.id) === state.openId) renderDetail(task);
}

function onApproval(data) {
  if (!state.open || !threadOfTask(data.agent, data.thread_id)) return;
  if (state.approvals.has(data.approval_id)) return;
  state.approvals.set(data.approval_id, {
    approval: { id: data.approval_id, agent: data.agent, thread_id: data.thread_id,
      tool: data.tool, actions: data.actions ?? [], expires_at: data.expires_at },
    outcome: null,
  });
  renderApprovals();
}

function onApprovalAnswered(data) {
  const entry = state.approvals.get(data.approval_id);
  if (!entry) return;
  entry.outcome = data.by ? `${data.outcome} by ${data.by}` : data.outcome;
  renderApprovals();
}

function threadOfTask(agent, thread) {
  return (state.open?.runs ?? []).some((r) => r.agent === agent && r.thread_id === thread);
}

// ------------------------------------------------------------------ the view

export function init() {
  live.on("task", (data) => onTask(data));
  live.on("task_deleted", (data) => onTaskDeleted(data));
  live.on("approval", (data) => onApproval(data));
  live.on("approval_answered", (data) => onApprovalAnswered(data));
  // After a reset, everything is read again (app.js then shows the view anew).
  live.onResync(() => {
    state.stale = true;
  });
  const form = document.getElementById("task-new");
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    createTask(form).catch((error) => showError(error, document.getElementById("task-new-create")));
  });
  // Elapsed labels only: no request.
  setInterval(() => {
    if (!state.visible) return;
    for (const label of state.section.querySelectorAll("[data-since]")) {
      label.textContent = since(label.dataset.since);
    }
  }, 1000);
}

export async function show(section, params) {
  state.section = section;
  state.visible = true;
  section.querySelector("#task-new-box").hidden = !manage();
  const wanted = params[0] ?? null;
  if (state.stale) {
    state.stale = false;
    state.buffered = new Set();
    state.open = null; // read again below
    try {
      const { tasks } = await api("GET", "/api/tasks");
      renderColumns(tasks);
    } catch (e) {
      state.stale = true;
      throw e;
    } finally {
      const again = state.buffered ?? new Set();
      state.buffered = null;
      for (const id of again) refresh(id);
    }
  }
  await open(wanted);
}

export function hide() {
  state.visible = false;
  // Nothing is followed while another view shows: the next visit reads it whole.
  state.stale = true;
}

/** Opens task `id` (a string from the hash), or closes the detail when null. */
async function open(id) {
  const detail = state.section.querySelector("#task-detail");
  const changed = id !== state.openId || !state.open || String(state.open.id) !== id;
  for (const card of state.cards.values()) card.removeAttribute("aria-current");
  state.openId = id;
  if (!id) {
    state.open = null;
    detail.hidden = true;
    detail.replaceChildren();
    return;
  }
  state.cards.get(Number(id))?.setAttribute("aria-current", "true");
  if (changed) {
    // Events that arrive while it is read are kept (by id) and meet the read.
    state.open = null;
    state.history.clear();
    state.approvals.clear();
    state.approvalsKey = null;
    state.rendered = {};
    detail.replaceChildren();
  }
  const [task, history] = await Promise.all([
    api("GET", `/api/tasks/${encodeURIComponent(id)}`),
    api("GET", `/api/tasks/${encodeURIComponent(id)}/history`),
  ]);
  if (state.openId !== id) return;
  addHistory(history.events);
  renderDetail(task);
  detail.hidden = false;
}

function part(name, build) {
  const detail = state.section.querySelector("#task-detail");
  let node = detail.querySelector(`[data-part="${name}"]`);
  if (!node) {
    node = el("div", { class: `part part-${name}`, dataset: { part: name } });
    detail.append(node);
  }
  node.replaceChildren(...[build()].flat().filter((n) => n));
  return node;
}

/** Re-renders `name` only when what it shows (`key`) changed: typing is kept. */
function partIf(name, key, build) {
  const json = JSON.stringify(key);
  if (state.rendered[name] === json) return;
  state.rendered[name] = json;
  part(name, build);
}

function renderDetail(task) {
  state.open = task;
  const detail = state.section.querySelector("#task-detail");
  if (!detail.querySelector('[data-part="head"]')) {
    // The parts' order on the page.
    for (const name of ["head", "questions", "approvals", "report", "plan", "attachments",
      "chain", "runs", "history"]) {
      detail.append(el("div", { class: `part part-${name}`, dataset: { part: name } }));
    }
  }
  renderHead(task);
  partIf("questions", [task.questions, manage()], () => questionsPart(task));
  partIf("report", [task.report, task.blocked_reason], () => reportPart(task));
  partIf("plan", [task.summary, task.requirements, task.acceptance_criteria, task.steps,
    task.assignee, task.plan_editable, task.description, task.review, manage()], () => planPart(task));
  partIf("attachments", [task.attachments, manage()], () => attachmentsPart(task));
  partIf("chain", task.chain, () => chainPart(task));
  partIf("runs", task.runs, () => runsPart(task));
  if (!detail.querySelector("#task-history")) renderHistory();
  readApprovals(task);
}

function renderHead(task) {
  partIf("head", [task.id, task.title, task.status, task.status_since, task.actions,
    task.waiting_on, task.created_by, manage()], () => [
    el("p", {}, el("a", { href: hashFor("board") }, "All tasks")),
    el("h2", { id: "task-title" }, `#${task.id} ${task.title}`),
    el("p", { class: "status-line" },
      el("span", { class: "status", id: "task-status", dataset: { status: task.status } }, task.status),
      " for ", el("span", { dataset: { since: task.status_since } }, since(task.status_since)),
      ` · created by ${task.created_by}`),
    task.waiting_on
      ? el("p", { class: "waiting" }, `Waiting on (${task.waiting_on.kind}): ${task.waiting_on.detail} · for `,
        el("span", { dataset: { since: task.waiting_on.since } }, since(task.waiting_on.since)))
      : null,
    manage() ? actionsOf(task) : null,
  ]);
}

function actionsOf(task) {
  const box = el("div", { class: "actions", id: "task-actions" });
  for (const action of task.actions ?? []) {
    if (action === "send-back") {
      const input = el("input", { id: "task-send-back-message", type: "text", required: true });
      const button = el("button", { type: "submit", dataset: { action } }, LABELS[action]);
      box.append(el("form", { class: "send-back", onsubmit: (e) => {
        e.preventDefault();
        press(task.id, action, button, { message: input.value });
      } }, el("label", { for: "task-send-back-message" }, "What is missing"), input, button));
    } else {
      const button = el("button", { type: "button", dataset: { action } }, LABELS[action] ?? action);
      button.addEventListener("click", () => press(task.id, action, button));
      box.append(button);
    }
  }
  return box;
}

async function press(id, action, button, body) {
  clearError(button);
  button.disabled = true;
  try {
    applyTask(await api("POST", `/api/tasks/${id}/${action}`, body));
  } catch (e) {
    showError(e, button);
  } finally {
    button.disabled = false;
  }
}

function questionsPart(task) {
  if (!task.questions.length) return null;
  const last = Math.max(...task.questions.map((q) => q.round));
  const open = task.questions.filter((q) => q.round === last && q.answer == null);
  const answered = task.questions.filter((q) => q.answer != null);
  const nodes = [el("h3", {}, "Questions")];
  if (open.length) {
    const fields = open.map((q) => questionField(q));
    const button = el("button", { type: "submit", id: "task-answer" }, "Answer");
    nodes.push(manage()
      ? el("form", { class: "questions", id: "task-questions", onsubmit: (e) => {
        e.preventDefault();
        const answers = {};
        for (const field of fields) answers[field.dataset.question] = answerOf(field);
        press(task.id, "answers", button, { answers });
      } }, fields, button)
      : el("div", { class: "questions", id: "task-questions" }, fields));
  }
  if (answered.length) {
    nodes.push(el("dl", { class: "answered" }, answered.flatMap((q) => [
      el("dt", {}, q.question),
      el("dd", {}, q.answer, el("span", { class: "meta" }, ` (${q.answered_by ?? ""})`)),
    ])));
  }
  return nodes;
}

function questionField(q) {
  const name = `q-${q.id}`;
  const field = el("fieldset", { class: "question", dataset: { question: q.id } },
    el("legend", {}, q.question));
  for (const [i, option] of (q.options ?? []).entries()) {
    const id = `${name}-${i}`;
    field.append(el("div", { class: "option" },
      manage() ? el("input", { type: q.multi_select ? "checkbox" : "radio", name, id,
        value: option.label }) : null,
      el("label", { for: manage() ? id : null }, option.label,
        option.description ? el("span", { class: "meta" }, ` — ${option.description}`) : null)));
  }
  if (manage()) {
    field.append(el("label", { for: `${name}-text` }, q.options?.length ? "Or an answer in words" : "Answer"),
      el("input", { type: "text", id: `${name}-text`, class: "answer-text" }));
  }
  return field;
}

/** The answer in words, else the options picked. */
function answerOf(field) {
  const text = field.querySelector(".answer-text").value.trim();
  if (text) return text;
  return [...field.querySelectorAll("input:checked")].map((i) => i.value).join(", ");
}

function reportPart(task) {
  const report = task.report;
  if (!report && !task.blocked_reason) return null;
  return [
    el("h3", {}, "Report"),
    report ? el("div", { id: "task-report" },
      el("p", {}, el("span", { class: "status" }, report.status), ` ${report.summary}`),
      report.output ? el("pre", { class: "output" }, report.output) : null,
      report.blocked_reason ? el("p", {}, `Blocked: ${report.blocked_reason}`) : null) : null,
    task.blocked_reason ? el("p", { class: "blocked" }, `Blocked: ${task.blocked_reason}`) : null,
  ];
}

function lines(items) {
  return items.length ? el("ul", {}, items.map((i) => el("li", {}, i))) : el("p", { class: "meta" }, "none");
}

function planPart(task) {
  const nodes = [
    el("h3", {}, "Plan"),
    task.description ? el("p", { class: "description" }, task.description) : null,
    task.review ? el("p", { class: "meta" }, "A person reviews the report.") : null,
  ];
  if (!(task.plan_editable && manage())) {
    nodes.push(el("dl", { class: "plan" },
      el("dt", {}, "Summary"), el("dd", {}, task.summary ?? "—"),
      el("dt", {}, "Requirements"), el("dd", {}, lines(task.requirements)),
      el("dt", {}, "Acceptance criteria"), el("dd", {}, lines(task.acceptance_criteria)),
      el("dt", {}, "Steps"), el("dd", {}, lines(task.steps)),
      el("dt", {}, "Assignee"), el("dd", { id: "task-assignee" }, task.assignee ?? "—")));
    return nodes;
  }
  const area = (id, label, value) => [el("label", { for: id }, label),
    el("textarea", { id, rows: 3 }, value)];
  const button = el("button", { type: "submit", id: "task-plan-save" }, "Save plan");
  const form = el("form", { class: "plan-edit", id: "task-plan", onsubmit: (e) => {
    e.preventDefault();
    const value = (id) => form.querySelector(`#${id}`).value;
    const list = (id) => value(id).split("\n").map((l) => l.trim()).filter((l) => l);
    const body = {
      summary: value("plan-summary").trim() || null,
      requirements: list("plan-requirements"),
      acceptance_criteria: list("plan-acceptance"),
      steps: list("plan-steps"),
      assignee: value("plan-assignee").trim() || null,
    };
    clearError(button);
    api("PATCH", `/api/tasks/${task.id}`, body)
      .then((view) => applyTask(view))
      .catch((error) => showError(error, button));
  } },
  el("p", { class: "meta" }, "The plan may be edited until Start; one item a line."),
  ...area("plan-summary", "Summary", task.summary ?? ""),
  ...area("plan-requirements", "Requirements", task.requirements.join("\n")),
  ...area("plan-acceptance", "Acceptance criteria", task.acceptance_criteria.join("\n")),
  ...area("plan-steps", "Steps", task.steps.join("\n")),
  el("label", { for: "plan-assignee" }, "Assignee"),
  el("input", { id: "plan-assignee", type: "text", value: task.assignee ?? "" }),
  el("div", {}, button));
  nodes.push(form);
  return nodes;
}

function chainPart(task) {
  if (!task.chain.length) return null;
  return [el("h3", {}, "Agent chain"), el("ol", { class: "chain", id: "task-chain" },
    task.chain.map((c) => el("li", {},
      el("a", { href: hashFor("chat", c.agent) }, c.agent),
      c.task_id !== task.id ? ` on task #${c.task_id}` : "",
      c.ended_at ? ` · ${since(c.started_at, c.ended_at)}` : " · working")))];
}

function runsPart(task) {
  const runs = task.runs ?? [];
  if (!runs.length) return null;
  return [el("h3", {}, "Runs"), el("div", { class: "scroll" }, el("table", { class: "runs", id: "task-runs" },
    el("thead", {}, el("tr", {}, ["Role", "Agent", "Thread", "Outcome", "Tokens in/out", "Model calls", "Took"]
      .map((h) => el("th", {}, h)))),
    el("tbody", {}, runs.map((r) => el("tr", {},
      el("td", {}, r.role),
      el("td", {}, r.agent, el("span", { class: "meta" }, ` ${r.backend}`)),
      el("td", {}, r.thread_id != null ? el("a", { href: hashFor("chat", r.agent, r.thread_id) }, `#${r.thread_id}`) : "—"),
      el("td", {}, r.outcome ?? "running"),
      el("td", {}, `${r.input_tokens}/${r.output_tokens}`),
      el("td", {}, String(r.model_calls)),
      el("td", {}, r.ended_at ? since(r.started_at, r.ended_at) : el("span", { dataset: { since: r.started_at } }, since(r.started_at))))))))];
}

function attachmentsPart(task) {
  const nodes = [el("h3", {}, "Attachments"),
    task.attachments.length
      ? el("ul", { id: "task-attachments" }, task.attachments.map((a) =>
        el("li", {}, a.name, el("span", { class: "meta" }, ` ${a.size} bytes · ${a.uploaded_by}`))))
      : el("p", { class: "meta", id: "task-attachments" }, "none")];
  if (manage()) {
    const input = el("input", { type: "file", id: "task-attach-file", multiple: true });
    const button = el("button", { type: "submit" }, "Attach");
    nodes.push(el("form", { class: "attach", onsubmit: (e) => {
      e.preventDefault();
      clearError(button);
      upload(task.id, input.files)
        .then(() => { input.value = ""; refresh(task.id); })
        .catch((error) => showError(error, button));
    } }, el("label", { for: "task-attach-file" }, "Add a file"), input, button));
  }
  return nodes;
}

async function upload(id, files) {
  for (const file of files) {
    const body = new FormData();
    body.append("file", file, file.name);
    await api("POST", `/api/tasks/${id}/attachments`, body);
  }
}

async function createTask(form) {
  const button = document.getElementById("task-new-create");
  clearError(button);
  button.disabled = true;
  try {
    const task = await api("POST", "/api/tasks", {
      title: form.querySelector("#task-new-title").value,
      description: form.querySelector("#task-new-description").value,
      review: form.querySelector("#task-new-review").checked,
    });
    if (!state.tasks.has(task.id)) applyTask(task);
    await upload(task.id, form.querySelector("#task-new-files").files);
    form.reset();
    window.location.hash = hashFor("board", task.id);
  } finally {
    button.disabled = false;
  }
}

// ------------------------------------------------------------------ approvals

/** The pending approvals of the task's threads, read when its threads change. */
function readApprovals(task) {
  const threads = (task.runs ?? []).filter((r) => r.thread_id != null)
    .map((r) => `${r.agent}/${r.thread_id}`);
  const key = threads.join(" ");
  if (key === state.approvalsKey) return;
  state.approvalsKey = key;
  if (!threads.length) return renderApprovals();
  api("GET", "/api/approvals").then((pending) => {
    if (state.open?.id !== task.id) return;
    for (const approval of pending) {
      if (threadOfTask(approval.agent, approval.thread_id) && !state.approvals.has(approval.id)) {
        state.approvals.set(approval.id, { approval, outcome: null });
      }
    }
    renderApprovals();
  }).catch((e) => console.error("approvals", e));
}

function renderApprovals() {
  const entries = [...state.approvals.values()];
  part("approvals", () => entries.length ? [el("h3", {}, "Approvals"),
    el("ul", { class: "approvals", id: "task-approvals" }, entries.map(({ approval, outcome }) =>
      el("li", { dataset: { approval: approval.id } },
        el("span", {}, `${approval.agent} #${approval.thread_id}: ${approval.tool} `),
        el("code", {}, (approval.actions ?? []).join(", ")),
        outcome
          ? el("span", { class: "outcome" }, ` ${outcome}`)
          : may("answer_approvals") ? approvalButtons(approval) : el("span", { class: "meta" }, " pending"))))] : null);
}

function approvalButtons(approval) {
  const answer = (decision, button) => {
    clearError(button);
    api("POST", `/api/approvals/${encodeURIComponent(approval.id)}`, { decision })
      .then((view) => {
        const entry = state.approvals.get(approval.id);
        if (entry && !entry.outcome) {
          entry.outcome = `${view.status}${view.decided_by ? ` by ${view.decided_by}` : ""}`;
        }
        renderApprovals();
      })
      .catch((e) => showError(e, button));
  };
  const approve = el("button", { type: "button", onclick: () => answer("approve", approve) }, "Approve");
  const deny = el("button", { type: "button", onclick: () => answer("deny", deny) }, "Deny");
  return el("span", { class: "answer" }, approve, deny);
}

// ------------------------------------------------------------------ history

function addHistory(events) {
  let added = false;
  for (const event of events) {
    if (state.history.has(event.id)) continue;
    state.history.set(event.id, event);
    added = true;
  }
  if (added) renderHistory();
}

function renderHistory() {
  const events = [...state.history.values()].sort((a, b) => a.id - b.id);
  const list = el("ol", { class: "history", id: "task-history" }, events.map((event) =>
    el("li", { dataset: { event: String(event.id), kind: event.kind } },
      el("time", { datetime: event.at, title: event.at }, new Date(event.at).toLocaleTimeString()),
      el("span", { class: "kind" }, event.kind),
      el("span", { class: "what" }, describe(event)),
      el("span", { class: "by" }, event.by))));
  const detail = state.section.querySelector("#task-detail");
  if (!detail.querySelector('[data-part="history"]')) return;
  part("history", () => [el("h3", {}, "History"), list]);
}

/** A history event in words (its kind is shown beside it). */
function describe({ kind, data = {} }) {
  switch (kind) {
    case "status_changed":
      return `${data.from} → ${data.to}${data.reason ? `: ${data.reason}` : ""}`;
    case "planning_started":
    case "started":
    case "nudge_sent":
      return data.thread_id != null ? `${data.agent} #${data.thread_id}` : (data.agent ?? "");
    case "planning_finished":
      return data.assignee ? `assignee ${data.assignee}` : "";
    case "question_asked":
      return data.question ? `${data.to}: ${data.question}` : (data.ids ?? []).join(", ");
    case "question_answered":
      return data.answer ? `${data.by_agent}: ${data.answer}` : (data.ids ?? []).join(", ");
    case "handoff_started":
    case "handoff_completed":
      return data.agent ?? "";
    case "tool_call":
      return `${data.tool} (${data.status})`;
    case "report_received":
      return `${data.status}: ${data.summary ?? ""}`;
    case "message_sent":
      return data.message ?? "";
    case "attachment_added":
      return `${data.name} (${data.size} bytes)`;
    case "plan_edited":
      return (data.fields ?? []).join(", ");
    default:
      return "";
  }
}
