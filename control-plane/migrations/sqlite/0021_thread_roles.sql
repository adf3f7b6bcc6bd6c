-- A thread's role in a task (`planner`, `worker`, `answerer`; NULL for a chat
-- thread): its runs are offered that role's finishing tools, and the end of each
-- of its turns is told to the task engine (control-plane/src/runs/roles.rs).
-- `workdir`: the directory under the agent's workspace its file tools are jailed
-- to and its commands run in (`tasks/7`); NULL for the whole workspace.
ALTER TABLE threads ADD COLUMN role TEXT;
ALTER TABLE threads ADD COLUMN workdir TEXT;
