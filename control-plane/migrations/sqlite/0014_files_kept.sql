-- A destroyed agent whose files were kept (destroy with keep_files=true), to be
-- picked up by a new agent of the same name. A copy of a destroyed agent's
-- directory that a dial-in worker names when it joins is deleted only when the
-- files were not kept. Rows destroyed before this column: treated as kept (nothing
-- is deleted on a guess).
ALTER TABLE agents ADD COLUMN files_kept INTEGER NOT NULL DEFAULT 0;
UPDATE agents SET files_kept = 1 WHERE status = 'destroyed' AND purge_files = 0;
