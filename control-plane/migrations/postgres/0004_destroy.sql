-- Destroy deletes an agent's files after its row is marked destroyed. Until the
-- deletion has finished, purge_files = 1, so a start-up (or a re-create of the name)
-- after a failure or crash in between finishes it instead of reusing half a directory.
ALTER TABLE agents ADD COLUMN purge_files BIGINT NOT NULL DEFAULT 0;
