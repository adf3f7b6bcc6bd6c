-- The W3C trace context (JSON object: traceparent, tracestate) of a run's span,
-- when traces are exported: the next attempt of the thread (after a worker's loss,
-- or at the next start) continues the same trace. NULL: none was recorded.
ALTER TABLE runs ADD COLUMN trace_context TEXT;
