-- Every instance asks every second whether any API key was revoked (by another instance
-- or the CLI): the count of revoked keys and the latest revocation. Without an index that
-- read every key of every tenant (100,000 keys: 12 ms, every second, per instance); this
-- one holds the revoked keys only, and the read is an index-only scan of it (1 ms).
create index api_key_revoked_idx on api_key (revoked_at) where revoked_at is not null;
