//! The argument object of one call, read against its tool's schema: each getter checks one
//! field's type, length and range, and names the field and the accepted values when it refuses.

use super::limits::{MAX_NAME_CHARS, MAX_PATH_CHARS};
use super::schema::valid_model;
use bridge_render::{ArgError, ArgProblem};
use run_supervisor::argv::option_like;
use serde_json::{Map, Value};

pub(super) struct Args<'a> {
    pub(super) map: &'a Map<String, Value>,
    pub(super) schema: &'a Value,
}

impl Args<'_> {
    fn properties(&self) -> Vec<&str> {
        self.schema["properties"]
            .as_object()
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }

    pub(super) fn check_unknown(&self) -> Result<(), ArgError> {
        let known = self.properties();
        match self.map.keys().find(|k| !known.contains(&k.as_str())) {
            None => Ok(()),
            Some(key) => Err(ArgError::new(
                key.as_str(),
                ArgProblem::Unknown {
                    suggestion: closest(key, &known).map(String::from),
                    accepted: known.iter().map(|k| k.to_string()).collect(),
                },
            )),
        }
    }

    /// A present, non-null value. `null` counts as absent (some clients send it for "unset").
    fn get(&self, field: &str) -> Option<&Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    /// The `maxLength` the schema gives `field` (every string argument has one, or an enum).
    fn max_len(&self, field: &str) -> Option<usize> {
        let p = &self.schema["properties"][field];
        p["maxLength"]
            .as_u64()
            .or_else(|| p["items"]["maxLength"].as_u64())
            .map(|m| m as usize)
    }

    /// A string of at most the schema's `maxLength` characters, checked before anything else
    /// looks at it (so no long value is echoed or goes further).
    pub(super) fn opt_str(&self, field: &'static str) -> Result<Option<String>, ArgError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => match self.max_len(field) {
                Some(max) if s.chars().nth(max).is_some() => {
                    Err(ArgError::new(field, ArgProblem::TooLong { max }))
                }
                _ => Ok(Some(s.clone())),
            },
            Some(v) => Err(ArgError::new(
                field,
                ArgProblem::WrongType {
                    expected: "a string",
                    got: v.clone(),
                },
            )),
        }
    }

    /// An optional JSON object.
    pub(super) fn opt_object(&self, field: &'static str) -> Result<Option<Value>, ArgError> {
        match self.get(field) {
            None => Ok(None),
            Some(v @ Value::Object(_)) => Ok(Some(v.clone())),
            Some(v) => Err(ArgError::new(
                field,
                ArgProblem::WrongType {
                    expected: "a JSON Schema object",
                    got: v.clone(),
                },
            )),
        }
    }

    pub(super) fn required_str(&self, field: &'static str) -> Result<String, ArgError> {
        match self.opt_str(field)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            Some(_) => Err(ArgError::new(field, ArgProblem::Empty)),
            None => Err(ArgError::new(
                field,
                ArgProblem::Missing {
                    expected: "a string",
                },
            )),
        }
    }

    /// An optional string that, when given, must not be empty.
    pub(super) fn opt_nonempty(&self, field: &'static str) -> Result<Option<String>, ArgError> {
        match self.opt_str(field)? {
            Some(s) if s.is_empty() => Err(ArgError::new(field, ArgProblem::Empty)),
            other => Ok(other),
        }
    }

    /// A string that must not look like an option (an agent, a session id).
    pub(super) fn opt_not_option(
        &self,
        field: &'static str,
        what: &'static str,
    ) -> Result<Option<String>, ArgError> {
        match self.opt_str(field)? {
            Some(s) if option_like(&s) => Err(ArgError::new(
                field,
                ArgProblem::OptionLike {
                    got: Value::String(s),
                    what,
                },
            )),
            other => Ok(other),
        }
    }

    /// A required session id: not empty, not looking like an option.
    pub(super) fn required_session_id(&self, field: &'static str) -> Result<String, ArgError> {
        let s = self.required_str(field)?;
        if option_like(&s) {
            return Err(ArgError::new(
                field,
                ArgProblem::OptionLike {
                    got: Value::String(s),
                    what: "session id",
                },
            ));
        }
        Ok(s)
    }

    pub(super) fn opt_str_max(
        &self,
        field: &'static str,
        max: usize,
    ) -> Result<Option<String>, ArgError> {
        let s = self.opt_nonempty(field)?;
        if s.as_ref().is_some_and(|s| s.chars().count() > max) {
            return Err(ArgError::new(field, ArgProblem::TooLong { max }));
        }
        Ok(s)
    }

    /// A required array of 1..=max non-empty strings.
    pub(super) fn required_ids(
        &self,
        field: &'static str,
        max: usize,
    ) -> Result<Vec<String>, ArgError> {
        let bad = || ArgError::new(field, ArgProblem::NotTaskIds { max });
        match self.get(field) {
            None => Err(ArgError::new(
                field,
                ArgProblem::Missing {
                    expected: "an array of task ids",
                },
            )),
            Some(Value::Array(items)) if !items.is_empty() && items.len() <= max => items
                .iter()
                .map(|v| match v {
                    Value::String(s) if s.chars().count() > MAX_NAME_CHARS => Err(ArgError::new(
                        field,
                        ArgProblem::TooLong {
                            max: MAX_NAME_CHARS,
                        },
                    )),
                    Value::String(s) if !s.is_empty() => Ok(s.clone()),
                    _ => Err(bad()),
                })
                .collect(),
            Some(_) => Err(bad()),
        }
    }

    /// An optional array of at most `max` non-empty paths of at most [`MAX_PATH_CHARS`]
    /// characters each (absent: none).
    pub(super) fn opt_paths(
        &self,
        field: &'static str,
        max: usize,
    ) -> Result<Vec<String>, ArgError> {
        let bad = |got: &Value| {
            ArgError::new(
                field,
                ArgProblem::WrongType {
                    expected: "an array of paths",
                    got: got.clone(),
                },
            )
        };
        match self.get(field) {
            None => Ok(vec![]),
            Some(Value::Array(items)) if items.len() <= max => items
                .iter()
                .map(|v| match v {
                    Value::String(s) if s.chars().count() > MAX_PATH_CHARS => Err(ArgError::new(
                        field,
                        ArgProblem::TooLong {
                            max: MAX_PATH_CHARS,
                        },
                    )),
                    Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
                    Value::String(_) => Err(ArgError::new(field, ArgProblem::Empty)),
                    other => Err(bad(other)),
                })
                .collect(),
            // Too many: the count is what is out of range.
            Some(Value::Array(items)) => Err(ArgError::new(
                field,
                ArgProblem::OutOfRange {
                    got: Value::from(items.len()),
                    min: 0,
                    max: max as u64,
                },
            )),
            Some(other) => Err(bad(other)),
        }
    }

    pub(super) fn required_str_max(
        &self,
        field: &'static str,
        max: usize,
    ) -> Result<String, ArgError> {
        let s = self.required_str(field)?;
        if s.chars().count() > max {
            return Err(ArgError::new(field, ArgProblem::TooLong { max }));
        }
        Ok(s)
    }

    /// One of `accepted`, in any letter case (`EASY` is `easy`); the value returned is the
    /// accepted spelling.
    pub(super) fn opt_enum(
        &self,
        field: &'static str,
        accepted: &[&'static str],
    ) -> Result<Option<String>, ArgError> {
        Ok(self.opt_choice(field, accepted, |a| a)?.map(str::to_string))
    }

    /// One of a closed set of values (`all`, spelt by `name`), in any letter case, parsed
    /// into its type (the policy's [`Tier`](bridge_policy::Tier) and
    /// [`Mode`](bridge_policy::Mode) this way).
    pub(super) fn opt_choice<T: Copy>(
        &self,
        field: &'static str,
        all: &[T],
        name: fn(T) -> &'static str,
    ) -> Result<Option<T>, ArgError> {
        let Some(v) = self.get(field) else {
            return Ok(None);
        };
        v.as_str()
            .and_then(|s| {
                all.iter()
                    .find(|&&t| name(t).eq_ignore_ascii_case(s.trim()))
            })
            .map(|&t| Some(t))
            .ok_or_else(|| {
                ArgError::new(
                    field,
                    ArgProblem::NotOneOf {
                        got: v.clone(),
                        allowed: all.iter().map(|&t| name(t)).collect(),
                    },
                )
            })
    }

    /// A required [`Args::opt_choice`].
    pub(super) fn required_choice<T: Copy>(
        &self,
        field: &'static str,
        all: &[T],
        name: fn(T) -> &'static str,
    ) -> Result<T, ArgError> {
        self.opt_choice(field, all, name)?.ok_or_else(|| {
            ArgError::new(
                field,
                ArgProblem::MissingOneOf {
                    allowed: all.iter().map(|&t| name(t)).collect(),
                },
            )
        })
    }

    pub(super) fn opt_bool(&self, field: &'static str) -> Result<Option<bool>, ArgError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(ArgError::new(field, ArgProblem::NotBool { got: v.clone() })),
        }
    }

    pub(super) fn opt_int(
        &self,
        field: &'static str,
        min: u64,
        max: u64,
    ) -> Result<Option<u64>, ArgError> {
        let bad = |v: &Value| {
            ArgError::new(
                field,
                ArgProblem::OutOfRange {
                    got: v.clone(),
                    min,
                    max,
                },
            )
        };
        match self.get(field) {
            None => Ok(None),
            Some(v @ Value::Number(n)) => {
                let int = n.as_u64().or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                        .map(|f| f as u64)
                });
                match int {
                    Some(i) if (min..=max).contains(&i) => Ok(Some(i)),
                    _ => Err(bad(v)),
                }
            }
            Some(v) => Err(bad(v)),
        }
    }

    pub(super) fn opt_usd(&self, field: &'static str, max: f64) -> Result<Option<f64>, ArgError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Number(n)) if n.as_f64().is_some_and(|f| f > 0.0 && f <= max) => {
                Ok(n.as_f64())
            }
            Some(v) => Err(ArgError::new(
                field,
                ArgProblem::NotUsd {
                    got: v.clone(),
                    max,
                },
            )),
        }
    }

    /// A UTC date `YYYY-MM-DD`: its midnight in epoch ms, and the date.
    pub(super) fn opt_date(&self, field: &'static str) -> Result<Option<(u64, String)>, ArgError> {
        let Some(text) = self.opt_nonempty(field)? else {
            return Ok(None);
        };
        let text = text.trim().to_owned();
        match run_supervisor::utc::parse(&format!("{text}T00:00:00Z")) {
            Some(t) if text.len() == 10 && run_supervisor::utc::format(t).starts_with(&text) => {
                let ms = t
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                Ok(Some((ms, text)))
            }
            _ => Err(ArgError::new(
                field,
                ArgProblem::NotDate {
                    got: Value::String(text),
                },
            )),
        }
    }

    pub(super) fn opt_model(&self, field: &'static str) -> Result<Option<String>, ArgError> {
        let Some(model) = self.opt_str(field)? else {
            return Ok(None);
        };
        let (main, variant) = model.split_once('#').unwrap_or((&model, ""));
        let (provider, name) = main.split_once('/').unwrap_or((main, ""));
        if [provider, name, variant].into_iter().any(option_like) {
            return Err(ArgError::new(
                field,
                ArgProblem::OptionLike {
                    got: Value::String(model),
                    what: "model",
                },
            ));
        }
        if valid_model(&model) {
            Ok(Some(model))
        } else {
            Err(ArgError::new(field, ArgProblem::BadModel { got: model }))
        }
    }
}

/// The known name `name` most likely misspells: the same in another letter case or with `-`
/// for `_`, or at most two edits away (one for names of up to four letters).
fn closest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let norm = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let wanted = norm(name);
    if wanted.chars().count() > 64 {
        return None;
    }
    let limit = if wanted.chars().count() <= 4 { 1 } else { 2 };
    known
        .iter()
        .map(|k| (edit_distance(&wanted, &norm(k)), *k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}
