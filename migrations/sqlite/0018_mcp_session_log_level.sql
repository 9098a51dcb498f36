-- The level a session chose with `logging/setLevel` (see the Postgres migration of the
-- same number).
alter table mcp_session add column log_level text;
