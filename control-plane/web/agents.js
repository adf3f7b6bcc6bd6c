// Agents: `#agents` lists them and creates one (name, prompt, backend, a model from
// the discovered list, a permission preset or a custom profile tried with `explain`);
// `#agents/<name>[/<tab>]` configures or destroys one and shows its tools, jobs, audit
// log, identity files and memory, schedules and MCP servers. Every control is shown
// only when the person's role may use it. The list follows the fleet's state (kept
// current from the feed by fleet.js).

import { api, el, hashFor, may, session, showError, clearError, since } from "./api.js";
import * as fleet from "./fleet.js";

const TABS = [
  ["tools", "Tools"], ["jobs", "Jobs"], ["audit", "Audit log"], ["identity", "Identity"],
  ["memory", "Memory"], ["schedules", "Schedules"], ["mcp", "MCP servers"],
];

let section = null;
let visits = 0; // each show() is a visit; an older one that finishes late shows nothing
let stopWatching = null;
let uid = 0;

const path = (name, ...rest) => ["/api/agents", encodeURIComponent(name), ...rest].join("/");

/** A labelled control: `<label for>` and the control, in one block. */
function field(text, control, hint) {
  control.id ||= `agents-f${++uid}`;
  return el("div", { class: "field" }, el("label", { for: control.id }, text), control,
    hint ? el("p", { class: "hint" }, hint) : null);
}

function select(id, options, value) {
  return el("select", { id }, options.map(([v, text]) => el("option", { value: v, selected: v === value }, text)));
}

async function modelOptions() {
  const snapshot = await api("GET", "/api/models");
  const options = [["", "the server's default"]];
  for (const [provider, models] of Object.entries(snapshot.providers ?? {})) {
    for (const model of models.models ?? []) options.push([`${provider}/${model}`, `${provider}/${model}`]);
  }
  return options;
}

/** The permissions controls: a preset, or a custom profile (JSON) tried with explain. */
function permissionsFields(prefix, current) {
  const custom = typeof current === "object" && current !== null;
  const choice = select(`${prefix}-permissions`, [...session.presets.map((p) => [p, p]), ["custom", "custom profile"]],
    custom ? "custom" : (current ?? "standard"));
  const profile = el("textarea", { id: `${prefix}-profile`, rows: 6, spellcheck: "false" });
  profile.value = custom ? JSON.stringify(current, null, 2) : '{\n  "allow": [],\n  "ask": []\n}';
  const profileField = field("Custom profile (JSON)", profile);
  profileField.hidden = !custom;
  choice.addEventListener("change", () => { profileField.hidden = choice.value !== "custom"; });
  const action = el("input", { id: `${prefix}-explain-action`, type: "text", placeholder: "tool:bash:git status" });
  const result = el("output", { id: `${prefix}-explain-result`, class: "explain", for: action.id });
  const explain = el("button", { type: "button", id: `${prefix}-explain` }, "Explain");
  explain.addEventListener("click", async () => {
    clearError(explain);
    try {
      const answer = await api("POST", "/api/permissions/explain",
        { profile: setting(), action: action.value.trim() });
      result.textContent = explanation(answer);
    } catch (e) { showError(e, explain); }
  });
  function setting() {
    if (choice.value !== "custom") return choice.value;
    try { return JSON.parse(profile.value); } catch (e) { throw new Error(`the custom profile is not JSON: ${e.message}`); }
  }
  const block = el("div", { class: "permissions" },
    field("Permissions", choice), profileField,
    el("div", { class: "explain-row" }, field("Try an action", action), explain), result);
  return { block, setting };
}

function explanation(answer) {
  const lines = [`${answer.decision}: ${answer.reason}`];
  if ((answer.actions ?? []).length > 1) {
    for (const one of answer.actions) lines.push(`${one.action} → ${one.decision}: ${one.reason}`);
  }
  return lines.join("\n");
}

// The list and the create form.

function renderList(list) {
  const agents = fleet.agents();
  list.replaceChildren(...agents.map((agent) => el("li", { dataset: { agent: agent.name } },
    el("a", { href: hashFor("agents", agent.name) }, agent.name), " ",
    el("span", { class: "state", dataset: { state: agent.worker.state } }, agent.worker.state), " ",
    el("span", { class: "sub" }, `${agent.backend} · ${agent.model ?? "default model"}`))));
  if (!agents.length) list.append(el("li", {}, "No agents yet."));
}

