//! Protocol 2026-07-28's `subscriptions/listen`, and [`Listening`], its upstream
//! subscriptions made before rmcp acknowledges the stream.

use super::*;

/// A `subscriptions/listen` stream's upstream resource subscriptions, made by the `/mcp`
/// edge ([`Listening::ahead`]) before rmcp sees the request, and put into the request's
/// extensions.
///
/// The acknowledgement says the stream is established, and rmcp sends it before
/// [`ServerHandler::listen`] runs, with no hook before it where the caller is known: a
/// resource updated between the two was lost when the upstream subscriptions were made in
/// `listen` (a client acting on the acknowledgement raced them, one upstream round trip).
/// `listen` passes on what they heard meanwhile; a listen rmcp refuses gives them back
/// when its request ends.
#[derive(Clone)]
pub struct Listening(Arc<catalog::Subscriptions>);

impl Listening {
    /// Subscribes upstream to `uris`, the resources a `subscriptions/listen` request asks
    /// to watch (as the `/mcp` edge read them), as `caller`; refuses more than
    /// [`catalog::MAX_RESOURCE_SUBSCRIPTIONS`].
    pub async fn ahead(
        uris: &[String],
        caller: &McpCaller,
        registry: &Arc<Registry>,
        catalog: &Arc<catalog::Catalog>,
    ) -> Result<Self, ErrorData> {
        let upstreams = visible(registry, catalog, caller);
        Ok(Self(hold(&upstreams, catalog, uris).await?))
    }
}

/// How many upstream subscriptions one listen stream asks for at a time. The stream is
/// acknowledged once all are made: one after the other, a stream watching 40 resources of
/// an upstream answering in 200 ms waited 8 s for its acknowledgement.
const SUBSCRIBING_AT_ONCE: usize = 8;

/// A listen stream's subscriptions: upstream, to each of `uris` one of `upstreams`
/// serves (see [`hold_into`]); more than [`catalog::MAX_RESOURCE_SUBSCRIPTIONS`] URIs
/// are refused.
async fn hold(
    upstreams: &[Arc<catalog::Entry>],
    catalog: &Arc<catalog::Catalog>,
    uris: &[String],
) -> Result<Arc<catalog::Subscriptions>, ErrorData> {
    if uris.len() > catalog::MAX_RESOURCE_SUBSCRIPTIONS {
        return Err(catalog::too_many_subscriptions(uris.len()));
    }
    let subscriptions = catalog::Subscriptions::new(catalog.clone());
    hold_into(&subscriptions, upstreams, uris.iter().map(String::as_str)).await;
    Ok(subscriptions)
}

/// Subscribes upstream, into `subscriptions`, to each of `uris` one of `upstreams`
/// serves and may be subscribed to. A URI none serves yet, or whose upstream refused,
/// is left out: the listen stream asks again when its tenant's resources change.
async fn hold_into<'a>(
    subscriptions: &Arc<catalog::Subscriptions>,
    upstreams: &[Arc<catalog::Entry>],
    uris: impl Iterator<Item = &'a str>,
) {
    use futures::StreamExt as _;
    let served = uris.filter_map(|uri| {
        let upstream = catalog::serving(upstreams, uri)?;
        upstream.subscribable.then_some((upstream, uri))
    });
    futures::stream::iter(served)
        .for_each_concurrent(SUBSCRIBING_AT_ONCE, |(upstream, uri)| async move {
            if let Err(err) = subscriptions.hold(&upstream, uri).await {
                tracing::warn!(upstream = %upstream.upstream, uri, error = %err, "could not subscribe upstream for a listen stream");
            }
        })
        .await;
}

impl McpAdapter {
    /// Runs one acknowledged listen stream until it ends: its resource updates, and
    /// changes to the caller's tools, resources and prompts. Its upstream subscriptions
    /// are given back when it ends.
    pub(crate) async fn listen_until_ended(
        &self,
        context: SubscriptionContext,
    ) -> Result<(), ErrorData> {
        let request = context.request_context();
        let tenant = caller(request)?.auth.tenant;
        let sink = context.sink().clone();
        let ahead = request
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Listening>());
        let subscriptions = match ahead {
            Some(Listening(held)) => held.clone(),
            // Served without the `/mcp` edge (in-process): subscribed now.
            None => {
                let uris = context.accepted().resource_subscriptions.as_deref();
                let upstreams = self.visible_upstreams(request)?;
                hold(&upstreams, &self.catalog, uris.unwrap_or_default()).await?
            }
        };
        subscriptions.forward(catalog::Listener::Stream(sink.clone()));
        let accepted = context.accepted();
        let changes = self.catalog.changes();
        let mut lists = ListWatch::new(changes.subscribe(), || Some(changes.generation(tenant)));
        // URIs no upstream served when the stream began (an upstream still connecting, or
        // a resource not listed yet): subscribed once one does. Looked at again now, since
        // the edge subscribed before rmcp acknowledged, and on every change to what the
        // tenant's upstreams list.
        let mut waiting: Vec<String> = accepted
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| !subscriptions.holds(uri))
            .cloned()
            .collect();
        self.hold_waiting(request, &subscriptions, &mut waiting)
            .await?;
        let on = |flag: Option<bool>| flag == Some(true);
        let (resources_on, prompts_on) = (
            on(accepted.resources_list_changed),
            on(accepted.prompts_list_changed),
        );
        let mut tools_on = on(accepted.tools_list_changed);
        let mut lists_on = resources_on || prompts_on;
        let registry = &self.registry;
        let mut tools = ListWatch::new(registry.changes(), || Some(registry.generation(tenant)));
        loop {
            tokio::select! {
                () = context.cancelled() => break,
                changed = tools.next(), if tools_on => {
                    tools_on = changed && sink.notify_tool_list_changed().await.is_ok();
                }
                changed = lists.next(), if lists_on || !waiting.is_empty() => {
                    if !changed {
                        (lists_on, waiting) = (false, Vec::new());
                        continue;
                    }
                    self.hold_waiting(request, &subscriptions, &mut waiting).await?;
                    lists_on = lists_on
                        && (!resources_on || sink.notify_resource_list_changed().await.is_ok())
                        && (!prompts_on || sink.notify_prompt_list_changed().await.is_ok());
                }
            }
        }
        Ok(())
    }

    /// Subscribes to those of `waiting` an upstream the caller sees now serves; the
    /// others stay in `waiting`.
    async fn hold_waiting(
        &self,
        request: &RequestContext<RoleServer>,
        subscriptions: &Arc<catalog::Subscriptions>,
        waiting: &mut Vec<String>,
    ) -> Result<(), ErrorData> {
        if waiting.is_empty() {
            return Ok(());
        }
        let upstreams = self.visible_upstreams(request)?;
        hold_into(
            subscriptions,
            &upstreams,
            waiting.iter().map(String::as_str),
        )
        .await;
        waiting.retain(|uri| !subscriptions.holds(uri));
        Ok(())
    }
}
