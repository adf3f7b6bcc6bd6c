-- What runs an agent's turns ('api': the tool loop; 'claude-code', 'opencode': a CLI
-- the worker drives), what ran each run, and the CLI session a run started (the next
-- run of the thread resumes it; a continuation of the thread forks it).
ALTER TABLE agents ADD COLUMN backend TEXT NOT NULL DEFAULT 'api';
ALTER TABLE runs ADD COLUMN backend TEXT NOT NULL DEFAULT 'api';
ALTER TABLE runs ADD COLUMN cli_session TEXT;
