-- Which creation of the agent's name this row is: a random token, new whenever the
-- name is created without kept files. Dial-in workers record it in the directory
-- they lay out, so a new agent never works in a destroyed one's files and a
-- deletion of a destroyed one's files never touches a newer one's.
ALTER TABLE agents ADD COLUMN incarnation TEXT NOT NULL DEFAULT '';
UPDATE agents SET incarnation = md5(random()::text || clock_timestamp()::text || name);
