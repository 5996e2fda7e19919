//! The MCP side: rmcp's `ServerHandler` over stdio. Only this module knows MCP.
//!
//! rmcp answers `server/discover` (2026-07-28) and `initialize` (2025-11-25 and older) from
//! [`Bridge::get_info`]; this module supplies the identity, the instructions and the tools, and
//! turns every tool call into an [`App`] call that is abandoned when the client sends
//! `notifications/cancelled` for it. When a call carries a `progressToken`, what the call
//! reports ([`Progress`]) goes out as `notifications/progress` with a progress value that
//! grows by one each time, and nothing goes out once the call has ended.

use crate::app::{App, Progress};
use crate::tools::{self, ToolDef};
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    ErrorCode, GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, MetaObject, PaginatedRequestParams, ProgressNotificationParam,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use std::sync::{Arc, OnceLock};

/// The server name clients see in `serverInfo`.
pub const SERVER_NAME: &str = "opencode-bridge";

/// The MCP handler: a thin layer over [`App`].
#[derive(Debug, Clone)]
pub struct Bridge {
    app: Arc<App>,
    /// The tools without output schemas: what a client that gets no structured results (Claude
    /// Code, by default) lists, built at start.
    plain_tools: Arc<Vec<Tool>>,
    /// The same with their output schemas, built the first time a client that gets structured
    /// results lists them: as JSON values the schemas take a quarter of a cold start's heap,
    /// which Claude Code never needs.
    tools: Arc<OnceLock<Arc<Vec<Tool>>>>,
    instructions: Arc<String>,
    /// The last `resources/list` answer (see [`crate::mcp_resources::LIST_DEADLINE`]).
    listing: Arc<crate::mcp_resources::Listing>,
}

/// The tools' output schemas as [`crate::structured::output_schema`] derives them, written out
/// (a JSON object by tool name). Deriving them with schemars took about half of a cold start's
/// instructions and pulled its code into memory; parsing the text is a small part of that. The
/// unit test `written_output_schemas_are_what_schemars_derives` keeps the file current and
/// says how to rewrite it.
const OUTPUT_SCHEMAS: &str = include_str!("output_schemas.json");

/// The output schemas by tool name: [`OUTPUT_SCHEMAS`], or derived when it cannot be read
/// (which the unit test rules out).
fn output_schemas() -> serde_json::Map<String, serde_json::Value> {
    serde_json::from_str(OUTPUT_SCHEMAS).unwrap_or_else(|e| {
        tracing::warn!("output_schemas.json: {e}; deriving the schemas");
        derived_output_schemas()
    })
}

fn derived_output_schemas() -> serde_json::Map<String, serde_json::Value> {
    tools::definitions()
        .iter()
        .filter_map(|d| {
            let schema = crate::structured::output_schema(d.name)?;
            Some((
                d.name.to_owned(),
                serde_json::Value::Object((*schema).clone()),
            ))
        })
        .collect()
}

impl Bridge {
    pub fn new(app: Arc<App>) -> Bridge {
        let plain_tools = tools::definitions().into_iter().map(to_tool).collect();
        let instructions = app.instructions();
        Bridge {
            app,
            tools: Arc::default(),
            plain_tools: Arc::new(plain_tools),
            instructions: Arc::new(instructions),
            listing: Arc::default(),
        }
    }

    /// The tools with their output schemas, built on first use.
    fn structured_tools(&self) -> Arc<Vec<Tool>> {
        self.tools
            .get_or_init(|| Arc::new(with_output_schemas(&self.plain_tools)))
            .clone()
    }

    /// Whether the client of this request gets output schemas and structured results
    /// (`OPENCODE_BRIDGE_STRUCTURED`; by default every client but Claude Code, which would show
    /// the model the JSON instead of the text).
    fn structured_for(&self, context: &RequestContext<RoleServer>) -> bool {
        let client = context.client_info();
        self.app
            .settings
            .structured
            .for_client(client.as_ref().map(|c| c.name.as_str()))
    }
}

