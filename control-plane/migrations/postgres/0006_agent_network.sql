-- Whether an agent's tool processes may open TCP connections ('on') or not ('off').
ALTER TABLE agents ADD COLUMN network TEXT NOT NULL DEFAULT 'on';
