//! The calling client, as a tool may reach it mid-call.
//!
//! An MCP server a tool comes from (an upstream) may, while a call runs, send the caller
//! log messages and ask the caller's client to sample its model (`sampling/createMessage`)
//! or to ask its user something (`elicitation/create`). A front door whose clients can do
//! that (MCP) puts a [`ClientChannel`] into the [`CallContext`](crate::CallContext); other
//! front doors (REST, agent runs) leave it out, and such requests are refused.
//!
//! Messages travel as the MCP JSON they are, so this crate stays free of any protocol
//! library: the upstream side serializes what it received, the front door parses it into
//! what it sends.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

/// A request a tool's server may make of the calling client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientRequest {
    /// `sampling/createMessage`: the client's model writes a message.
    Sampling,
    /// `elicitation/create`: the client asks its user.
    Elicitation,
}

impl ClientRequest {
    pub fn method(self) -> &'static str {
        match self {
            ClientRequest::Sampling => "sampling/createMessage",
            ClientRequest::Elicitation => "elicitation/create",
        }
    }
}

/// Why the client did not answer: a JSON-RPC error to hand back to the server that asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientError {
    pub code: i32,
    pub message: String,
}

impl ClientError {
    /// JSON-RPC "method not found": the client cannot do this at all.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// JSON-RPC "invalid request": refused as it stands, here, now.
    pub const INVALID_REQUEST: i32 = -32600;
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL: i32 = -32603;

    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

/// What the calling client can do for a tool while its call runs.
#[async_trait]
pub trait ClientChannel: Send + Sync {
    /// Passes on a log message (the params of MCP `notifications/message`: `level`,
    /// `logger`, `data`), when the client's chosen level lets it through. Never waits.
    fn log(&self, message: Value);

    /// Sends `request` with `params` (MCP JSON) to the client and returns its result.
    async fn request(&self, request: ClientRequest, params: Value) -> Result<Value, ClientError>;
}

/// A call's way back to its client; `Debug` without showing what is behind it.
#[derive(Clone)]
pub struct Client(pub Arc<dyn ClientChannel>);

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Client(..)")
    }
}
