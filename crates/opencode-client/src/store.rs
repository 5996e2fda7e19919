//! The store backend: opencode's SQLite store (`opencode.db`), read-only.
//!
//! - Opened with `SQLITE_OPEN_READ_ONLY` plus `PRAGMA query_only`, a busy timeout, and one short
//!   read transaction per query batch, so it is safe while opencode writes (WAL) and never holds
//!   a snapshot long enough to block opencode's checkpoints.
//! - Reads only the tables `session`, `message` and `part` (plus `migration`, to learn the schema
//!   version, and `PRAGMA table_info` of those tables). Never `account`, `credential`,
//!   `control_account` or anything else.
//! - Listing is newest first (`session.time_updated DESC, id DESC`), in keyset-paginated batches;
//!   each batch is one query that also brings, per session, its last message id and its last
//!   assistant message (found through the `message(session_id, time_created, id)` index).
//!   Parts are read only where the state rules need them.
//! - `rename` is refused with [`ClientError::Unsupported`]: the store is never written; the
//!   caller routes renames through `opencode serve`.
//!
//! See `docs/API-NOTES.md` for the queries and rules.

use crate::decode::{decode_message_str, decode_part_str, model_of_json};
use crate::error::ClientError;
use crate::filter;
use crate::model::{
    Children, Message, Part, Session, SessionFilter, SessionList, SessionTranscript, Tokens,
};
use crate::paths;
use crate::source::{ScanContext, SessionSource};
use crate::state::{derive_state, needs_parts};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params_from_iter, types::Value as Sql};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a read waits for a writer's lock before giving up with `StoreLocked`.
pub const BUSY_TIMEOUT: Duration = Duration::from_millis(3000);

/// Session columns the backend cannot do without.
const REQUIRED_SESSION: &[&str] = &[
    "id",
    "parent_id",
    "directory",
    "title",
    "time_created",
    "time_updated",
];
const REQUIRED_MESSAGE: &[&str] = &["id", "session_id", "time_created", "time_updated", "data"];
const REQUIRED_PART: &[&str] = &[
    "id",
    "message_id",
    "session_id",
    "time_created",
    "time_updated",
    "data",
];
/// Session columns read when present (older or newer schemas may lack some).
const OPTIONAL_SESSION: &[(&str, &str)] = &[
    ("project_id", "''"),
    ("version", "NULL"),
    ("agent", "NULL"),
    ("model", "NULL"),
    ("cost", "0"),
    ("tokens_input", "0"),
    ("tokens_output", "0"),
    ("tokens_reasoning", "0"),
    ("tokens_cache_read", "0"),
    ("tokens_cache_write", "0"),
];

/// The read-only SQLite backend.
#[derive(Debug)]
pub struct StoreSource {
    path: PathBuf,
    /// The `SELECT` list for session rows (adapted to the columns present).
    session_cols: String,
    has_agent_col: bool,
    migration: Option<String>,
    /// opencode 2's `session_message` table is there: its sessions keep their messages in it
    /// (`type` and the message's JSON in `data`), not in `message` and `part`.
    v2_messages: bool,
    conn: Mutex<Option<Connection>>,
}

/// One session row plus what the listing query brings along.
struct Row {
    id: String,
    parent_id: Option<String>,
    directory: String,
    title: String,
    created_ms: i64,
    updated_ms: i64,
    project_id: String,
    version: Option<String>,
    agent: Option<String>,
    model: Option<String>,
    cost: f64,
    tokens: Tokens,
    last_msg_id: Option<String>,
    last_msg_updated: Option<i64>,
    last_asst_id: Option<String>,
    last_asst_updated: Option<i64>,
    last_asst_data: Option<String>,
}

