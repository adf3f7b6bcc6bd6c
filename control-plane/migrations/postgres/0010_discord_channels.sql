-- An agent's Discord channel: messages there go to it, and it posts there. One
-- active agent per channel (a destroyed agent keeps the id it had, for the record).
ALTER TABLE agents ADD COLUMN discord_channel_id TEXT;
CREATE UNIQUE INDEX agents_discord_channel ON agents (discord_channel_id)
    WHERE discord_channel_id IS NOT NULL AND status = 'active';
