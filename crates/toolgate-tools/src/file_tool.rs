//! The shape the workspace file tools share: a spec, the caller's workspace, the
//! arguments' `path` checked against it, and the work done on the blocking pool. A file
//! tool is its argument struct, implementing [`FileWork`]; [`WorkspaceTool`] over it is
//! the [`Tool`].

use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolgate_core::{CallContext, Tool, ToolError, ToolOutput, ToolSpec};

use crate::{Workspace, Workspaces, blocking, parse_args};

/// A file tool's arguments, and what a call with them does in the caller's workspace.
pub trait FileWork: DeserializeOwned + Send + 'static {
    /// The path the call works on, as given (relative to the workspace root).
    fn path(&self) -> &str;

    /// The call's work, on the blocking pool: `rel` is [`FileWork::path`] checked and
    /// made relative to the workspace root; `cancel` is the call's.
    fn run(
        args: Self,
        ws: &Workspace,
        rel: PathBuf,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError>;
}

/// The tool whose arguments are `A`.
pub struct WorkspaceTool<A> {
    spec: ToolSpec,
    workspaces: Arc<Workspaces>,
    args: PhantomData<fn() -> A>,
}

impl<A> WorkspaceTool<A> {
    pub(crate) fn with_spec(spec: ToolSpec, workspaces: Arc<Workspaces>) -> Self {
        Self {
            spec,
            workspaces,
            args: PhantomData,
        }
    }
}

#[async_trait]
impl<A: FileWork> Tool for WorkspaceTool<A> {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &CallContext, args: Value) -> Result<ToolOutput, ToolError> {
        let args: A = parse_args(args)?;
        let ws = self.workspaces.for_caller(&ctx.auth)?;
        let rel = ws.relative(args.path())?;
        let cancel = ctx.cancel.clone();
        blocking(move || A::run(args, &ws, rel, &cancel)).await
    }
}
