-- What the result cache did for a call of a cached tool: 'hit' (answered from the cache,
-- the tool did not run), 'miss' or 'bypass' (the tool ran). Null for every other call.
-- The append function (0009) gains an overload taking it as one more array; the old one
-- stays, so instances not yet upgraded keep appending (their rows say nothing of a cache).
alter table audit_log add column cache text constraint audit_log_cache_check
    check (cache in ('hit', 'miss', 'bypass'));

create function toolgate_append_audit(
    p_tenant uuid, p_seq bigint, p_hash text, p_expected_seq bigint, p_expected_hash text,
    p_call_ids uuid[], p_seqs int8[], p_principals uuid[], p_adapters text[], p_tools text[],
    p_arguments text[], p_arguments_hashes text[], p_outcomes text[], p_errors text[],
    p_durations int8[], p_request_ids text[], p_trace_ids text[], p_run_ids uuid[], p_steps int4[],
    p_clients text[], p_started timestamptz[], p_finished timestamptz[], p_prev_hashes text[],
    p_row_hashes text[], p_approvals uuid[], p_caches text[]
) returns bigint language plpgsql security invoker as $$
declare
    inserted bigint;
begin
    perform set_config('toolgate.tenant_id', p_tenant::text, true);
    insert into audit_chain_head (tenant_id, seq, row_hash) values (p_tenant, p_seq, p_hash)
    on conflict (tenant_id) do update set seq = excluded.seq, row_hash = excluded.row_hash
    where audit_chain_head.seq = p_expected_seq and audit_chain_head.row_hash = p_expected_hash;
    if not found then
        return 0;
    end if;
    delete from call_intent where tenant_id = p_tenant and call_id = any(p_call_ids);
    insert into audit_log (call_id, tenant_id, seq, principal_id, adapter, tool, arguments, arguments_hash,
                           outcome, error, duration_us, request_id, trace_id, run_id, step, client,
                           started_at, finished_at, prev_hash, row_hash, approval_id, cache)
    select r.call_id, p_tenant, r.seq, r.principal_id, r.adapter, r.tool, r.arguments::json, r.arguments_hash,
           r.outcome, r.error, r.duration_us, r.request_id, r.trace_id, r.run_id, r.step, r.client,
           r.started_at, r.finished_at, r.prev_hash, r.row_hash, r.approval_id, r.cache
    from unnest(p_call_ids, p_seqs, p_principals, p_adapters, p_tools, p_arguments, p_arguments_hashes,
                p_outcomes, p_errors, p_durations, p_request_ids, p_trace_ids, p_run_ids, p_steps,
                p_clients, p_started, p_finished, p_prev_hashes, p_row_hashes, p_approvals, p_caches)
        as r(call_id, seq, principal_id, adapter, tool, arguments, arguments_hash, outcome, error,
             duration_us, request_id, trace_id, run_id, step, client, started_at, finished_at,
             prev_hash, row_hash, approval_id, cache);
    get diagnostics inserted = row_count;
    return inserted;
end
$$;
grant execute on function toolgate_append_audit(
    uuid, bigint, text, bigint, text, uuid[], int8[], uuid[], text[], text[], text[], text[], text[], text[],
    int8[], text[], text[], uuid[], int4[], text[], timestamptz[], timestamptz[], text[], text[], uuid[], text[]
) to toolgate_app;
