-- Background tasks are called jobs (issue 27): "task" is the task board's unit of
-- work from now on. The table, its id column and its indexes are renamed, not
-- copied, so every row stays.
ALTER TABLE tasks RENAME TO jobs;
ALTER TABLE jobs RENAME COLUMN task_id TO job_id;
ALTER INDEX idx_tasks_running RENAME TO idx_jobs_running;
ALTER INDEX tasks_pkey RENAME TO jobs_pkey;
