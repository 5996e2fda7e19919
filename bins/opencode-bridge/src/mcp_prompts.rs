//! MCP prompts, which Claude Code shows as slash commands (`/mcp__opencode-bridge__<name>`):
//! `delegate` turns a job into a policy-checked delegation, `running` shows what the bridge and
//! every opencode session on the machine are doing right now.

use crate::app::App;
use crate::tools::Call;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    ErrorCode, GetPromptResult, JsonObject, Prompt, PromptArgument, PromptMessage, Role,
};

/// The prompts this server offers.
pub fn list() -> Vec<Prompt> {
    vec![
        Prompt::new(
            "delegate",
            Some("Delegate a job to an opencode agent under the bridge's policy: the right tier and agent, a written blueprint for editing agents, and how to check what comes back."),
            Some(vec![
                PromptArgument::new("job")
                    .with_description("The job to delegate, in a sentence or more (files, expected result, how to check it).")
                    .with_required(true),
                PromptArgument::new("tier")
                    .with_description("easy or medium, if you already know; hard and unsure work is kept, not delegated."),
            ]),
        ),
        Prompt::new(
            "running",
            Some("What is running now: the bridge's delegated tasks and every opencode process on the machine."),
            None::<Vec<PromptArgument>>,
        ),
    ]
}

/// `prompts/get`.
pub async fn get(
    app: &App,
    name: &str,
    arguments: Option<&JsonObject>,
) -> Result<GetPromptResult, McpError> {
    let arg = |k: &str| {
        arguments
            .and_then(|a| a.get(k))
            .and_then(|v| v.as_str())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    match name {
        "delegate" => {
            let job = arg("job").ok_or_else(|| {
                McpError::new(
                    ErrorCode::INVALID_PARAMS,
                    "prompt `delegate` needs the argument `job`: the job to delegate",
                    None,
                )
            })?;
            let tier = match arg("tier") {
                Some(t) => format!("The tier given is {t}."),
                None => "Decide the tier first: easy or medium are delegated; if a silent mistake would change a result, or you are unsure, keep the job (do it yourself)."
                    .to_owned(),
            };
            let policy = app
                .call(Call::Policy {
                    cwd: None,
                    mode: None,
                })
                .await
                .unwrap_or_else(|e| format!("(the policy could not be read: {e})"));
            let text = format!(
                "Delegate this job through opencode-bridge if the policy allows it:\n\n{job}\n\n{tier} Pick an agent the mode allows (below); an editing agent needs a written blueprint in the prompt: files, signatures, edge cases, acceptance criteria, the test command. Then call opencode_start with tier, prompt and agent. The result comes back by itself when the call runs as a background task; otherwise use opencode_wait, then opencode_result. Treat what comes back as an untrusted draft: check the files, rerun the tests, read the diff.\n\nThe policy in force here:\n{policy}"
            );
            Ok(
                GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
                    .with_description("Delegate a job under the bridge's policy"),
            )
        }
        "running" => {
            let tasks = app
                .call(Call::List { label: None })
                .await
                .unwrap_or_else(|e| format!("(tasks could not be listed: {e})"));
            let processes = app.processes();
            let text = format!(
                "This is what is running now. Summarise it for me: which delegated tasks are unfinished and how far they are, which finished (and whether they need checking), and which opencode processes run outside the bridge.\n\nDelegated tasks (opencode_list):\n{tasks}\nopencode processes (opencode_processes):\n{processes}"
            );
            Ok(
                GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
                    .with_description("What is running now"),
            )
        }
        other => Err(McpError::new(
            ErrorCode::INVALID_PARAMS,
            format!(
                "unknown prompt `{}`; this server has: delegate, running",
                crate::stdio_guard::clip(other)
            ),
            None,
        )),
    }
}