impl StoreSource {
    /// Opens the store at `path` read-only and checks its schema.
    pub fn open(path: impl Into<PathBuf>) -> Result<StoreSource, ClientError> {
        let path = path.into();
        if !path.is_file() {
            return Err(ClientError::StoreMissing {
                path: path.display().to_string(),
            });
        }
        let conn = open_conn(&path)?;
        let (session_cols, has_agent_col, migration) = check_schema(&conn, &path)?;
        let v2_messages = table_columns(&conn, "session_message").is_ok_and(|c| {
            ["session_id", "type", "seq", "data"]
                .iter()
                .all(|k| c.contains(*k))
        });
        Ok(StoreSource {
            path,
            session_cols,
            has_agent_col,
            migration,
            v2_messages,
            conn: Mutex::new(Some(conn)),
        })
    }

    /// Opens the store opencode itself would use (see [`paths`]).
    pub fn open_default() -> Result<StoreSource, ClientError> {
        let resolved = paths::resolve_from_env()?;
        if !resolved.path.is_file() && !resolved.channel_candidates.is_empty() {
            let names: Vec<String> = resolved
                .channel_candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            return Err(ClientError::StoreMissing {
                path: format!(
                    "{} (several channel stores exist: {}; pick one with OPENCODE_DB)",
                    resolved.path.display(),
                    names.join(", ")
                ),
            });
        }
        StoreSource::open(resolved.path)
    }

    /// The file this backend reads.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The newest applied opencode migration (`migration.id`), e.g.
    /// `20260622202450_simplify_session_input` for 1.18.33; `None` when the table is absent.
    pub fn schema_migration(&self) -> Option<&str> {
        self.migration.as_deref()
    }

    fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let mut guard: MutexGuard<'_, Option<Connection>> =
            self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            *guard = Some(open_conn(&self.path)?);
        }
        let conn = guard.as_mut().expect("connection just opened");
        let result = f(conn);
        if result.is_err() {
            // Start from a fresh connection next time (the file may have been replaced).
            *guard = None;
        }
        result
    }

    fn err(&self, e: rusqlite::Error) -> ClientError {
        map_err(&self.path, e)
    }

    fn select_sql(&self, where_sql: &str, limit_param: bool) -> String {
        let limit = if limit_param { "LIMIT ?" } else { "" };
        format!(
            "WITH cand AS (SELECT id, time_updated FROM session WHERE {where_sql} \
               ORDER BY time_updated DESC, id DESC {limit}) \
             SELECT {cols}, \
               lm.id, lm.time_updated, la.id, la.time_updated, la.data \
             FROM cand JOIN session s ON s.id = cand.id \
             LEFT JOIN message lm ON lm.id = (SELECT m.id FROM message m WHERE m.session_id = s.id \
               ORDER BY m.time_created DESC, m.id DESC LIMIT 1) \
             LEFT JOIN message la ON la.id = (SELECT m.id FROM message m WHERE m.session_id = s.id \
               AND CASE WHEN json_valid(m.data) THEN json_extract(m.data, '$.role') END = 'assistant' \
               ORDER BY m.time_created DESC, m.id DESC LIMIT 1) \
             ORDER BY cand.time_updated DESC, cand.id DESC",
            cols = self.session_cols,
        )
    }

    /// The cheap filters as SQL over `session` (no alias), with their parameters.
    fn sql_filters(&self, f: &SessionFilter, now_ms: i64) -> (Vec<String>, Vec<Sql>) {
        let mut clauses = Vec::new();
        let mut params = Vec::new();
        match f.children {
            Children::Include => {}
            Children::Exclude => clauses.push("parent_id IS NULL".to_string()),
            Children::Only => clauses.push("parent_id IS NOT NULL".to_string()),
        }
        if let Some(dir) = &f.directory {
            clauses.push("instr(directory, ?) > 0".into());
            params.push(Sql::Text(dir.clone()));
        }
        if let Some(prefix) = &f.title_prefix {
            clauses.push("substr(title, 1, ?) = ?".into());
            params.push(Sql::Integer(prefix.chars().count() as i64));
            params.push(Sql::Text(prefix.clone()));
        }
        if let Some(since) = filter::since_ms(f, now_ms) {
            clauses.push("time_updated >= ?".into());
            params.push(Sql::Integer(since));
        }
        if let Some(agent) = &f.agent
            && self.has_agent_col
        {
            // The row's agent wins; rows without one are decided after reading messages.
            clauses.push("(agent IS NULL OR lower(agent) = lower(?))".into());
            params.push(Sql::Text(agent.trim().to_string()));
        }
        (clauses, params)
    }

    fn read_rows(
        &self,
        conn: &Connection,
        sql: &str,
        params: &[Sql],
    ) -> Result<Vec<Row>, ClientError> {
        let mut stmt = conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params_from_iter(params.iter()), |r| {
                Ok(Row {
                    id: r.get(0)?,
                    parent_id: r.get(1)?,
                    directory: r.get(2)?,
                    title: r.get(3)?,
                    created_ms: r.get(4)?,
                    updated_ms: r.get(5)?,
                    project_id: r.get::<_, Option<String>>(6)?.unwrap_or_default(),
                    version: r.get(7)?,
                    agent: r.get(8)?,
                    model: r.get(9)?,
                    cost: r.get::<_, Option<f64>>(10)?.unwrap_or(0.0),
                    tokens: Tokens {
                        input: count(r.get::<_, Option<i64>>(11)?),
                        output: count(r.get::<_, Option<i64>>(12)?),
                        reasoning: count(r.get::<_, Option<i64>>(13)?),
                        cache_read: count(r.get::<_, Option<i64>>(14)?),
                        cache_write: count(r.get::<_, Option<i64>>(15)?),
                    },
                    last_msg_id: r.get(16)?,
                    last_msg_updated: r.get(17)?,
                    last_asst_id: r.get(18)?,
                    last_asst_updated: r.get(19)?,
                    last_asst_data: r.get(20)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// Turns a row into a `Session`, reading parts only where the state rules need them.
    fn build(
        &self,
        conn: &Connection,
        row: Row,
        ctx: &ScanContext,
    ) -> Result<Session, ClientError> {
        let mut last_asst = match (&row.last_asst_id, &row.last_asst_data) {
            (Some(id), Some(data)) => Some(decode_message_str(id, data, Vec::new())),
            _ => None,
        };
        if let Some(m) = last_asst.as_mut()
            && needs_parts(m)
        {
            m.parts = self.parts_of(conn, &m.id)?;
        }
        let mut last_is_user = row.last_msg_id.is_some() && row.last_msg_id != row.last_asst_id;
        let mut v2_updated = 0;
        if row.last_msg_id.is_none() && self.v2_messages {
            // An opencode 2 session: its newest conversation message says its state.
            let (newest, _) = self.v2_messages_of(conn, &row.id, Some(1))?;
            if let Some(m) = newest.into_iter().next() {
                v2_updated = m.completed_ms.unwrap_or(m.created_ms);
                last_is_user = m.role == crate::model::Role::User;
                if !last_is_user {
                    last_asst = Some(m);
                }
            }
        }
        let mut activity = row
            .updated_ms
            .max(row.last_msg_updated.unwrap_or(0))
            .max(row.last_asst_updated.unwrap_or(0))
            .max(v2_updated);
        let (mut state, mut error) =
            derive_state(last_asst.as_ref(), last_is_user, activity, &row.id, ctx);
        if state == crate::model::SessionState::Stale
            && let Some(mid) = &row.last_msg_id
        {
            // A long tool call or stream updates its parts, not the message: look at them too.
            let newest_part: Option<i64> = conn
                .prepare_cached("SELECT max(time_updated) FROM part WHERE message_id = ?1")
                .and_then(|mut s| s.query_row([mid], |r| r.get(0)))
                .map_err(|e| self.err(e))?;
            if let Some(t) = newest_part
                && t > activity
            {
                activity = t;
                (state, error) =
                    derive_state(last_asst.as_ref(), last_is_user, activity, &row.id, ctx);
            }
        }
        let agent = row
            .agent
            .filter(|a| !a.is_empty())
            .or_else(|| last_asst.as_ref().and_then(|m| m.agent.clone()));
        let model = row
            .model
            .as_deref()
            .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
            .and_then(|v| model_of_json(&v))
            .or_else(|| last_asst.as_ref().and_then(|m| m.model.clone()));
        Ok(Session {
            id: row.id,
            title: row.title,
            directory: row.directory,
            project_id: row.project_id,
            parent_id: row.parent_id,
            agent,
            model,
            tokens: row.tokens,
            cost: row.cost,
            created_ms: row.created_ms,
            updated_ms: row.updated_ms,
            state,
            error,
            version: row.version,
        })
    }

    /// An opencode 2 session's conversation messages (`session_message`), oldest first: all of
    /// them, or the newest `last`; and how many there are. Empty when the store has no such
    /// table.
    fn v2_messages_of(
        &self,
        conn: &Connection,
        id: &str,
        last: Option<usize>,
    ) -> Result<(Vec<Message>, usize), ClientError> {
        if !self.v2_messages {
            return Ok((Vec::new(), 0));
        }
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, type, data FROM session_message WHERE session_id = ?1 \
                 ORDER BY seq DESC, id DESC",
            )
            .map_err(|e| self.err(e))?;
        let rows: Vec<(String, String, String)> = stmt
            .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(|e| self.err(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.err(e))?;
        let mut messages: Vec<Message> = rows
            .into_iter()
            .filter_map(|(mid, ty, data)| {
                let mut v: serde_json::Value = serde_json::from_str(&data).ok()?;
                let obj = v.as_object_mut()?;
                obj.insert("id".into(), mid.into());
                obj.insert("type".into(), ty.into());
                crate::api::is_conversation_message(&v).then(|| crate::api::message_from_v2(&v))
            })
            .collect();
        let total = messages.len();
        if let Some(n) = last {
            messages.truncate(n);
        }
        messages.reverse();
        Ok((messages, total))
    }

    fn parts_of(&self, conn: &Connection, message_id: &str) -> Result<Vec<Part>, ClientError> {
        let mut stmt = conn
            .prepare_cached("SELECT data FROM part WHERE message_id = ?1 ORDER BY id")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([message_id], |r| r.get::<_, String>(0))
            .map_err(|e| self.err(e))?;
        let mut parts = Vec::new();
        for data in rows {
            parts.push(decode_part_str(&data.map_err(|e| self.err(e))?));
        }
        Ok(parts)
    }

    /// Whether any text part of the session contains `needle` (case-insensitive): its `part`
    /// rows, or an opencode 2 session's `session_message` rows.
    fn text_contains(
        &self,
        conn: &Connection,
        session_id: &str,
        needle: &str,
    ) -> Result<bool, ClientError> {
        if self.part_text_contains(conn, session_id, needle)? {
            return Ok(true);
        }
        let (messages, _) = self.v2_messages_of(conn, session_id, None)?;
        Ok(messages.iter().flat_map(|m| &m.parts).any(
            |p| matches!(p, Part::Text { text, .. } if filter::contains_ignore_case(text, needle)),
        ))
    }

    fn part_text_contains(
        &self,
        conn: &Connection,
        session_id: &str,
        needle: &str,
    ) -> Result<bool, ClientError> {
        if needle.is_ascii() {
            let pattern = format!("%{}%", escape_like(needle));
            let found: Option<i64> = conn
                .prepare_cached(
                    "SELECT 1 FROM part WHERE session_id = ?1 \
                     AND CASE WHEN json_valid(data) THEN json_extract(data, '$.type') = 'text' \
                       AND json_extract(data, '$.text') LIKE ?2 ESCAPE '\\' END LIMIT 1",
                )
                .and_then(|mut s| s.query_row([session_id, &pattern], |r| r.get(0)).optional())
                .map_err(|e| self.err(e))?;
            return Ok(found.is_some());
        }
        let mut stmt = conn
            .prepare_cached(
                "SELECT CASE WHEN json_valid(data) THEN json_extract(data, '$.text') END \
                 FROM part WHERE session_id = ?1 \
                 AND CASE WHEN json_valid(data) THEN json_extract(data, '$.type') END = 'text'",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([session_id]).map_err(|e| self.err(e))?;
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let text: Option<String> = r.get(0).map_err(|e| self.err(e))?;
            if text.is_some_and(|t| filter::contains_ignore_case(&t, needle)) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn get_in(
        &self,
        conn: &Connection,
        id: &str,
        ctx: &ScanContext,
    ) -> Result<Session, ClientError> {
        let sql = self.select_sql("id = ?", false);
        let mut rows = self.read_rows(conn, &sql, &[Sql::Text(id.to_string())])?;
        match rows.pop() {
            Some(row) => self.build(conn, row, ctx),
            None => Err(ClientError::NotFound { id: id.to_string() }),
        }
    }
}

impl SessionSource for StoreSource {
    fn name(&self) -> &'static str {
        "store"
    }

    fn list(&self, f: &SessionFilter, ctx: &ScanContext) -> Result<SessionList, ClientError> {
        filter::validate(f)?;
        let started = Instant::now();
        let limit = if f.limit == 0 { usize::MAX } else { f.limit };
        // Post-filters (state, agent fallback, search) may drop rows: read bigger batches then.
        let post = f.state.is_some() || f.agent.is_some() || f.search.is_some();
        let batch = if post {
            1024
        } else {
            limit.saturating_add(1).clamp(16, 256)
        };
        let (clauses, params) = self.sql_filters(f, ctx.now_ms);
        let base_where = if clauses.is_empty() {
            "1".to_string()
        } else {
            clauses.join(" AND ")
        };
        let first_sql = self.select_sql(&base_where, true);
        let next_sql = self.select_sql(
            &format!("({base_where}) AND (time_updated, id) < (?, ?)"),
            true,
        );

        let mut sessions = Vec::new();
        let mut scanned = 0usize;
        let mut partial = None;
        let mut cursor: Option<(i64, String)> = None;
        'batches: loop {
            let result = self.with_conn(|conn| {
                let tx = conn.transaction().map_err(|e| self.err(e))?;
                let mut p = params.clone();
                let sql = match &cursor {
                    None => &first_sql,
                    Some((t, id)) => {
                        p.push(Sql::Integer(*t));
                        p.push(Sql::Text(id.clone()));
                        &next_sql
                    }
                };
                p.push(Sql::Integer(batch as i64));
                let rows = self.read_rows(&tx, sql, &p)?;
                let n = rows.len();
                let mut out = Vec::new();
                let mut stopped = false;
                let mut last_key = None;
                for row in rows {
                    if Instant::now() >= ctx.deadline {
                        stopped = true;
                        break;
                    }
                    last_key = Some((row.updated_ms, row.id.clone()));
                    scanned += 1;
                    let s = self.build(&tx, row, ctx)?;
                    if !filter::matches_session(&s, f, ctx.now_ms) {
                        continue;
                    }
                    if let Some(q) = &f.search
                        && !filter::title_matches_search(&s.title, f)
                        && !self.text_contains(&tx, &s.id, q.trim())?
                    {
                        continue;
                    }
                    out.push(s);
                    if sessions.len() + out.len() >= limit {
                        break;
                    }
                }
                tx.finish().map_err(|e| self.err(e))?;
                Ok((out, n, stopped, last_key))
            })?;
            let (found, n, stopped, last_key) = result;
            sessions.extend(found);
            if stopped {
                let total = self.count_sessions(&base_where, &params)?;
                let budget = ctx.deadline.saturating_duration_since(started);
                partial = Some(format!(
                    "stopped after {scanned} of {total} sessions (deadline {} ms)",
                    (budget.as_micros() + 500) / 1000
                ));
                break 'batches;
            }
            if sessions.len() >= limit || n < batch {
                break;
            }
            match last_key {
                Some(k) => cursor = Some(k),
                None => break,
            }
        }
        Ok(SessionList {
            sessions,
            scanned,
            partial,
            backend: "store",
        })
    }

    fn get(&self, id: &str, ctx: &ScanContext) -> Result<Session, ClientError> {
        self.with_conn(|conn| {
            let tx = conn.transaction().map_err(|e| self.err(e))?;
            let s = self.get_in(&tx, id, ctx);
            tx.finish().map_err(|e| self.err(e))?;
            s
        })
    }

    fn transcript(
        &self,
        id: &str,
        last: Option<usize>,
        ctx: &ScanContext,
    ) -> Result<SessionTranscript, ClientError> {
        self.with_conn(|conn| {
            let tx = conn.transaction().map_err(|e| self.err(e))?;
            let session = self.get_in(&tx, id, ctx)?;
            let total: i64 = tx
                .prepare_cached("SELECT count(*) FROM message WHERE session_id = ?1")
                .and_then(|mut s| s.query_row([id], |r| r.get(0)))
                .map_err(|e| self.err(e))?;
            let total = total.max(0) as usize;
            if total == 0 && self.v2_messages {
                // An opencode 2 session keeps its messages in `session_message`.
                let (messages, total_messages) = self.v2_messages_of(&tx, id, last)?;
                tx.finish().map_err(|e| self.err(e))?;
                return Ok(SessionTranscript {
                    session,
                    messages,
                    total_messages,
                });
            }
            let want = last.unwrap_or(total).min(total);
            let mut rows: Vec<(String, String)> = {
                let mut stmt = tx
                    .prepare_cached(
                        "SELECT id, data FROM message WHERE session_id = ?1 \
                         ORDER BY time_created DESC, id DESC LIMIT ?2",
                    )
                    .map_err(|e| self.err(e))?;
                stmt.query_map(rusqlite::params![id, want as i64], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .map_err(|e| self.err(e))?
                .collect::<Result<_, _>>()
                .map_err(|e| self.err(e))?
            };
            rows.reverse();
            let mut parts_by_msg: HashMap<String, Vec<Part>> = HashMap::new();
            if want == total && total > 0 {
                // Whole session: one pass over its parts (part_session_idx).
                let mut stmt = tx
                    .prepare_cached(
                        "SELECT message_id, data FROM part WHERE session_id = ?1 ORDER BY message_id, id",
                    )
                    .map_err(|e| self.err(e))?;
                let it = stmt
                    .query_map([id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                    .map_err(|e| self.err(e))?;
                for row in it {
                    let (mid, data) = row.map_err(|e| self.err(e))?;
                    parts_by_msg
                        .entry(mid)
                        .or_default()
                        .push(decode_part_str(&data));
                }
            } else {
                for (mid, _) in &rows {
                    let parts = self.parts_of(&tx, mid)?;
                    parts_by_msg.insert(mid.clone(), parts);
                }
            }
            let messages: Vec<Message> = rows
                .into_iter()
                .map(|(mid, data)| {
                    let parts = parts_by_msg.remove(&mid).unwrap_or_default();
                    decode_message_str(&mid, &data, parts)
                })
                .collect();
            tx.finish().map_err(|e| self.err(e))?;
            Ok(SessionTranscript {
                session,
                messages,
                total_messages: total,
            })
        })
    }

    fn rename(&self, _id: &str, _title: &str, _ctx: &ScanContext) -> Result<Session, ClientError> {
        Err(ClientError::Unsupported {
            operation: "rename",
            backend: "store",
            hint: "the store is opened read-only; rename through an `opencode serve` instead"
                .into(),
        })
    }
}

impl StoreSource {
    fn count_sessions(&self, where_sql: &str, params: &[Sql]) -> Result<usize, ClientError> {
        self.with_conn(|conn| {
            let n: i64 = conn
                .prepare_cached(&format!("SELECT count(*) FROM session WHERE {where_sql}"))
                .and_then(|mut s| s.query_row(params_from_iter(params.iter()), |r| r.get(0)))
                .map_err(|e| self.err(e))?;
            Ok(n.max(0) as usize)
        })
    }
}

fn count(v: Option<i64>) -> u64 {
    v.unwrap_or(0).max(0) as u64
}

fn escape_like(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn open_conn(path: &Path) -> Result<Connection, ClientError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| map_err(path, e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| map_err(path, e))?;
    conn.execute_batch("PRAGMA query_only = 1;")
        .map_err(|e| map_err(path, e))?;
    Ok(conn)
}

fn table_columns(conn: &Connection, table: &str) -> Result<HashSet<String>, rusqlite::Error> {
    let mut stmt = conn.prepare(&format!("PRAGMA table_info({table})"))?;
    let cols = stmt
        .query_map([], |r| r.get::<_, String>(1))?
        .collect::<Result<HashSet<_>, _>>()?;
    Ok(cols)
}

/// Checks the tables and columns this backend needs; returns the session `SELECT` list, whether
/// `session.agent` exists, and the newest migration id.
fn check_schema(
    conn: &Connection,
    path: &Path,
) -> Result<(String, bool, Option<String>), ClientError> {
    let session = table_columns(conn, "session").map_err(|e| map_err(path, e))?;
    let message = table_columns(conn, "message").map_err(|e| map_err(path, e))?;
    let part = table_columns(conn, "part").map_err(|e| map_err(path, e))?;
    let mut missing = Vec::new();
    for (table, cols, required) in [
        ("session", &session, REQUIRED_SESSION),
        ("message", &message, REQUIRED_MESSAGE),
        ("part", &part, REQUIRED_PART),
    ] {
        if cols.is_empty() {
            missing.push(format!("table {table} is missing"));
            continue;
        }
        let absent: Vec<&str> = required
            .iter()
            .copied()
            .filter(|c| !cols.contains(*c))
            .collect();
        if !absent.is_empty() {
            missing.push(format!(
                "table {table} lacks column(s) {}",
                absent.join(", ")
            ));
        }
    }
    if !missing.is_empty() {
        let version = if session.contains("version") {
            first_text(
                conn,
                "SELECT version FROM session ORDER BY rowid DESC LIMIT 1",
            )
        } else {
            None
        };
        return Err(ClientError::UnknownSchema {
            missing: missing.join("; "),
            version: version.unwrap_or_else(|| "unknown".into()),
        });
    }
    let mut cols: Vec<String> = REQUIRED_SESSION.iter().map(|c| format!("s.{c}")).collect();
    for (c, default) in OPTIONAL_SESSION {
        if session.contains(*c) {
            cols.push(format!("s.{c}"));
        } else {
            cols.push(format!("{default} AS {c}"));
        }
    }
    let has_migration = conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'migration'",
            [],
            |_| Ok(()),
        )
        .optional()
        .map_err(|e| map_err(path, e))?
        .is_some();
    let migration = if has_migration {
        first_text(conn, "SELECT id FROM migration ORDER BY id DESC LIMIT 1")
    } else {
        None
    };
    Ok((cols.join(", "), session.contains("agent"), migration))
}

/// The text in the first column of the first row of `sql`; `None` when there is no row or
/// the query fails (used only for the informational version and migration names).
fn first_text(conn: &Connection, sql: &str) -> Option<String> {
    conn.query_row(sql, [], |r| r.get::<_, String>(0))
        .optional()
        .ok()
        .flatten()
}

/// Maps a SQLite error to a one-line [`ClientError`].
fn map_err(path: &Path, e: rusqlite::Error) -> ClientError {
    use rusqlite::ErrorCode;
    let shown = path.display().to_string();
    match &e {
        rusqlite::Error::SqliteFailure(f, _) => match f.code {
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => ClientError::StoreLocked {
                path: shown,
                waited_ms: BUSY_TIMEOUT.as_millis() as u64,
            },
            ErrorCode::CannotOpen if !path.exists() => ClientError::StoreMissing { path: shown },
            _ => ClientError::StoreCorrupt {
                path: shown,
                detail: one_line(&e.to_string()),
            },
        },
        _ => ClientError::StoreCorrupt {
            path: shown,
            detail: one_line(&e.to_string()),
        },
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