/// Tools whose schemas Claude Code keeps in the prompt even with tool search on
/// (`anthropic/alwaysLoad`): what every delegation needs — start it, wait for it (the cheapest
/// way without MCP tasks: one call instead of polling status), read its result, and the rules
/// before delegating. The rest (status, apply, cancel, list, sessions, session output, rename,
/// processes, usage) are for inspection and load through tool search on their hint.
const ALWAYS_LOADED: [&str; 4] = [
    "opencode_start",
    "opencode_wait",
    "opencode_result",
    "opencode_policy",
];

/// Tools whose replies can be as long as the bridge's own cap, above Claude Code's default
/// result cap (`anthropic/maxResultSizeChars`).
const LONG_REPLIES: [&str; 3] = [
    "opencode_result",
    "opencode_session_output",
    "opencode_sessions",
];

/// What tool search matches a deferred tool on (`anthropic/searchHint`).
fn search_hint(name: &str) -> &'static str {
    match name {
        "opencode_status" => {
            "opencode delegated task status progress running tokens session id failure kind"
        }
        "opencode_cancel" => "stop cancel kill delegated opencode task run process group",
        "opencode_apply" => {
            "apply discard isolated worktree change patch delegated opencode task checkout"
        }
        "opencode_list" => "list delegated opencode tasks history label finished running",
        "opencode_sessions" => {
            "opencode sessions list every session state agent directory title search tokens"
        }
        "opencode_session_output" => {
            "opencode session transcript output messages what a session did"
        }
        "opencode_session_rename" => "rename opencode session title LANE/agent convention",
        "opencode_processes" => "running opencode processes pid tui serve run claude -p",
        "opencode_usage" => {
            "usage cost tokens spend savings claude-equivalent budget ledger per day agent model"
        }
        _ => "delegate opencode agent task",
    }
}

/// The tools with their output schemas (those [`crate::structured`] has).
fn with_output_schemas(plain: &[Tool]) -> Vec<Tool> {
    let mut schemas = output_schemas();
    plain
        .iter()
        .map(|tool| match schemas.remove(tool.name.as_ref()) {
            Some(serde_json::Value::Object(map)) => {
                tool.clone().with_raw_output_schema(Arc::new(map))
            }
            _ => tool.clone(),
        })
        .collect()
}

