-- Questions to a person (control-plane/src/questions/): the approvals table also
-- holds questions an agent asks in words. `kind` tells them apart (every row from
-- before is an approval); a question answered in words has status 'answered' and
-- its text in `answer`.
--
-- Who asked and who answered (`requested_by`, `decided_by`), who started a thread
-- (`threads.created_by`) and who an audit row names (`audit_log.user_id`) keep
-- their columns: they hold a principal's text form (`principal.rs`), which is what
-- they held before, so no row changes here.
ALTER TABLE approvals ADD COLUMN kind TEXT NOT NULL DEFAULT 'approval';
ALTER TABLE approvals ADD COLUMN answer TEXT;