async function createForm() {
  const name = el("input", { id: "create-name", type: "text", required: true, autocomplete: "off" });
  const prompt = el("textarea", { id: "create-prompt", rows: 4 });
  const backend = select("create-backend", session.backends.map((b) => [b, b]), "api");
  const model = select("create-model", await modelOptions(), "");
  const permissions = permissionsFields("create");
  const submit = el("button", { type: "submit", id: "create-submit" }, "Create");
  const form = el("form", { id: "create-agent", class: "agent-form" },
    el("h2", {}, "New agent"),
    field("Name", name), field("Prompt", prompt, "Its system prompt; empty: the default."),
    field("Backend", backend), field("Model", model), permissions.block, submit);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearError(submit);
    try {
      const body = { name: name.value.trim(), backend: backend.value, permissions: permissions.setting() };
      if (prompt.value.trim()) body.system_prompt = prompt.value;
      if (model.value) body.model = model.value;
      submit.disabled = true;
      const agent = await api("POST", "/api/agents", body);
      window.location.hash = hashFor("agents", agent.name);
    } catch (e) {
      showError(e, submit);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

async function showList(body, mine) {
  const list = el("ul", { id: "agent-list", class: "agent-list" });
  const form = may("create_agents") ? await createForm() : null;
  if (mine !== visits) return;
  renderList(list);
  stopWatching = fleet.onChange(() => renderList(list));
  body.replaceChildren(list);
  if (form) body.append(form);
}

// One agent.

function summary(agent) {
  return el("p", { id: "agent-summary", class: "summary" },
    el("span", { class: "state", dataset: { state: agent.worker.state } }, agent.worker.state),
    agent.worker.dial_in_worker ? ` on ${agent.worker.dial_in_worker}` : "",
    ` · ${agent.backend} · ${agent.model ?? "default model"} · `,
    el("a", { href: hashFor("chat", agent.name) }, "Chat"));
}

async function configureForm(agent) {
  const editable = may("configure_agents");
  const prompt = el("textarea", { id: "configure-prompt", rows: 5, readonly: !editable });
  prompt.value = agent.system_prompt;
  const backend = select("configure-backend", session.backends.map((b) => [b, b]), agent.backend);
  // A model once set can be changed, not unset (the API has no "back to the default").
  const models = (await modelOptions()).filter(([v]) => v || !agent.model);
  if (agent.model && !models.some(([v]) => v === agent.model)) models.push([agent.model, agent.model]);
  const model = select("configure-model", models, agent.model ?? "");
  backend.disabled = model.disabled = !editable;
  const form = el("form", { id: "configure-agent", class: "agent-form" }, el("h2", {}, "Settings"),
    field("Prompt", prompt), field("Backend", backend), field("Model", model));
  let permissions = null;
  if (editable) {
    permissions = permissionsFields("configure", agent.permissions);
    form.append(permissions.block);
  } else {
    form.append(el("p", {}, "Permissions: ",
      typeof agent.permissions === "string" ? agent.permissions : "a custom profile"));
  }
  if (!editable) return form;
  const save = el("button", { type: "submit", id: "configure-save" }, "Save");
  const saved = el("span", { class: "saved", role: "status" });
  form.append(el("div", {}, save, " ", saved));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearError(save);
    saved.textContent = "";
    try {
      const body = {};
      if (prompt.value !== agent.system_prompt) body.system_prompt = prompt.value;
      if (backend.value !== agent.backend) body.backend = backend.value;
      if (model.value && model.value !== agent.model) body.model = model.value;
      const setting = permissions.setting();
      if (JSON.stringify(setting) !== JSON.stringify(agent.permissions)) body.permissions = setting;
      agent = await api("PATCH", path(agent.name), body);
      saved.textContent = "Saved.";
    } catch (e) { showError(e, save); }
  });
  return form;
}

function destroyBlock(agent) {
  const keep = el("input", { id: "destroy-keep-files", type: "checkbox" });
  const destroy = el("button", { type: "button", id: "destroy", class: "danger" }, "Destroy");
  const confirm = el("button", { type: "button", id: "destroy-confirm", class: "danger", hidden: true },
    `Destroy ${agent.name} now`);
  const cancel = el("button", { type: "button", id: "destroy-cancel", hidden: true }, "Cancel");
  destroy.addEventListener("click", () => { destroy.hidden = true; confirm.hidden = cancel.hidden = false; confirm.focus(); });
  cancel.addEventListener("click", () => { destroy.hidden = false; confirm.hidden = cancel.hidden = true; });
  confirm.addEventListener("click", async () => {
    clearError(cancel);
    try {
      await api("DELETE", `${path(agent.name)}?keep_files=${keep.checked}`);
      window.location.hash = "#agents";
    } catch (e) { showError(e, cancel); }
  });
  return el("div", { class: "destroy" }, el("h2", {}, "Destroy"),
    el("div", { class: "check" }, keep, el("label", { for: keep.id }, "Keep files (its workspace and memory stay on disk)")),
    el("div", {}, destroy, " ", confirm, " ", cancel));
}

