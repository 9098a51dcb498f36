//! The [`Tool`] trait and what a call returns.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{CallContext, ToolError, ToolSpec};

/// A callable tool. Implementations live in `toolgate-tools` (built-ins) and
/// `toolgate-mcp` (upstream MCP servers); only the [`Executor`](crate::Executor) calls them.
///
/// The arguments have already been validated against `spec().input_schema` when `call`
/// runs; a tool still returns `invalid_arguments` for what a schema cannot express (a path
/// outside the workspace, say).
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    fn spec(&self) -> &ToolSpec;

    /// Whether the tool can be called now. An upstream tool whose server is away (and
    /// being reconnected) says no; listings mark it, calls fail as `upstream` errors.
    fn available(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &CallContext, args: Value) -> Result<ToolOutput, ToolError>;
}

/// One piece of output for people and models.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = ContentItem))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    Text {
        text: String,
    },
    Image {
        /// Base64-encoded bytes.
        data: String,
        mime_type: String,
    },
    Audio {
        /// Base64-encoded bytes.
        data: String,
        mime_type: String,
    },
    /// A resource embedded in the output, as MCP's `EmbeddedResource.resource`: `uri`,
    /// `mimeType`, and `text` or base64 `blob` (kept as given by an upstream server).
    Resource {
        #[cfg_attr(feature = "openapi", schema(value_type = Object))]
        resource: Value,
    },
    /// A link to a resource the caller may read, as MCP's `ResourceLink` (`uri`, `name`,
    /// `mimeType`, …).
    ResourceLink {
        #[cfg_attr(feature = "openapi", schema(value_type = Object))]
        link: Value,
    },
}

/// What a successful call returns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    pub content: Vec<Content>,
    /// Structured result matching the tool's output schema, when it has one.
    pub structured: Option<Value>,
    /// Vendor metadata for the result (`openai/…` keys and the like). Adapters pass each
    /// entry only to clients configured to receive its vendor prefix; REST and agents
    /// never see it.
    #[serde(default, skip)]
    pub vendor_meta: serde_json::Map<String, Value>,
}

impl ToolOutput {
    /// Plain text output.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![Content::Text { text: text.into() }],
            structured: None,
            vendor_meta: Default::default(),
        }
    }

    pub fn with_structured(mut self, structured: Value) -> Self {
        self.structured = Some(structured);
        self
    }

    /// Cuts text content beyond `limit` characters in total, appending a visible marker
    /// to the last text kept. Returns whether anything was cut.
    pub fn truncate_text(&mut self, limit: usize) -> bool {
        let total: usize = self.text_chars();
        if total <= limit {
            return false;
        }
        let mut budget = limit;
        let mut cut_at = None;
        for (i, item) in self.content.iter_mut().enumerate() {
            let Content::Text { text } = item else {
                continue;
            };
            let chars = text.chars().count();
            if chars <= budget {
                budget -= chars;
                continue;
            }
            let byte_end = text
                .char_indices()
                .nth(budget)
                .map_or(text.len(), |(b, _)| b);
            text.truncate(byte_end);
            text.push_str(&format!(
                "\n\n[output truncated: showing {limit} of {total} characters]"
            ));
            cut_at = Some(i);
            break;
        }
        if let Some(i) = cut_at {
            // Drop later text items entirely; keep non-text items (images) as they are.
            let mut idx = 0;
            self.content.retain(|item| {
                let keep = idx <= i || !matches!(item, Content::Text { .. });
                idx += 1;
                keep
            });
        }
        true
    }

    fn text_chars(&self) -> usize {
        self.content
            .iter()
            .map(|c| match c {
                Content::Text { text } => text.chars().count(),
                Content::Image { .. }
                | Content::Audio { .. }
                | Content::Resource { .. }
                | Content::ResourceLink { .. } => 0,
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_left_alone() {
        let mut out = ToolOutput::text("hello");
        assert!(!out.truncate_text(5));
        assert_eq!(out, ToolOutput::text("hello"));
    }

    #[test]
    fn long_output_is_cut_on_a_char_boundary_with_a_marker() {
        let mut out = ToolOutput::text("héllo wörld");
        assert!(out.truncate_text(4));
        let Content::Text { text } = &out.content[0] else {
            panic!("text expected")
        };
        assert!(
            text.starts_with("héll\n\n[output truncated: showing 4 of 11 characters]"),
            "{text}"
        );
    }

    #[test]
    fn truncation_counts_all_text_items_and_drops_later_ones() {
        let mut out = ToolOutput {
            content: vec![
                Content::Text {
                    text: "aaaa".into(),
                },
                Content::Image {
                    data: "x".into(),
                    mime_type: "image/png".into(),
                },
                Content::Text {
                    text: "bbbb".into(),
                },
                Content::Text {
                    text: "cccc".into(),
                },
            ],
            ..Default::default()
        };
        assert!(out.truncate_text(6));
        assert_eq!(out.content.len(), 3, "{:?}", out.content);
        assert!(
            matches!(&out.content[2], Content::Text { text } if text.starts_with("bb\n\n[output truncated"))
        );
    }
}
