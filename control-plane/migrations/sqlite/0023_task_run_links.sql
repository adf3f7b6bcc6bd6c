-- What the task engine keeps about each run's thread between its turns: the agents
-- from the task's root down to the run's (the loop and depth checks of delegations
-- and questions between agents), the run whose `ask_agent` it answers, and whether
-- it was sent the one follow-up. `finishing` holds the control call of its current
-- turn until the turn's end is applied.
ALTER TABLE task_runs ADD COLUMN chain TEXT NOT NULL DEFAULT '[]';
ALTER TABLE task_runs ADD COLUMN asked_by BIGINT;
ALTER TABLE task_runs ADD COLUMN followed_up INTEGER NOT NULL DEFAULT 0;
