-- Tools granted to an agent at run time (`POST /api/agents/{name}/grants`): each
-- allows every call of that tool whatever the agent's profile says, until revoked.
-- A grant belongs to one creation of the name (`incarnation`): an agent destroyed
-- and created again starts without the old one's grants. `tool` is the Chorus name.
CREATE TABLE agent_grants (
    agent_name   TEXT NOT NULL REFERENCES agents(name),
    incarnation  TEXT NOT NULL,
    tool         TEXT NOT NULL,
    granted_by   TEXT NOT NULL,
    granted_at   TEXT NOT NULL,
    PRIMARY KEY (agent_name, incarnation, tool)
);
