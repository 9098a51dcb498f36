//! The [`ServerHandler`]: what each MCP request does, through the one executor.

use super::*;

// The relaying handlers (and `tools/call`'s rare approval step) box their work: rmcp runs
// every request in a task holding its dispatch future, which is as large as the largest
// handler's, and moves it whole several times. Measured with `bench/instructions.sh`
// (gateway without audit, stateless): memcpy per `tools/call` fell from 157k to 36k
// instructions (bytes), 370k to 248k instructions in all.
impl ServerHandler for McpAdapter {
    #[allow(deprecated)] // logging: deprecated by SEP-2577 (2026-07-28), used before it
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_logging()
                .enable_completions()
                .build(),
        )
        .with_server_info(
            Implementation::new("toolgate", env!("CARGO_PKG_VERSION")).with_title("toolgate"),
        )
        .with_instructions(
            "Tools available to your credentials. Every call is authorized, time-limited and audited; \
             a failed call returns an isError result whose text is a JSON error with kind, message, \
             suggestion and, for invalid arguments, every schema violation.",
        )
    }

    /// What rmcp could not decode as a request it knows. A known method lands here when
    /// its params do not fit it: JSON-RPC calls that -32602 (invalid params), not -32601
    /// (rmcp's default, which told a client with a typo in `tools/call`'s params that
    /// `tools/call` did not exist).
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let method = request.method.as_str();
        Answer::of(&context).record(if is_known_method(method) {
            Err(ErrorData::invalid_params(
                format!("the params of {method} do not match its schema"),
                Some(json!({ "method": method })),
            ))
        } else {
            Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("no method named {method:?}"),
                None,
            ))
        })
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let tenant = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<McpCaller>())
            .map(|caller| caller.auth.tenant);
        watch_lists(
            self.registry.clone(),
            self.catalog.clone(),
            tenant,
            context.peer,
        );
    }

    /// The lowest level of upstream log messages this session hears from its calls. In a
    /// session it is kept with the session (when the gateway keeps sessions' state), so
    /// that the session, restored from the store, still has it; a level that could not be
    /// kept is not set, and the client hears why.
    #[allow(deprecated)] // logging is deprecated by SEP-2577 (2026-07-28), still used before it
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if let (Some(sessions), Some(session)) = (&self.sessions, session_id(&context)) {
            let tenant = caller(&context)?.auth.tenant;
            sessions
                .keep_level(tenant, session, request.level)
                .await
                .map_err(|why| {
                    tracing::warn!(error = %why, "could not keep a session's log level");
                    ErrorData::internal_error(format!("the log level was not kept: {why}"), None)
                })?;
        }
        self.log_level.set(request.level);
        Ok(())
    }

    /// A session restored from the store (let go of from memory, or made on another
    /// instance) replays its `initialize` here; it gets back the level it had chosen.
    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, ErrorData> {
        use rmcp::transport::streamable_http_server::SessionRestoreMarker;
        if let (Some(sessions), Some(restored)) = (
            &self.sessions,
            context.extensions.get::<SessionRestoreMarker>(),
        ) {
            match sessions.kept_level(&restored.id).await {
                Ok(Some(level)) => self.log_level.set(level),
                Ok(None) => {}
                // The store answered for the session a moment ago: it hears everything
                // rather than lose the session.
                Err(why) => {
                    tracing::warn!(error = %why, "could not read a restored session's log level")
                }
            }
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let upstreams = self.visible_upstreams(&context)?;
        let resources = upstreams.iter().flat_map(|u| u.resources.iter().cloned());
        let (resources, next_cursor) = page(resources.collect(), |r| &r.uri, request);
        let mut listed = ListResourcesResult::with_all_items(resources);
        listed.next_cursor = next_cursor;
        Ok(listed)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let upstreams = self.visible_upstreams(&context)?;
        let templates = upstreams.iter().flat_map(|u| u.templates.iter().cloned());
        let (templates, next_cursor) = page(templates.collect(), |t| &t.uri_template, request);
        let mut listed = ListResourceTemplatesResult::with_all_items(templates);
        listed.next_cursor = next_cursor;
        Ok(listed)
    }

    async fn read_resource(
        &self,
        mut request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let answer = Answer::of(&context);
        let read = Box::pin(async move {
            let upstream = self.resource_upstream(&context, &request.uri)?;
            let args = json!({"uri": request.uri, "upstream": upstream.upstream});
            // The upstream connection is shared: the caller's `_meta` (a progress token, say)
            // stays here, where it means something.
            request.meta = None;
            let target = request.uri.clone();
            self.relay(
                &context,
                ("resources/read", &target),
                args,
                &upstream,
                request,
                |peer, request| async move { peer.read_resource_once(request).await },
            )
            .await
        });
        answer.record(read.await)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Box::pin(async move {
            let held = self.subscriptions.len();
            if held >= catalog::MAX_RESOURCE_SUBSCRIPTIONS
                && !self.subscriptions.holds(&request.uri)
            {
                return Err(catalog::too_many_subscriptions(held + 1));
            }
            let upstream = self.resource_upstream(&context, &request.uri)?;
            if !upstream.subscribable {
                return Err(ErrorData::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!(
                        "upstream {} does not offer subscriptions to its resources",
                        upstream.upstream
                    ),
                    Some(json!({ "uri": request.uri })),
                ));
            }
            self.subscriptions
                .subscribe(
                    &upstream,
                    &request.uri,
                    catalog::Listener::Session(context.peer.clone()),
                )
                .await
                .map_err(|e| upstream_error(&upstream.upstream, e))?;
            // A session let go of from memory would miss the updates.
            if let (Some(sessions), Some(session)) = (&self.sessions, session_id(&context)) {
                sessions.hold_in_memory(session).await;
            }
            Ok(())
        })
        .await
    }

    /// Protocol 2026-07-28's `subscriptions/listen`: changes to the caller's tools,
    /// resources and prompts, and resource updates. Which URIs a caller
    /// may watch is decided where the caller is known (`listen.rs`); a URI it cannot
    /// see is acknowledged and never updated, as a URI that does not exist.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::builder();
        if requested.tools_list_changed == Some(true) {
            accepted = accepted.tools_list_changed();
        }
        if requested.resources_list_changed == Some(true) {
            accepted = accepted.resources_list_changed();
        }
        if requested.prompts_list_changed == Some(true) {
            accepted = accepted.prompts_list_changed();
        }
        if let Some(uris) = &requested.resource_subscriptions {
            accepted = accepted.resource_subscriptions(uris.iter().cloned());
        }
        Some(accepted.build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        Box::pin(self.listen_until_ended(context)).await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions.unsubscribe(&request.uri);
        Ok(())
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let upstreams = self.visible_upstreams(&context)?;
        let prompts = upstreams.iter().flat_map(|u| u.named_prompts());
        let (prompts, next_cursor) = page(prompts.collect(), |p| &p.name, request);
        let mut listed = ListPromptsResult::with_all_items(prompts);
        listed.next_cursor = next_cursor;
        Ok(listed)
    }

    async fn get_prompt(
        &self,
        mut request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let answer = Answer::of(&context);
        let got = Box::pin(async move {
            let (upstream, remote) = self.prompt_upstream(&context, &request.name)?;
            let args = json!({"name": request.name, "arguments": request.arguments,
                              "upstream": upstream.upstream});
            request.name = remote;
            request.meta = None;
            let target = request.name.clone();
            self.relay(
                &context,
                ("prompts/get", &target),
                args,
                &upstream,
                request,
                |peer, request| async move { peer.get_prompt_once(request).await },
            )
            .await
        });
        answer.record(got.await)
    }

    /// Argument completion for an upstream's prompt or resource template, relayed to the
    /// upstream that offers it; one that offers no completion completes nothing.
    async fn complete(
        &self,
        mut request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let answer = Answer::of(&context);
        let completed = Box::pin(async move {
            let upstream = match &mut request.r#ref {
                Reference::Prompt(prompt) => {
                    let (upstream, remote) = self.prompt_upstream(&context, &prompt.name)?;
                    prompt.name = remote;
                    upstream
                }
                Reference::Resource(resource) => {
                    let upstreams = self.visible_upstreams(&context)?;
                    upstreams
                        .iter()
                        .find(|u| u.has_template(&resource.uri))
                        .cloned()
                        .or_else(|| catalog::serving(&upstreams, &resource.uri))
                        .ok_or_else(|| {
                            ErrorData::invalid_params(
                                "no resource template or resource with this URI is available to your credentials",
                                Some(json!({ "uri": resource.uri })),
                            )
                        })?
                }
                other => {
                    return Err(ErrorData::invalid_params(
                        "completion is offered for prompts (ref/prompt) and resource templates (ref/resource)",
                        serde_json::to_value(other).ok(),
                    ));
                }
            };
            if !upstream.completes {
                return Ok(CompleteResult::default());
            }
            let args = json!({"ref": request.r#ref, "argument": request.argument.name,
                              "upstream": upstream.upstream});
            request.meta = None;
            let target = request.argument.name.clone();
            self.relay(
                &context,
                ("completion/complete", &target),
                args,
                &upstream,
                request,
                |peer, request| async move { peer.complete(request).await },
            )
            .await
        });
        answer.record(completed.await)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = caller(&context)?;
        let tools = caller
            .toolset
            .scope(self.registry.clone(), &caller.auth)
            .list();
        let (tools, next_cursor) = page(tools, |t| &t.spec().name, request);
        let client = client_info(&context);
        let vendor = self.vendor_meta.for_client(client.as_ref());
        let tools = tools
            .iter()
            .map(|t| {
                let mut tool = mcp_tool(t.spec())?;
                if !t.available() {
                    let note = "[unavailable: its upstream server is reconnecting; calls fail until it is back] ";
                    tool.description = Some(format!("{note}{}", tool.description.unwrap_or_default()).into());
                }
                tool.meta = vendor.filter(&t.spec().vendor_meta);
                Ok(tool)
            })
            .collect::<Result<Vec<Tool>, serde_json::Error>>()
            .map_err(|e| ErrorData::internal_error(format!("tool rendering: {e}"), None))?;
        let mut page = ListToolsResult::with_all_items(tools);
        page.next_cursor = next_cursor;
        Ok(page)
    }

    /// Boxed: rmcp holds every request's handler future in the one future its dispatch
    /// makes, moved into a task and on; a call's state (its context, the retried one,
    /// the notices) made that future, and every request's moves, 3.7 KB large.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Box::pin(self.call(request, context)).await
    }
}

