-- The revoked keys the once-a-second revocation check counts (see the Postgres
-- migration of the same number): without it the check read every key.
create index api_key_revoked_idx on api_key (revoked_at) where revoked_at is not null;
