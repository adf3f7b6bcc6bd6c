-- Whether a task's reported pid was found in its worker's process tree when it was
-- reported (1), or not (0: recorded, shown, never signalled).
ALTER TABLE tasks ADD COLUMN verified BIGINT NOT NULL DEFAULT 0;
