-- A thread's context flushes (`crate::memory::flush`): each row is one span of the
-- thread's messages (positions after the previous row's `through_position` up to
-- this one's) that was summarised into the agent's daily log and leaves the thread's
-- context window; the messages themselves stay in `messages` (and so in search).
-- A row is added only past the latest one: a span is never flushed twice.
CREATE TABLE thread_flushes (
    agent_name        TEXT NOT NULL,
    thread_id         BIGINT NOT NULL,
    through_position  BIGINT NOT NULL,
    first_message_id  BIGINT NOT NULL,
    last_message_id   BIGINT NOT NULL,
    messages          BIGINT NOT NULL,
    log_path          TEXT NOT NULL,   -- memory/YYYY-MM-DD.md
    entry_id          TEXT NOT NULL,   -- the daily-log entry (mem:<id>)
    created_at        TEXT NOT NULL,
    PRIMARY KEY (agent_name, thread_id, through_position)
);
