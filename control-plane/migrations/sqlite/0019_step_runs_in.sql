-- Where a tool step's tool runs (`worker`, `control_plane`; NULL for other steps,
-- for calls refused before they ran, and for every step from before): a
-- control-plane tool's step stays open while the control plane carries it out, and
-- the thread view says so as data rather than only in the step's text.
ALTER TABLE thread_steps ADD COLUMN runs_in TEXT;
