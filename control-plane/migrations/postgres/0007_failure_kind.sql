-- How a failed thread ended, for programs (`FailureKind::as_str`: interrupted,
-- model_error, limit …); `error` keeps the text for people. NULL for threads that did
-- not fail, and for those that failed before kinds were recorded.
ALTER TABLE threads ADD COLUMN failure_kind TEXT;
