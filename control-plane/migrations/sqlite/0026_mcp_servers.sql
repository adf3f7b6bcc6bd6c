-- An agent's MCP servers (`mcp_servers` of `POST /api/agents` and `PATCH
-- /api/agents/{name}`), as JSON: `{"<name>": {"command", "args", "env"}}` or
-- `{"<name>": {"url", "headers"}}`. Secrets only by reference (`{"secret": "NAME"}`),
-- never their values. Like grants, the row belongs to one creation of the name.
CREATE TABLE agent_mcp_servers (
    agent_name   TEXT NOT NULL REFERENCES agents(name),
    incarnation  TEXT NOT NULL,
    servers      TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (agent_name, incarnation)
);
