-- A run's appended events are announced to every instance when they commit (NOTIFY is
-- transactional), so a run's event stream on another instance reads them at once
-- instead of on a timer. The payload is the store's change notation (toolgate_store::notify).
create or replace function toolgate_append_run_events(
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
    perform pg_notify('toolgate_changes', 'run:' || p_tenant::text || ':' || p_run::text);
end
$$;
