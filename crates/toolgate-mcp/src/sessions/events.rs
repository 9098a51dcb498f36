//! One session's SSE events in the store: event ids are the store's sequence numbers,
//! replayed for `Last-Event-ID` on any instance, followed while a polled request runs.

use super::*;

/// The SSE events of one session, in the store under its tenant. Event ids are the
/// store's sequence numbers: unique across instances, ordered within a stream.
pub(super) struct SessionEvents<S> {
    pub(super) store: S,
    pub(super) tenant: TenantId,
    pub(super) session: OnceLock<SessionId>,
    /// SSE polling: a resumed stream follows its request for `after`.
    pub(super) poll: Option<Polling>,
}

#[derive(Clone, Copy)]
pub(super) struct Polling {
    /// How long a stream is held before it is let go of.
    pub(super) after: Duration,
    /// The `retry` the client is told when it is.
    pub(super) retry: Duration,
}

/// How often a followed stream looks for new events in the store.
pub(super) const FOLLOW_EVERY: Duration = Duration::from_millis(50);

impl<S> SessionEvents<S> {
    fn session(&self) -> Result<&str, EventStoreError> {
        Ok(self
            .session
            .get()
            .ok_or("an SSE event before its session had an id")?)
    }
}

#[async_trait]
impl<S: SessionRows + Clone> EventStore for SessionEvents<S> {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<EventId, EventStoreError> {
        let message = event
            .message
            .as_deref()
            .map(serde_json::to_string)
            .transpose()?;
        let retry_ms = event
            .retry
            .map(|r| i32::try_from(r.as_millis()).unwrap_or(i32::MAX));
        let seq = self
            .store
            .append_mcp_event(
                self.tenant,
                self.session()?,
                stream_id,
                message.as_deref(),
                retry_ms,
            )
            .await?;
        Ok(seq.to_string())
    }

    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        let seq: i64 = last_event_id.parse()?;
        let session = self.session()?.to_owned();
        let replay = stored_after(&self.store, self.tenant, &session, seq).await?;
        // The stream's events one bounded read at a time, as the client takes them (a
        // stream resumed after its first event was read whole before: every event kept).
        // Polling: then follows the stream (what other instances store included) until
        // it carries its request's answer, or until it is time to let go of it as well.
        let poll = self.poll;
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let (store, tenant) = (self.store.clone(), self.tenant);
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + poll.map_or(Duration::ZERO, |p| p.after);
            let (mut last, mut pending) = (seq, replay);
            loop {
                let found = !pending.is_empty();
                for event in pending.drain(..) {
                    last = event
                        .event_id
                        .as_deref()
                        .and_then(|id| id.parse().ok())
                        .unwrap_or(last);
                    let answer = matches!(
                        event.message.as_deref(),
                        Some(ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_))
                    );
                    if tx.send(event).await.is_err() || (answer && poll.is_some()) {
                        return;
                    }
                }
                match poll {
                    // Replayed: every event stored after the one asked for.
                    None if !found => return,
                    None => {}
                    Some(poll) if tokio::time::Instant::now() >= deadline => {
                        let _ = tx
                            .send(ServerSseMessage::priming(last.to_string(), poll.retry))
                            .await;
                        return;
                    }
                    // A read that found events may have stopped at its bound: the next
                    // one follows at once.
                    Some(_) if found => {}
                    Some(_) => tokio::select! {
                        () = tx.closed() => return,
                        () = tokio::time::sleep(FOLLOW_EVERY) => {}
                    },
                }
                match stored_after(&store, tenant, &session, last).await {
                    Ok(found) => pending = found,
                    Err(err) => {
                        // The client comes back and tries again.
                        tracing::warn!(error = %err, "a resumed SSE stream could not be read on");
                        return;
                    }
                }
            }
        });
        Ok(Box::pin(futures::stream::poll_fn(move |cx| {
            rx.poll_recv(cx)
        })))
    }
}

/// The stored events of `session` after `seq`, on the stream of `seq`: as many as one
/// bounded read returns.
pub(super) async fn stored_after<S: SessionRows>(
    store: &S,
    tenant: TenantId,
    session: &str,
    seq: i64,
) -> Result<Vec<ServerSseMessage>, EventStoreError> {
    let events = store.mcp_events_after(tenant, session, seq).await?;
    let replay = events
        .into_iter()
        .map(|event| {
            let id = event.seq.to_string();
            Ok(match (event.message, event.retry_ms) {
                (Some(message), _) => ServerSseMessage::new(id, serde_json::from_str(&message)?),
                (None, retry) => ServerSseMessage::priming(
                    id,
                    Duration::from_millis(retry.unwrap_or(0).max(0) as u64),
                ),
            })
        })
        .collect::<Result<Vec<_>, serde_json::Error>>()?;
    Ok(replay)
}
