//! Group commit, the one way the gateway's durable writers batch: one writer owns the
//! queue, and while it commits, what arrives meanwhile queues up and goes into its next
//! transaction together. Used by the audit writer (`toolgate-store`) and each run's
//! journal (`toolgate-agent`); what a failed group means stays theirs to say.

use tokio::sync::mpsc;

/// Waits for the next item, then takes whatever else is already queued into `group`:
/// at most `limit` items, ending early after one that `closes` the group (an item that
/// must be the last of its transaction). Returns how many were taken; 0 once the queue is
/// closed and empty.
pub async fn next_group<T>(
    queue: &mut mpsc::Receiver<T>,
    group: &mut Vec<T>,
    limit: usize,
    closes: impl Fn(&T) -> bool,
) -> usize {
    let before = group.len();
    if queue.recv_many(group, 1).await == 0 {
        return 0;
    }
    while group.len() - before < limit && !group.last().is_some_and(&closes) {
        match queue.try_recv() {
            Ok(item) => group.push(item),
            Err(_) => break,
        }
    }
    group.len() - before
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_group_takes_what_is_queued_up_to_its_limit_or_its_closing_item() {
        let (tx, mut rx) = mpsc::channel(16);
        for n in [1, 2, 3, 4, 5] {
            tx.send(n).await.expect("queued");
        }
        let mut group = Vec::new();
        assert_eq!(next_group(&mut rx, &mut group, 2, |_| false).await, 2);
        assert_eq!(group, [1, 2]);
        group.clear();
        assert_eq!(next_group(&mut rx, &mut group, 10, |n| *n == 4).await, 2);
        assert_eq!(group, [3, 4]);
        group.clear();
        drop(tx);
        assert_eq!(next_group(&mut rx, &mut group, 10, |_| false).await, 1);
        assert_eq!(group, [5]);
        group.clear();
        assert_eq!(next_group(&mut rx, &mut group, 10, |_| false).await, 0);
    }
}
