//! Fills a SQLite store with one tenant's audit chain of N rows and a signed checkpoint of
//! every row, as a gateway signing a head each minute leaves after N minutes of calls:
//! what `bench/checkpoints.sh` verifies.
//!
//! Usage: `cargo run --release -p toolgate-store --example checkpoints -- DATA_DIR TENANT N
//! [EVERY]`: a checkpoint of every EVERY-th row (1 by default; 0: none, the baseline).
//! Prints the hex public key that signed the checkpoints (for `toolgate audit verify
//! --public-key`).

use support::record;
use toolgate_core::PrincipalId;
use toolgate_core::audit::AuditRecord;
use toolgate_store::Store;
use toolgate_store::checkpoint::AuditSigner;

mod support;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(name), Some(n)) = (args.next(), args.next(), args.next()) else {
        anyhow::bail!("usage: checkpoints DATA_DIR TENANT N");
    };
    let n: usize = n.parse()?;
    let every: i64 = args.next().map_or(Ok(1), |a| a.parse())?;
    let store = Store::open(None, std::path::Path::new(&dir)).await?;
    store.migrate().await?;
    let tenant = store.create_tenant(&name).await?.id;
    let principal = PrincipalId::new();
    let mut left = n;
    while left > 0 {
        let batch: Vec<AuditRecord> = (0..left.min(512))
            .map(|_| record(tenant, principal))
            .collect();
        store.append_audit(&batch).await?;
        left -= batch.len();
    }
    let signer = AuditSigner::from_seed(&[9; 32]);
    let Store::Sqlite(sqlite) = &store else {
        unreachable!("opened without a URL")
    };
    // All in one transaction: the store's own insert commits each checkpoint alone (one
    // sync each), as signing one a minute wants.
    let mut tx = sqlite.pool().begin().await?;
    let chain = store.audit_chain(tenant).await?;
    for row in chain.iter().filter(|r| every > 0 && r.seq % every == 0) {
        let cp = signer.sign(tenant, row.seq, &row.row_hash);
        sqlx::query(
            "insert into audit_checkpoint (tenant_id, seq, row_hash, key_id, signature, signed_at) \
             values ($1, $2, $3, $4, $5, $6)",
        )
        .bind(cp.tenant.to_string())
        .bind(cp.seq)
        .bind(&cp.row_hash)
        .bind(&cp.key_id)
        .bind(&cp.signature)
        .bind(cp.signed_at)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    println!("{}", signer.public_key_hex());
    Ok(())
}
