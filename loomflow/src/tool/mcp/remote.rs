//! [`McpTool`]: one tool of an MCP server, as a loomflow [`Tool`]; and the conversion of its
//! results to JSON.

use std::sync::{Arc, Weak};

use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::{Peer, RoleClient};
use serde_json::Value;

use super::catalog::Catalog;
use super::error::McpError;
use crate::graph::BoxFuture;
use crate::tool::{Tool, ToolContext, ToolError, ToolSpec};

/// A server's tool. The host checks, hooks, permits and times its calls like any other tool;
/// the call itself is a `tools/call` request to the server.
pub(super) struct McpTool {
    spec: ToolSpec,
    /// The name the server knows it by (without the host's prefix).
    remote: String,
    /// The server's catalog, which lists this tool: weak, as the catalog holds its tools.
    catalog: Weak<Catalog>,
    /// The server's name, for errors once the catalog is gone.
    server: String,
    peer: Peer<RoleClient>,
}

impl McpTool {
    pub(super) fn new(
        spec: ToolSpec,
        remote: String,
        catalog: &Arc<Catalog>,
        peer: Peer<RoleClient>,
    ) -> Self {
        Self {
            spec,
            remote,
            server: catalog.server.clone(),
            catalog: Arc::downgrade(catalog),
            peer,
        }
    }
}

impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        arguments: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let Some(catalog) = self.catalog.upgrade() else {
                return Err(ToolError::Unavailable {
                    tool: self.spec.name.clone(),
                    server: self.server.clone(),
                    reason: "the server's connection was dropped".to_owned(),
                });
            };
            // As a `#[tool]`'s arguments are: `null` for an optional property (strict mode
            // sends it) is left out, and `3.0` for an integer is `3`.
            let mut arguments = arguments;
            crate::tool::schema::normalize_arguments(&self.spec.parameters, &mut arguments);
            call(&catalog, &self.peer, &self.remote, arguments)
                .await
                .map_err(|e| e.into_tool_error(&self.spec.name))
        })
    }
}

/// One `tools/call` request, under the server's request timeout, which the call's progress
/// notifications restart.
pub(super) async fn call(
    catalog: &Catalog,
    peer: &Peer<RoleClient>,
    tool: &str,
    arguments: Value,
) -> Result<Value, McpError> {
    let operation = format!("tools/call {tool}");
    let arguments = match arguments {
        Value::Object(map) => Some(map),
        Value::Null => None,
        other => {
            return Err(McpError::Refused {
                server: catalog.server.clone(),
                operation,
                message: format!("arguments must be a JSON object, not {other}"),
            });
        }
    };
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = arguments;
    if peer.is_transport_closed() {
        return Err(catalog.service_error(&operation, rmcp::service::ServiceError::TransportClosed));
    }
    let result = super::request::call_tool(catalog, peer, params)
        .await
        .map_err(|e| catalog.request_error(&operation, e, peer.is_transport_closed()))?;
    into_value(result).map_err(|message| McpError::ToolFailed {
        server: catalog.server.clone(),
        tool: tool.to_owned(),
        message,
    })
}

/// A result as JSON: its structured content when there is some; otherwise its text (the
/// blocks joined by newlines) when every block is text; otherwise the blocks as JSON, their
/// binary payloads (images, audio, blobs) left out with their size said. A result marked
/// `isError` is its text, as the error; with no text, its structured content as JSON, or
/// that it said nothing.
fn into_value(result: CallToolResult) -> Result<Value, String> {
    // An explicit `null` (a server that writes every field out) is no structured content:
    // the spec types it as an optional object.
    let structured = result.structured_content.filter(|value| !value.is_null());
    if result.is_error == Some(true) {
        let text = blocks_value(result.content);
        return Err(match (text, structured) {
            (Value::String(text), _) if !text.trim().is_empty() => text,
            (Value::String(_), Some(structured)) => structured.to_string(),
            (Value::String(_), None) => "(the tool said nothing more)".to_owned(),
            (other, _) => other.to_string(),
        });
    }
    if let Some(structured) = structured {
        return Ok(structured);
    }
    Ok(blocks_value(result.content))
}

fn blocks_value(blocks: Vec<ContentBlock>) -> Value {
    if blocks.iter().all(|b| b.as_text().is_some()) {
        let texts: Vec<&str> = blocks
            .iter()
            .filter_map(|b| b.as_text().map(|t| t.text.as_str()))
            .collect();
        return Value::String(texts.join("\n"));
    }
    Value::Array(
        blocks
            .into_iter()
            .map(|block| match block {
                ContentBlock::Text(text) => Value::String(text.text.clone()),
                other => {
                    let mut value = serde_json::to_value(&other).unwrap_or(Value::Null);
                    without_binary(&mut value);
                    value
                }
            })
            .collect(),
    )
}

