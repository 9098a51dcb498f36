//! The shape the workspace file tools share: a spec made from the arguments' and the
//! result's types, the caller's workspace, the arguments' `path` checked against it, and
//! the work done on the blocking pool. A file tool is its argument struct, implementing
//! [`FileWork`]; [`WorkspaceTool`] over it is the [`Tool`].

use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolgate_core::{CallContext, Effects, Risk, Tool, ToolError, ToolOutput, ToolSpec};

use crate::{Workspace, Workspaces, blocking, parse_args};

/// A file tool's arguments, and what a call with them does in the caller's workspace.
/// The tool's input schema is derived from the arguments, its output schema from
/// [`FileWork::Output`].
pub trait FileWork: DeserializeOwned + JsonSchema + Send + 'static {
    /// The call's structured result.
    type Output: Serialize + JsonSchema + Send + 'static;

    /// The tool's name, title and description, as its spec shows them.
    const NAME: &'static str;
    const TITLE: &'static str;
    const DESCRIPTION: &'static str;
    /// What a call may change, for a tool that writes; `None` for one that only reads.
    const RISK: Option<(Risk, Effects)> = None;

    /// The path the call works on, as given (relative to the workspace root).
    fn path(&self) -> &str;

    /// The call's work, on the blocking pool: the text the caller reads, and the
    /// structured result.
    fn run(self, at: At<'_>) -> Result<(String, Self::Output), ToolError>;
}

/// Where a file tool's call works.
pub struct At<'a> {
    pub ws: &'a Workspace,
    /// [`FileWork::path`] checked and made relative to the workspace root.
    pub rel: PathBuf,
    /// The call's cancellation.
    pub cancel: &'a CancellationToken,
}

/// The tool whose arguments are `A`.
pub struct WorkspaceTool<A> {
    spec: ToolSpec,
    workspaces: Arc<Workspaces>,
    args: PhantomData<fn() -> A>,
}

impl<A: FileWork> WorkspaceTool<A> {
    pub fn new(workspaces: Arc<Workspaces>) -> Self {
        let mut spec = ToolSpec::new(A::NAME, A::DESCRIPTION, crate::input_schema::<A>())
            .with_title(A::TITLE)
            .with_category("workspace")
            .with_output_schema(crate::output_schema::<A::Output>());
        if let Some((risk, effects)) = A::RISK {
            spec = spec.with_risk(risk, effects);
        }
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
        let (text, output) = blocking(move || {
            args.run(At {
                ws: &ws,
                rel,
                cancel: &cancel,
            })
        })
        .await?;
        Ok(ToolOutput::text(text).with_structured(crate::structured(&output)))
    }
}