function tabsNav(name, tab) {
  return el("nav", { class: "tabs", "aria-label": "About this agent" },
    TABS.map(([key, text]) => el("a", { href: hashFor("agents", name, key), "aria-current": key === tab ? "page" : null, dataset: { tab: key } }, text)));
}

/** A table of `rows` with `columns`: [[heading, row -> text or node]]. */
function table(rows, columns, empty) {
  if (!rows.length) return el("p", { class: "hint" }, empty);
  return el("div", { class: "scroll" }, el("table", {},
    el("thead", {}, el("tr", {}, columns.map(([h]) => el("th", {}, h)))),
    el("tbody", {}, rows.map((row) => el("tr", {}, columns.map(([, f]) => el("td", {}, f(row) ?? "")))))));
}

const TAB_BODIES = {
  async tools(agent) {
    const { tools } = await api("GET", path(agent.name, "tools"));
    return table(tools, [["Tool", (t) => t.name], ["Runs in", (t) => t.runs_in],
      ["A typical call", (t) => (typeof t.decision === "string" ? t.decision : t.decision?.decision ?? t.decision?.outcome ?? "")],
      ["What it does", (t) => t.description.split("\n")[0]]], "No tools.");
  },
  async jobs(agent) {
    const { jobs } = await api("GET", path(agent.name, "jobs"));
    return table(jobs, [["Job", (j) => j.id], ["Command", (j) => j.command], ["Status", (j) => j.status],
      ["Exit", (j) => j.exit_code], ["Started", (j) => `${since(j.started_at)} ago`], ["Detail", (j) => j.detail]], "No jobs.");
  },
  async audit(agent) {
    const { entries } = await api("GET", path(agent.name, "audit"));
    return table(entries, [["When", (e) => e.timestamp], ["Action", (e) => e.action], ["Decision", (e) => e.decision],
      ["By", (e) => e.user_id], ["Thread", (e) => (e.thread_id ? el("a", { href: hashFor("chat", agent.name, e.thread_id) }, `#${e.thread_id}`) : "")],
      ["Detail", (e) => e.detail]], "Nothing recorded yet.");
  },
  async identity(agent) {
    const files = await api("GET", path(agent.name, "identity"));
    const editable = may("configure_agents");
    return el("div", { class: "identity" }, Object.entries(files).map(([key, text]) => {
      const file = `${key.toUpperCase()}.md`;
      if (!editable) return el("section", {}, el("h3", {}, file), el("pre", {}, text));
      const area = el("textarea", { id: `identity-${key}`, rows: 8 });
      area.value = text;
      const save = el("button", { type: "button" }, `Save ${file}`);
      save.addEventListener("click", async () => {
        clearError(save);
        try { await api("PUT", path(agent.name, "identity", file), { content: area.value }); save.textContent = `Saved ${file}`; } catch (e) { showError(e, save); }
      });
      return el("section", {}, field(file, area), save);
    }));
  },
  async memory(agent) {
    const listing = await api("GET", path(agent.name, "memory"));
    const q = el("input", { id: "memory-q", type: "search" });
    const go = el("button", { type: "submit" }, "Search");
    const hits = el("div", { id: "memory-hits" });
    const search = el("form", { id: "memory-search", class: "inline" }, field("Search its memory", q), go);
    search.addEventListener("submit", async (event) => {
      event.preventDefault();
      clearError(go);
      try {
        const answer = await api("GET", `${path(agent.name, "memory", "search")}?q=${encodeURIComponent(q.value)}`);
        hits.replaceChildren(el("p", { class: "hint" }, `${answer.hits.length} found (${answer.ranking})`),
          table(answer.hits, [["Where", (h) => where(h)], ["Text", (h) => h.text]], "Nothing found."));
      } catch (e) { showError(e, go); }
    });
    const where = (h) => (h.thread_id
      ? el("a", { href: hashFor("chat", agent.name, h.thread_id) }, `${h.path ?? h.source} · thread #${h.thread_id}`)
      : `${h.path ?? h.session_id ?? h.source}${h.line ? `:${h.line}` : ""}`);
    const retractable = may("configure_agents");
    const facts = el("ul", { id: "memory-entries", class: "facts" }, listing.entries.map((entry) => {
      const item = el("li", { dataset: { entry: entry.id ?? "" } }, el("span", {}, entry.text),
        el("span", { class: "sub" }, `${entry.file}:${entry.line}`,
          entry.thread_id ? [" · from ", el("a", { href: hashFor("chat", agent.name, entry.thread_id) }, `thread #${entry.thread_id}`)] : "",
          entry.by ? ` · by ${entry.by}` : "", entry.at ? ` · ${entry.at}` : ""));
      if (retractable && entry.id) {
        const retract = el("button", { type: "button", class: "retract" }, "Retract");
        retract.addEventListener("click", async () => {
          clearError(retract);
          try { await api("DELETE", path(agent.name, "memory", entry.id)); item.remove(); } catch (e) { showError(e, retract); }
        });
        item.append(retract);
      }
      return item;
    }));
    return el("div", {}, search, hits, el("h3", {}, "Remembered"),
      el("p", { class: "hint" }, `${listing.size} of ${listing.limit} bytes`),
      listing.entries.length ? facts : el("p", { class: "hint" }, "Nothing remembered yet."));
  },
  async schedules(agent) {
    const { schedules } = await api("GET", path(agent.name, "schedules"));
    const runs = el("div", { id: "schedule-runs" });
    const body = table(schedules, [["Schedule", (s) => s.id], ["When", (s) => s.cron ? `${s.cron}${s.timezone ? ` (${s.timezone})` : ""}` : s.at],
      ["Prompt", (s) => s.prompt], ["Next", (s) => (s.paused ? "paused" : s.next_run_at)], ["Failures", (s) => s.failures],
      ["Runs", (s) => {
        const button = el("button", { type: "button" }, "Runs");
        button.addEventListener("click", async () => {
          clearError(button);
          try {
            const answer = await api("GET", path(agent.name, "schedules", s.id, "runs"));
            runs.replaceChildren(el("h3", {}, `Runs of schedule ${s.id}`), table(answer.runs, [
              ["Run", (r) => r.id], ["Why", (r) => r.cause], ["Started", (r) => r.started], ["Status", (r) => r.status],
              ["Thread", (r) => (r.thread ? el("a", { href: hashFor("chat", agent.name, r.thread) }, `#${r.thread}`) : "")],
              ["Error", (r) => r.error]], "No runs yet."));
          } catch (e) { showError(e, button); }
        });
        return button;
      }]], "No schedules.");
    return el("div", {}, body, runs);
  },
  async mcp(agent) {
    const servers = Object.entries(agent.mcp_servers ?? {});
    return table(servers, [["Server", ([name]) => name],
      ["State", ([, s]) => el("span", { class: "state", dataset: { state: s.state } }, s.state ?? "")],
      ["Tools", ([, s]) => (s.tools ?? []).length], ["Error", ([, s]) => s.error]], "No MCP servers.");
  },
};