/// `block` with its binary payload (an image's or audio's `data`, a resource's `blob`, base64)
/// taken out and its size said instead: the model cannot read it as text, and a screenshot
/// would fill its context (and every checkpoint of the transcript) with base64.
fn without_binary(block: &mut Value) {
    let Value::Object(fields) = block else {
        return;
    };
    for key in ["data", "blob"] {
        if let Some(Value::String(base64)) = fields.get(key) {
            let bytes = base64.trim_end_matches('=').len() * 3 / 4;
            fields.remove(key);
            fields.insert("bytes".to_owned(), Value::from(bytes));
            fields.insert(
                "omitted".to_owned(),
                Value::String(format!("{key}: binary content is not passed to the model")),
            );
        }
    }
    if let Some(resource) = fields.get_mut("resource") {
        without_binary(resource);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn result(value: Value) -> CallToolResult {
        serde_json::from_value(value).unwrap()
    }

    /// `"structuredContent": null` is no structured content: the text is the answer, and
    /// an error with no text says so, rather than `null`.
    #[test]
    fn a_null_structured_content_is_none() {
        let r = result(json!({ "content": [{ "type": "text", "text": "42 files" }],
                               "structuredContent": null }));
        assert_eq!(into_value(r).unwrap(), json!("42 files"));
        let e = result(json!({ "content": [], "isError": true, "structuredContent": null }));
        assert_eq!(into_value(e).unwrap_err(), "(the tool said nothing more)");
    }

    /// An image's base64 and a resource's blob do not reach the model: their size does,
    /// with the rest of the block (its type, MIME type, a resource's URI).
    #[test]
    fn binary_payloads_are_left_out_and_their_size_kept() {
        let r = result(json!({ "content": [
            { "type": "text", "text": "the screenshot:" },
            { "type": "image", "data": "aGVsbG8gd29ybGQ=", "mimeType": "image/png" },
            { "type": "resource", "resource": {
                "uri": "file:///a.bin", "mimeType": "application/octet-stream", "blob": "AAEC"
            } }
        ] }));
        let value = into_value(r).unwrap();
        let text = value.to_string();
        assert!(
            !text.contains("aGVsbG8") && !text.contains("AAEC"),
            "{text}"
        );
        assert_eq!(value[0], "the screenshot:");
        assert_eq!(value[1]["mimeType"], "image/png");
        assert_eq!(value[1]["bytes"], 11);
        assert_eq!(value[2]["resource"]["uri"], "file:///a.bin");
        assert_eq!(value[2]["resource"]["bytes"], 3);
    }

    #[test]
    fn text_blocks_become_one_string() {
        let r = result(json!({ "content": [
            { "type": "text", "text": "one" }, { "type": "text", "text": "two" }
        ] }));
        assert_eq!(into_value(r).unwrap(), json!("one\ntwo"));
    }

    #[test]
    fn structured_content_wins() {
        let r = result(json!({
            "content": [{ "type": "text", "text": "{\"sum\":3}" }],
            "structuredContent": { "sum": 3 }
        }));
        assert_eq!(into_value(r).unwrap(), json!({ "sum": 3 }));
    }

    #[test]
    fn an_error_result_is_its_text() {
        let r = result(json!({
            "content": [{ "type": "text", "text": "no such file" }], "isError": true
        }));
        assert_eq!(into_value(r).unwrap_err(), "no such file");
    }

    /// An error result with no text says what it has: its structured content, or that it
    /// said nothing, rather than an empty message.
    #[test]
    fn an_error_result_without_text_is_not_empty() {
        let r = result(json!({
            "content": [], "isError": true, "structuredContent": { "code": "ENOENT" }
        }));
        assert_eq!(into_value(r).unwrap_err(), r#"{"code":"ENOENT"}"#);
        let r = result(json!({ "content": [], "isError": true }));
        assert_eq!(into_value(r).unwrap_err(), "(the tool said nothing more)");
    }

    #[test]
    fn other_blocks_stay_json() {
        let r = result(json!({ "content": [
            { "type": "text", "text": "a picture:" },
            { "type": "image", "data": "AAAA", "mimeType": "image/png" }
        ] }));
        let value = into_value(r).unwrap();
        assert_eq!(value[0], json!("a picture:"));
        assert_eq!(value[1]["type"], json!("image"));
        assert_eq!(value[1]["mimeType"], json!("image/png"));
    }
}