impl McpAdapter {
    /// `tools/call`: the executor's call, with the client's notices relayed while it
    /// runs and a person asked (elicitation) when it waits for approval.
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = caller(&context)?;
        let tools = caller.toolset.scope(self.registry.clone(), &caller.auth);
        let known = tools.get(&request.name);
        let client = client_info(&context);
        let mut ctx = CallContext::new(caller.auth.clone(), Adapter::Mcp)
            .with_client(client.clone())
            .continuing(caller.continued.clone());
        if let Some(id) = caller.request_id {
            ctx = ctx.with_request_id(id);
        }
        ctx.subject_token = caller.subject_token;
        // `notifications/cancelled` for this request cancels rmcp's token.
        ctx.cancel = context.ct.child_token();
        // An upstream tool's log messages, sampling and elicitation reach this client. Log
        // messages at the level of the session (`logging/setLevel`), or for a 2026-07-28
        // request (its protocol version in `_meta`), at the level in its `_meta`.
        let level = if context.meta.protocol_version().is_some() {
            Arc::new(relay::LogLevel::per_request(context.meta.log_level()))
        } else {
            self.log_level.clone()
        };
        let (peer, mut notices) =
            relay::CallerPeer::new(context.peer.clone(), context.id.clone(), level);
        ctx = ctx.with_peer(Arc::new(peer));
        if let Some(token) = context.meta.get_progress_token() {
            ctx = ctx.with_progress(notices.progress(token));
        }
        // `_meta: {"toolgate/cache": "no-cache" | "no-store"}`, as REST's Cache-Control.
        if let Some(mode) = context
            .meta
            .get(CACHE_META)
            .and_then(Value::as_str)
            .and_then(toolgate_core::cache::CacheMode::from_cache_control)
        {
            ctx = ctx.with_cache(mode);
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        // Unknown tools go through the executor too: the attempt is audited like any call.
        let retry = ctx.clone();
        // Progress and log messages go out as they come, and all of them before the result.
        // Boxed: rmcp holds each request's handler future in a task of its own and moves
        // it; the executor's call inline made that future, and every tools/call's
        // copies, tens of kilobytes larger (docs/BENCHMARKS.md).
        let mut outcome = notices
            .drive(Box::pin(self.executor.call(
                &tools,
                ctx,
                &request.name,
                args.clone(),
            )))
            .await;
        if let Err(err) = &outcome
            && err.kind == ErrorKind::ApprovalRequired
            && let Some(approval) =
                Box::pin(self.ask_user(&caller.auth, &context, &request.name, err)).await
        {
            // The user decided: the call again, presenting the decision (a new call id).
            let mut again = retry.with_approval(Some(approval));
            again.call_id = toolgate_core::CallId::new();
            outcome = notices
                .drive(Box::pin(self.executor.call(
                    &tools,
                    again,
                    &request.name,
                    args,
                )))
                .await;
        }
        let result = match (outcome, known) {
            (Ok(done), Some(tool)) => {
                let mut meta = self
                    .vendor_meta
                    .filter_for(client.as_ref(), &done.output.vendor_meta);
                if let Some(status) = done.cache {
                    meta.get_or_insert_with(Default::default)
                        .insert(CACHE_META.into(), status.as_str().into());
                }
                let mut result = success_result(done, tool.spec().output_schema.is_some());
                result.meta = meta;
                Ok(result)
            }
            (Ok(done), None) => Ok(success_result(done, false)),
            (Err(err), None) if err.kind == ErrorKind::NotFound => Err(ErrorData::invalid_params(
                err.message,
                Some(json!({ "tool": request.name })),
            )),
            (Err(err), _) => Ok(error_result(&err)),
        };
        caller.answer.record_call(result).map(Into::into)
    }
}