fn to_tool(def: ToolDef) -> Tool {
    let schema = match def.schema {
        serde_json::Value::Object(map) => map,
        _ => unreachable!("tool schemas are objects"),
    };
    // Truthful hints: a start runs an agent that may overwrite files (editing agents) and that
    // reaches model providers and the web; cancel and rename do the same thing when repeated.
    let starts_agents = def.name == "opencode_start";
    let mut annotations = ToolAnnotations::with_title(def.title)
        .read_only(def.read_only)
        .open_world(starts_agents);
    if !def.read_only {
        annotations = annotations
            .destructive(def.destructive || starts_agents)
            .idempotent(matches!(
                def.name,
                "opencode_cancel" | "opencode_session_rename"
            ));
    }
    let mut meta = MetaObject::default();
    if ALWAYS_LOADED.contains(&def.name) {
        meta.0.insert("anthropic/alwaysLoad".into(), true.into());
    } else {
        meta.0
            .insert("anthropic/searchHint".into(), search_hint(def.name).into());
    }
    if LONG_REPLIES.contains(&def.name) {
        meta.0.insert(
            "anthropic/maxResultSizeChars".into(),
            tools::REPLY_CAP_CHARS.into(),
        );
    }
    Tool::new(def.name, def.description, Arc::new(schema))
        .with_title(def.title)
        .with_annotations(annotations)
        .with_meta(meta)
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        let mut implementation = Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION"));
        implementation.title = Some("opencode bridge".into());
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .enable_resources()
                .enable_tasks()
                .build(),
        )
        .with_server_info(implementation)
        .with_instructions(self.instructions.as_str())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        no_cursor("tools/list", request)?;
        let tools = if self.structured_for(&context) {
            self.structured_tools()
        } else {
            self.plain_tools.clone()
        };
        Ok(ListToolsResult::with_all_items(tools.as_ref().clone()))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(ListPromptsResult::with_all_items(crate::mcp_prompts::list()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        crate::mcp_prompts::get(&self.app, &request.name, request.arguments.as_ref())
            .await
            .map(GetPromptResponse::Complete)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        no_cursor("resources/list", request)?;
        crate::mcp_resources::list(&self.app, &self.listing).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        no_cursor("resources/templates/list", request)?;
        Ok(crate::mcp_resources::templates())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let contents = crate::mcp_resources::read(&self.app, &request.uri).await?;
        Ok(ReadResourceResponse::Complete(ReadResourceResult::new(
            vec![contents],
        )))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.get_task_impl(&request.task_id).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        crate::mcp_tasks::cancel(&self.app, &request.task_id).await
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.structured_tools()
            .iter()
            .find(|t| t.name == name)
            .cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.as_ref();
        if !tools::is_tool(name) {
            return Err(McpError::new(
                ErrorCode::INVALID_PARAMS,
                format!(
                    "unknown tool `{}`; this server has: {}",
                    crate::stdio_guard::clip(name),
                    tools::TOOL_NAMES.join(", ")
                ),
                None,
            ));
        }
        let call = match tools::parse_call(name, request.arguments.as_ref()) {
            Ok(call) => call,
            Err(refused) => return Ok(error_result(refused.mcp_text())),
        };
        tracing::debug!(tool = name, "tool call");
        // A client that declared the tasks extension gets a task for a start: the run goes on in
        // the background and the client polls tasks/get (Claude Code hands the result to the
        // model when it ends). A refusal stays a plain tool error.
        let tasks_declared = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        if tasks_declared && let tools::Call::Start(args) = call {
            return Ok(match self.app.start_task(args, &Progress::none()).await {
                Ok((id, text)) => crate::mcp_tasks::created(&self.app, id, &text).into(),
                Err(message) => error_result(message),
            });
        }
        let token = request
            .meta
            .as_ref()
            .and_then(|m| m.get_progress_token())
            .or_else(|| context.meta.get_progress_token());
        tracing::debug!(tool = name, token = ?token, "progress token");
        let scan = matches!(
            call,
            tools::Call::Sessions(_) | tools::Call::SessionOutput(_)
        );
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let progress = if token.is_some() {
            Progress::to(tx)
        } else {
            drop(tx);
            Progress::none()
        };
        // Session scans report that they are still at it every 2 s after the first second.
        let scan_started = tokio::time::Instant::now();
        let mut scan_tick = tokio::time::interval_at(
            scan_started + std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(2),
        );
        let mut step: u32 = 0;
        // Dropping this future (on cancellation) abandons the work; blocking scans stop at
        // their deadline and their answer is discarded.
        let work = self.app.reply(call, progress);
        tokio::pin!(work);
        let outcome = loop {
            tokio::select! {
                outcome = &mut work => break outcome,
                Some(message) = rx.recv(), if token.is_some() => {
                    step += 1;
                    notify(&context, token.clone(), step, message).await;
                }
                _ = scan_tick.tick(), if scan && token.is_some() => {
                    step += 1;
                    let secs = scan_started.elapsed().as_secs();
                    notify(&context, token.clone(), step, format!("reading sessions ({secs}s)")).await;
                }
                _ = context.ct.cancelled() => {
                    tracing::info!(tool = name, "call cancelled by the client");
                    // rmcp drops the response of a cancelled request; this value is never sent.
                    return Err(McpError::new(ErrorCode::INTERNAL_ERROR, "cancelled", None));
                }
            }
        };
        // What the call reported just before it ended goes out before its response; steps
        // reported after this point are never sent.
        if token.is_some() {
            while let Ok(message) = rx.try_recv() {
                step += 1;
                notify(&context, token.clone(), step, message).await;
            }
        }
        drop(rx);
        let structured = self.structured_for(&context);
        Ok(match outcome {
            Ok(mut reply) => {
                if !structured {
                    reply.structured = None;
                }
                success_result(reply)
            }
            Err(message) => error_result(message),
        })
    }
}

/// Lists have one page: no cursor was ever handed out, so any cursor is invalid.
fn no_cursor(method: &str, request: Option<PaginatedRequestParams>) -> Result<(), McpError> {
    match request.and_then(|r| r.cursor) {
        Some(cursor) => Err(McpError::new(
            ErrorCode::INVALID_PARAMS,
            format!(
                "unknown cursor `{}`: {method} has a single page; call it without a cursor",
                crate::stdio_guard::clip(&cursor)
            ),
            None,
        )),
        None => Ok(()),
    }
}