async function showAgent(body, name, tab, mine) {
  let agent;
  try {
    agent = await api("GET", path(name));
  } catch (e) {
    if (e.status !== 404) throw e;
    if (mine !== visits) return;
    body.replaceChildren(el("p", {}, `No agent named ${name}. `, el("a", { href: "#agents" }, "All agents")));
    return;
  }
  const head = el("div", { class: "agent-head" }, el("h2", { id: "agent-name" }, agent.name), summary(agent));
  const tabBody = el("div", { id: "agent-tab", class: "tab-body" });
  const settings = await configureForm(agent);
  if (mine !== visits) return;
  body.replaceChildren(el("p", {}, el("a", { href: "#agents" }, "← All agents")), head,
    settings, may("destroy_agents") ? destroyBlock(agent) : null,
    tab ? tabsNav(name, tab) : tabsNav(name, null), tabBody);
  stopWatching = fleet.onChange(() => {
    const now = fleet.agents().find((a) => a.name === name);
    if (!now) {
      head.querySelector("#agent-summary").replaceChildren(`${name} was destroyed.`);
      for (const control of body.querySelectorAll("button, input, select, textarea")) control.disabled = true;
      return;
    }
    head.querySelector("#agent-summary").replaceWith(summary(now));
  });
  if (tab && TAB_BODIES[tab]) {
    try { tabBody.replaceChildren(await TAB_BODIES[tab](agent)); } catch (e) { showError(e, tabBody); }
  }
}

export async function show(target, params) {
  section = target;
  stopWatching?.();
  stopWatching = null;
  const [name, tab] = params;
  let body = section.querySelector("#agents-body");
  if (!body) {
    body = el("div", { id: "agents-body" });
    section.replaceChildren(section.querySelector("h1"), body);
  }
  // What a previous visit showed goes at once (its controls are of another state).
  body.replaceChildren(el("p", { class: "hint" }, "Loading…"));
  const mine = ++visits;
  if (name) await showAgent(body, name, tab, mine);
  else await showList(body, mine);
}

export function hide() {
  stopWatching?.();
  stopWatching = null;
}
