-- Background tasks are called jobs (issue 27): "task" is the task board's unit of
-- work from now on. The table and its id column are renamed, not copied, so every
-- row stays; the index is made again under its new name (SQLite cannot rename one).
ALTER TABLE tasks RENAME TO jobs;
ALTER TABLE jobs RENAME COLUMN task_id TO job_id;
DROP INDEX idx_tasks_running;
CREATE INDEX idx_jobs_running ON jobs(status);
