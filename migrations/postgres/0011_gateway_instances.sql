-- Live gateway instances sharing this database (operability issue): each instance
-- renews its row every few seconds; rate limits are shared among the instances seen
-- recently (each admits ceil(limit / n)). Not tenant data: written through the owner
-- role only.
create table gateway_instance (
    instance text primary key,
    seen_at timestamptz not null
);
