-- As on Postgres (the migration of the same number).
-- GET /v1/tool-definitions lists the definitions waiting for a person first, a page at a
-- time by upstream and tool: an index of the waiting ones in that order, so the first
-- pages seek to them instead of reading and sorting every pin of the owner (up to 20,000
-- per upstream).
create index tool_pin_waiting_idx on tool_pin (owner_id, upstream, tool) where pending_hash is not null;
