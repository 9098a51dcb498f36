-- The level a session chose with `logging/setLevel`, so that a session let go of from
-- memory (dormant, idle) or taken over by another instance is restored with it. Before,
-- the level lived only in memory: a session holding one was kept there (~110 KiB), and
-- lost it on another instance. The gateway's role may change this column only.
alter table mcp_session add column log_level text;
grant update (log_level) on mcp_session to toolgate_app;
