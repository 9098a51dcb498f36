//! Calling one operation: the request built from the arguments, the answer read.

use super::*;

impl HttpTool {
    /// The request this call makes.
    pub(super) fn request(&self, args: &Value) -> Result<reqwest::RequestBuilder, ToolError> {
        let op = &self.operation;
        let mut path = String::new();
        let mut rest = op.path.as_str();
        while let Some(open) = rest.find('{') {
            path.push_str(&rest[..open]);
            let Some(close) = rest[open..].find('}') else {
                break;
            };
            let name = &rest[open + 1..open + close];
            let value = args.get(name).map(text_of).ok_or_else(|| {
                ToolError::invalid_arguments(format!("the path parameter {name:?} is missing"))
            })?;
            // Every byte outside the unreserved set is escaped: a value never adds a
            // path segment (no `/`, no `..` that means anything).
            for byte in value.bytes() {
                if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'~') {
                    path.push(char::from(byte));
                } else {
                    let _ = write!(path, "%{byte:02X}");
                }
            }
            rest = &rest[open + close + 1..];
        }
        path.push_str(rest);
        let mut url = self.api.base.clone();
        let joined = format!("{}{}", url.path().trim_end_matches('/'), path);
        url.set_path(if joined.is_empty() { "/" } else { &joined });
        let mut headers = self.api.headers.clone();
        {
            let mut query = url.query_pairs_mut();
            for param in &op.params {
                let Some(value) = args.get(&param.name).filter(|v| !v.is_null()) else {
                    continue;
                };
                match param.location {
                    In::Path => {}
                    In::Query => match value {
                        Value::Array(items) => {
                            for item in items {
                                query.append_pair(&param.name, &text_of(item));
                            }
                        }
                        other => {
                            query.append_pair(&param.name, &text_of(other));
                        }
                    },
                    In::Header => {
                        let name = HeaderName::from_bytes(param.name.as_bytes())
                            .map_err(|e| ToolError::internal(e.to_string()))?;
                        let value = HeaderValue::from_str(&text_of(value)).map_err(|_| {
                            ToolError::invalid_arguments(format!(
                                "{:?} is not a valid header value",
                                param.name
                            ))
                        })?;
                        headers.insert(name, value);
                    }
                }
            }
        }
        if url.query() == Some("") {
            url.set_query(None);
        }
        let mut request = self
            .api
            .client
            .request(op.method.clone(), url)
            .headers(headers)
            .header(reqwest::header::ACCEPT, "application/json, */*;q=0.5");
        if let Some(body) = op.body.as_deref().and_then(|b| args.get(b)) {
            request = request.json(body);
        }
        Ok(request)
    }
}

#[async_trait]
impl Tool for HttpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &CallContext, args: Value) -> Result<ToolOutput, ToolError> {
        let mut request = self.request(&args)?;
        if let Some(traceparent) = ctx.traceparent() {
            request = request.header("traceparent", traceparent);
        }
        let what = format!("{} {}", self.operation.method, self.operation.path);
        let mut response = request.send().await.map_err(|e| {
            ToolError::new(
                ErrorKind::Upstream,
                format!("{what} failed: {}", toolgate_core::error::chain(&e)),
            )
        })?;
        let status = response.status();
        let mut body = Vec::new();
        let mut cut = false;
        while let Some(chunk) = response.chunk().await.map_err(|e| {
            ToolError::new(
                ErrorKind::Upstream,
                format!(
                    "reading the answer to {what} failed: {}",
                    toolgate_core::error::chain(&e)
                ),
            )
        })? {
            let room = MAX_RESPONSE_BYTES.saturating_sub(body.len());
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                cut = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        let mut text = String::from_utf8_lossy(&body).into_owned();
        if !status.is_success() {
            let excerpt: String = text.chars().take(500).collect();
            let mut err = ToolError::new(
                ErrorKind::Upstream,
                format!("{what} answered {status}: {excerpt}"),
            )
            .with_details(json!({"status": status.as_u16()}));
            err.recoverable = status.is_server_error() || status.as_u16() == 429;
            return Err(err);
        }
        if cut {
            let _ = write!(
                text,
                "\n\n[answer cut at {MAX_RESPONSE_BYTES} bytes by the gateway]"
            );
        }
        Ok(ToolOutput::text(text))
    }
}
