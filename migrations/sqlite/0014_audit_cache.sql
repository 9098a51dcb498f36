-- What the result cache did for a call of a cached tool: 'hit' (answered from the cache,
-- the tool did not run), 'miss' or 'bypass' (the tool ran). Null for every other call.
alter table audit_log add column cache text;
