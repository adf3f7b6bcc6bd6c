// Fleet: every agent at once, with its worker's state, backend and model.

import { api, el, hashFor } from "./api.js";

export async function show(section) {
  const agents = await api("GET", "/api/agents");
  const body = section.querySelector("#agents tbody");
  body.replaceChildren(...agents.map((agent) => el("tr", { dataset: { agent: agent.name } },
    el("td", {}, el("a", { href: hashFor("chat", agent.name) }, agent.name)),
    el("td", {}, agent.backend),
    el("td", {}, agent.model ?? ""),
    el("td", {}, agent.worker.state))));
  section.querySelector("#no-agents").hidden = agents.length > 0;
}
