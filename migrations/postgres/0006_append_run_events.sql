-- Appends a run's events in one statement (one round trip, one commit in autocommit):
-- names the tenant for row-level security for this transaction only, then inserts the
-- events numbered from p_first_seq. Security invoker: the caller's role and its row
-- policies apply as to a plain insert.
--
-- p_durable false: events a crash may lose without harm (the run redoes that work, which
-- has no effects) skip the wait for the WAL flush. Order still holds: a later durable
-- commit flushes everything before it.
create function toolgate_append_run_events(
    p_tenant uuid, p_run uuid, p_first_seq bigint, p_kinds text[], p_payloads jsonb[],
    p_durable boolean
) returns void language plpgsql security invoker as $$
begin
    perform set_config('toolgate.tenant_id', p_tenant::text, true);
    if not p_durable then
        perform set_config('synchronous_commit', 'off', true);
    end if;
    insert into run_event (run_id, tenant_id, seq, kind, payload, created_at)
    select p_run, p_tenant, p_first_seq + e.n - 1, e.kind, e.payload, clock_timestamp()
    from unnest(p_kinds, p_payloads) with ordinality as e(kind, payload, n);
end
$$;
grant execute on function toolgate_append_run_events(uuid, uuid, bigint, text[], jsonb[], boolean) to toolgate_app;
