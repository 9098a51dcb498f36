//! Deletes of many rows made as many short ones: SQLite's write lock is the whole
//! database's, and one long delete would hold every call's audit commit behind it.

use crate::StoreError;

/// Rows (or runs, or sessions) a delete takes per statement: short ones beside the audit
/// writer.
pub(crate) const BATCH: i64 = 1_000;

/// Runs `delete`, one batch of at most [`BATCH`], until a batch comes back short; how
/// many went. After each batch it pauses as long as the batch took: the audit writer's
/// commits get in between instead of waiting out their busy handler's back-off behind
/// the next batch.
pub(crate) async fn in_batches<F, Fut>(mut delete: F) -> Result<u64, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64, StoreError>>,
{
    let mut deleted = 0;
    loop {
        let started = std::time::Instant::now();
        let gone = delete().await?;
        deleted += gone;
        if gone < BATCH as u64 {
            return Ok(deleted);
        }
        tokio::time::sleep(started.elapsed()).await;
    }
}
