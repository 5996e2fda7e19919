//! The MCP tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) over the bridge's own
//! tasks: an `opencode_start` from a client that declares the extension is answered at once with
//! a task handle whose id is the bridge's task id; `tasks/get` reads the supervisor (and so the
//! durable registry: tasks answer across a bridge restart), and `tasks/cancel` is
//! `opencode_cancel`. Claude Code then runs the call in the background and hands the final result
//! to the model in a later turn, without the model polling.

use crate::app::App;
use bridge_render as render;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResult, ContentBlock, CreateTaskResult, DetailedTask, ErrorCode, GetTaskResult,
    MetaObject, Task, TaskPayload, TaskStatus,
};
use run_supervisor::utc::format as fmt_utc;
use run_supervisor::{TaskId, TaskSnapshot, TaskState};
use serde_json::json;
use std::time::{Duration, SystemTime};

/// How often the client should ask: Claude Code only sees completion at its next poll, so this is
/// the latency of a finished run reaching the model; a `tasks/get` costs well under a millisecond.
pub const POLL_INTERVAL_MS: u64 = 1000;

/// How long a task stays answerable: beyond the longest run (the per-task timeout is at most the
/// configured one; tasks stay in the registry for `OPENCODE_BRIDGE_PRUNE_DAYS`).
pub fn ttl_ms(app: &App) -> u64 {
    let longest = app.supervisor().config().default_timeout;
    u64::try_from(
        longest
            .saturating_add(Duration::from_secs(24 * 3600))
            .as_millis(),
    )
    .unwrap_or(u64::MAX)
}

/// The task handle for a started task.
pub fn created(app: &App, id: TaskId, started_text: &str) -> CreateTaskResult {
    let snap = app.supervisor().status(id);
    let mut task = base_task(app, id, snap.as_ref());
    task.status = TaskStatus::Working;
    let note = format!(
        "opencode task {id} runs in the background; its result is delivered to you when it ends, with no need to call opencode_status, opencode_wait or opencode_result. {}",
        started_text.lines().next().unwrap_or("")
    );
    let mut meta = MetaObject::default();
    meta.0.insert(
        "com.anthropic/agent-task".into(),
        json!({"modelImmediateResponse": note}),
    );
    CreateTaskResult::new(task).with_meta(meta)
}

/// `tasks/get`.
pub fn get(app: &App, task_id: &str) -> Result<GetTaskResult, McpError> {
    let id = parse(task_id)?;
    let snap = app
        .supervisor()
        .status(id)
        .ok_or_else(|| unknown(task_id))?;
    let task = base_task(app, id, Some(&snap));
    let payload = match snap.state {
        TaskState::Cancelled => TaskPayload::Cancelled,
        s if s.is_finished() => {
            let text = match app.supervisor().result(id, None, None) {
                Some(out) => {
                    app.supervisor().mark_read(id);
                    render::tasks::result(&out)
                        + &app.isolated_change(id, &snap, None, None).0
                        + &app.usage_line(&snap)
                }
                None => render::tasks::status(&snap),
            };
            let failed = snap.state != TaskState::Succeeded;
            // The text first, then the session it ran in (as opencode_result links it).
            let mut content = vec![ContentBlock::text(text)];
            if let Some(session) = snap.session_id.as_ref().or(snap.continues.as_ref()) {
                let uri = crate::session_uri::task_uri(session, &snap.engine);
                content.push(crate::mcp_resources::link(&uri));
            }
            let result = if failed {
                CallToolResult::error(content)
            } else {
                CallToolResult::success(content)
            };
            let result = match serde_json::to_value(result) {
                Ok(serde_json::Value::Object(map)) => map,
                _ => return Err(McpError::internal_error("cannot encode the result", None)),
            };
            TaskPayload::Completed { result }
        }
        _ => TaskPayload::Working,
    };
    Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
}

/// `tasks/cancel`: `opencode_cancel` (the whole process group; refused for another live
/// bridge's task, which that bridge must cancel).
pub async fn cancel(app: &App, task_id: &str) -> Result<(), McpError> {
    let id = parse(task_id)?;
    if app.supervisor().status(id).is_none() {
        return Err(unknown(task_id));
    }
    let outcome = app.supervisor().cancel(id).await;
    tracing::info!(task = %id, ?outcome, "tasks/cancel");
    Ok(())
}

fn base_task(app: &App, id: TaskId, snap: Option<&TaskSnapshot>) -> Task {
    let created = snap.map_or_else(SystemTime::now, |s| s.started_at);
    let updated = snap
        .map(|s| {
            s.started_at
                + s.elapsed
                    .saturating_sub(s.last_event_age.unwrap_or_default())
        })
        .unwrap_or(created);
    let mut task = Task::new(
        id.to_string(),
        TaskStatus::Working,
        fmt_utc(created),
        fmt_utc(updated),
    )
    .with_ttl_ms(ttl_ms(app))
    .with_poll_interval_ms(POLL_INTERVAL_MS);
    if let Some(s) = snap {
        task = task.with_status_message(render::tasks::status_line(s));
    }
    task
}

fn parse(task_id: &str) -> Result<TaskId, McpError> {
    crate::app::parse_task_id(task_id).map_err(|_| unknown(task_id))
}

fn unknown(task_id: &str) -> McpError {
    McpError::new(
        ErrorCode::INVALID_PARAMS,
        format!(
            "unknown task `{}`: task ids are the numbers opencode_start gave (opencode_list shows them)",
            crate::stdio_guard::clip(task_id)
        ),
        None,
    )
}