/// Sends one progress notification (best effort: a closed connection is not an error here).
async fn notify(
    context: &RequestContext<RoleServer>,
    token: Option<rmcp::model::ProgressToken>,
    step: u32,
    message: String,
) {
    let Some(token) = token else {
        return;
    };
    let param = ProgressNotificationParam::new(token, f64::from(step)).with_message(message);
    if let Err(e) = context.peer.notify_progress(param).await {
        tracing::debug!("progress notification not sent: {e}");
    }
}

impl Bridge {
    async fn get_task_impl(&self, task_id: &str) -> Result<GetTaskResult, McpError> {
        crate::mcp_tasks::get(&self.app, task_id)
    }
}

/// A successful reply: its text first (what the model reads), then a `resource_link` to the
/// session it is about, and the structured result for tools that declare an `outputSchema`.
fn success_result(reply: crate::app::Reply) -> CallToolResponse {
    let mut content = vec![ContentBlock::text(reply.text)];
    if let Some(uri) = &reply.session {
        content.push(crate::mcp_resources::link(uri));
    }
    let mut result = CallToolResult::success(content);
    result.structured_content = reply.structured;
    result.into()
}

/// A failed call: one text, no structured content (whatever the tool's `outputSchema`).
fn error_result(message: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(message)]).into()
}

/// Serves MCP on stdin/stdout until stdin closes or SIGTERM/SIGINT arrives, then stops every
/// task this process started. Stdin and stdout go through [`crate::stdio_guard`], which
/// answers lines rmcp would drop or answer badly.
pub async fn serve(app: Arc<App>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let bridge = Bridge::new(app.clone());
    app.prewarm_roster();
    {
        // Tasks an earlier bridge left running on a server (remote, or the warm local one) are
        // followed again.
        let sup = app.supervisor().clone();
        tokio::spawn(async move {
            let adopted = sup.follow_left_tasks().await;
            if !adopted.is_empty() {
                tracing::info!(
                    ?adopted,
                    "following tasks an earlier bridge left on a server"
                );
            }
        });
    }
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let (transport, writer) = crate::stdio_guard::start();
    let reason = tokio::select! {
        running = bridge.serve(transport) => match running {
            Ok(running) => {
                let ct = running.cancellation_token();
                tokio::select! {
                    quit = running.waiting() => format!("{quit:?}"),
                    _ = sigterm.recv() => { ct.cancel(); "SIGTERM".to_string() }
                    _ = sigint.recv() => { ct.cancel(); "SIGINT".to_string() }
                }
            }
            Err(e) => format!("the client closed before the handshake ended ({e})"),
        },
        _ = sigterm.recv() => "SIGTERM".to_string(),
        _ = sigint.recv() => "SIGINT".to_string(),
    };
    tracing::info!(%reason, on_exit = app.supervisor().config().on_exit.as_str(), "stopping");
    app.shutdown().await;
    // rmcp's transport is gone by now; let the writer put out what rmcp wrote last.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), writer).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_output_schemas_are_what_schemars_derives() {
        let derived = serde_json::to_string_pretty(&derived_output_schemas()).unwrap() + "\n";
        if std::env::var_os("OPENCODE_BRIDGE_WRITE_SCHEMAS").is_some() {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/output_schemas.json");
            std::fs::write(path, &derived).unwrap();
            return;
        }
        assert!(
            OUTPUT_SCHEMAS == derived,
            "src/output_schemas.json differs from the schemas the types in structured.rs derive: \
             rewrite it with `OPENCODE_BRIDGE_WRITE_SCHEMAS=1 cargo nextest run -p opencode-bridge \
             -E 'test(written_output_schemas)'`"
        );
        // Every tool with structured results has its schema in the file.
        let written = output_schemas();
        for def in tools::definitions() {
            assert_eq!(
                written.contains_key(def.name),
                crate::structured::output_schema(def.name).is_some(),
                "{}",
                def.name
            );
        }
    }
}
