//! What a task used and what it cost: tokens and money per attempt ([`Usage`]), the prices
//! that turn tokens into money ([`Prices`]), the Claude-equivalent of the same tokens, the
//! ledger of every finished task ([`ledger`]) and the budgets checked against it ([`budget`]).
//!
//! A [`Usage`] is filled the same way whatever ran the task: from `opencode run`'s
//! `step_finish` events or `claude -p`'s result (the run summary's totals), or from a
//! session's assistant messages as opencode stored them ([`Usage::from_messages`]: the store,
//! or `opencode serve`'s messages for a task run as a server session).
//!
//! The cost opencode records is kept as it is ([`CostBasis::Reported`]). When it recorded 0
//! for a model that has a price, the cost is computed from the price ([`CostBasis::Estimated`]);
//! a model whose price is 0 is [`CostBasis::Free`]; a model of no known price that recorded 0
//! is [`CostBasis::Unknown`], and a budget counts it at its Claude-equivalent cost (never as
//! free, see [`Usage::budget_cost`]).
//!
//! Prices come from opencode's own models cache (`models.json` in models.dev's format, under
//! opencode's cache directory) when it is there, else from the snapshot bundled with the
//! bridge (`data/prices.json`, with its date and source; `scripts/refresh-prices.sh` refreshes
//! it); the bridge's config file (`[prices."provider/model"]`) overrides both.

pub mod budget;
pub mod ledger;
pub mod reserve;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Token counts summed over every `step_finish` of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenUsage {
    /// Input tokens (opencode excludes cache reads from this number).
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Reasoning tokens.
    pub reasoning: u64,
    /// Tokens read from the provider's cache.
    pub cache_read: u64,
    /// Tokens written to the provider's cache.
    pub cache_write: u64,
}

/// The model a task's usage is compared with when `OPENCODE_BRIDGE_COMPARE_MODEL` is not set:
/// `sonnet`, the newest Sonnet in the prices ([`Prices::resolve`]).
pub const DEFAULT_COMPARE_MODEL: &str = bridge_env::COMPARE_MODEL.default;

/// The bundled price snapshot (models.dev format plus a `_snapshot` entry: date, source).
pub const BUNDLED_PRICES: &str = include_str!("../../data/prices.json");

/// A model's list price, USD per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// Input tokens (not read from the cache).
    pub input: f64,
    /// Output tokens (reasoning tokens are priced as output).
    pub output: f64,
    /// Tokens read from the cache (the input price when the model names none).
    #[serde(default)]
    pub cache_read: Option<f64>,
    /// Tokens written to the cache (the input price when the model names none).
    #[serde(default)]
    pub cache_write: Option<f64>,
}

impl Price {
    /// What `t` costs at this price.
    pub fn cost(&self, t: &TokenUsage) -> f64 {
        let m = 1_000_000.0;
        (t.input as f64 * self.input
            + (t.output + t.reasoning) as f64 * self.output
            + t.cache_read as f64 * self.cache_read.unwrap_or(self.input)
            + t.cache_write as f64 * self.cache_write.unwrap_or(self.input))
            / m
    }

    /// True when every token of this model is free.
    pub fn is_free(&self) -> bool {
        self.input == 0.0
            && self.output == 0.0
            && self.cache_read.unwrap_or(0.0) == 0.0
            && self.cache_write.unwrap_or(0.0) == 0.0
    }
}

/// Where prices came from, for the texts that show them: each layer and how many models it
/// priced. A model's price is the top layer's that has it: the bridge's config file, then
/// opencode's own config (`provider.*.models.*.cost`, as opencode itself lets it win over its
/// models list), then opencode's models cache, then the snapshot bundled with the bridge.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PriceSource {
    /// opencode's models cache read: its path, its date (the file's modification day, UTC)
    /// and how many models it priced.
    pub cache: Option<(PathBuf, String, usize)>,
    /// opencode's config files that priced a model, and how many models they priced.
    pub opencode_config: (Vec<PathBuf>, usize),
    /// The bundled snapshot's date.
    pub bundled: String,
}

impl std::fmt::Display for PriceSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cache {
            Some((p, date, n)) => write!(
                f,
                "opencode's models cache {} of {date} ({n} models)",
                p.display()
            )?,
            None => write!(f, "the bridge's price snapshot of {}", self.bundled)?,
        }
        let (files, n) = &self.opencode_config;
        if *n > 0 {
            let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
            write!(f, ", {n} from opencode's config ({})", names.join(", "))?;
        }
        if self.cache.is_some() {
            write!(
                f,
                ", the rest from the bridge's snapshot of {}",
                self.bundled
            )?;
        }
        Ok(())
    }
}

/// Prices by `provider/model`.
#[derive(Debug, Clone, PartialEq)]
pub struct Prices {
    by_model: HashMap<String, Price>,
    /// Release dates (`YYYY-MM-DD`) by `provider/model`, where the data names one.
    released: HashMap<String, String>,
    /// Where they came from (the config file's overrides are on top).
    pub source: PriceSource,
    /// How many the config file set.
    pub overrides: usize,
}

/// A models.dev `cost` object as a price (`None`: not one).
/// models.dev's JSON read for its prices only (see [`Prices::parse_models_dev`]).
mod models_dev {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    use serde_json::Value;

    /// Providers in file order: (provider, its models).
    pub(super) struct Providers(pub Vec<(String, Vec<(String, Model)>)>);

    /// What a model entry says about its price.
    #[derive(Default)]
    pub(super) struct Model {
        /// `cost`, when it is a price (`input` and `output` numbers; the cache prices numbers
        /// or null when given).
        pub cost: Option<super::Price>,
        /// `release_date`, when it is a string.
        pub release_date: Option<String>,
    }

    /// A map visitor that skips every non-map value.
    macro_rules! lenient_map {
        ($name:ident, $out:ty, $expect:literal, |$map:ident| $body:block) => {
            struct $name;
            impl<'de> Visitor<'de> for $name {
                type Value = $out;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str($expect)
                }
                fn visit_map<A: MapAccess<'de>>(self, mut $map: A) -> Result<$out, A::Error> $body
                fn visit_bool<E>(self, _: bool) -> Result<$out, E> { Ok(<$out>::default()) }
                fn visit_i64<E>(self, _: i64) -> Result<$out, E> { Ok(<$out>::default()) }
                fn visit_u64<E>(self, _: u64) -> Result<$out, E> { Ok(<$out>::default()) }
                fn visit_f64<E>(self, _: f64) -> Result<$out, E> { Ok(<$out>::default()) }
                fn visit_str<E>(self, _: &str) -> Result<$out, E> { Ok(<$out>::default()) }
                fn visit_unit<E>(self) -> Result<$out, E> { Ok(<$out>::default()) }
                fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<$out, A::Error> {
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(<$out>::default())
                }
            }
        };
    }

    lenient_map!(ModelVisitor, Model, "a model", |map| {
        let mut model = Model::default();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "cost" => model.cost = map.next_value::<Cost>()?.0,
                "release_date" => {
                    model.release_date = match map.next_value::<Value>()? {
                        Value::String(s) => Some(s),
                        _ => None,
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(model)
    });

    /// A number as a price field: `Num`, `Null`, or anything else (`Bad`, skipped unread).
    #[derive(Default, Clone, Copy)]
    enum Num {
        #[default]
        Missing,
        Null,
        Bad,
        Of(f64),
    }

    struct NumVisitor;
    impl<'de> Visitor<'de> for NumVisitor {
        type Value = Num;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a number")
        }
        fn visit_u64<E>(self, v: u64) -> Result<Num, E> {
            Ok(Num::Of(v as f64))
        }
        fn visit_i64<E>(self, v: i64) -> Result<Num, E> {
            Ok(Num::Of(v as f64))
        }
        fn visit_f64<E>(self, v: f64) -> Result<Num, E> {
            Ok(Num::Of(v))
        }
        fn visit_unit<E>(self) -> Result<Num, E> {
            Ok(Num::Null)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Num, E> {
            Ok(Num::Bad)
        }
        fn visit_str<E>(self, _: &str) -> Result<Num, E> {
            Ok(Num::Bad)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Num, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Num::Bad)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Num, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(Num::Bad)
        }
    }

    impl<'de> serde::Deserialize<'de> for Num {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(NumVisitor)
        }
    }

    lenient_map!(CostVisitor, Option<super::Price>, "a price", |map| {
        let (mut input, mut output, mut read, mut write) =
            (Num::Missing, Num::Missing, Num::Missing, Num::Missing);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let slot = match key.as_ref() {
                "input" => &mut input,
                "output" => &mut output,
                "cache_read" => &mut read,
                "cache_write" => &mut write,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = map.next_value()?;
        }
        // What `Price`'s own Deserialize accepts: both prices numbers, a cache price a
        // number, null or absent.
        let optional = |n: Num| match n {
            Num::Of(v) => Ok(Some(v)),
            Num::Missing | Num::Null => Ok(None),
            Num::Bad => Err(()),
        };
        Ok(match (input, output, optional(read), optional(write)) {
            (Num::Of(input), Num::Of(output), Ok(cache_read), Ok(cache_write)) => {
                Some(super::Price {
                    input,
                    output,
                    cache_read,
                    cache_write,
                })
            }
            _ => None,
        })
    });

    struct Cost(Option<super::Price>);
    impl<'de> serde::Deserialize<'de> for Cost {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(CostVisitor).map(Cost)
        }
    }

    struct ModelEntry(Model);
    impl<'de> serde::Deserialize<'de> for ModelEntry {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(ModelVisitor).map(ModelEntry)
        }
    }

    lenient_map!(
        ModelsVisitor,
        Vec<(String, Model)>,
        "a map of models",
        |map| {
            let mut models = Vec::new();
            while let Some((id, ModelEntry(model))) = map.next_entry::<String, ModelEntry>()? {
                models.push((id, model));
            }
            Ok(models)
        }
    );

    struct Models(Vec<(String, Model)>);
    impl<'de> serde::Deserialize<'de> for Models {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(ModelsVisitor).map(Models)
        }
    }

    lenient_map!(ProviderVisitor, Vec<(String, Model)>, "a provider", |map| {
        let mut models = Vec::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "models" {
                models = map.next_value::<Models>()?.0;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(models)
    });

    struct Provider(Vec<(String, Model)>);
    impl<'de> serde::Deserialize<'de> for Provider {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(ProviderVisitor).map(Provider)
        }
    }

    struct ProvidersVisitor;
    impl<'de> Visitor<'de> for ProvidersVisitor {
        type Value = Providers;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object of providers")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Providers, A::Error> {
            let mut out = Vec::new();
            while let Some((name, Provider(models))) = map.next_entry::<String, Provider>()? {
                out.push((name, models));
            }
            Ok(Providers(out))
        }
    }

    impl<'de> serde::Deserialize<'de> for Providers {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_map(ProvidersVisitor)
        }
    }
}

fn price_of(cost: &Value) -> Option<Price> {
    serde_json::from_value::<Price>(cost.clone()).ok()
}

/// JSON, or JSON with `//` and `/* */` comments and trailing commas (opencode's `.jsonc`).
fn parse_jsonc(text: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str(text) {
        return Some(v);
    }
    let (mut out, mut chars) = (String::with_capacity(text.len()), text.chars().peekable());
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if c == '\\' {
                out.extend(chars.next());
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut prev = ' ';
                for n in chars.by_ref() {
                    if prev == '*' && n == '/' {
                        break;
                    }
                    prev = n;
                }
            }
            _ => out.push(c),
        }
    }
    // Trailing commas: `,` before `}` or `]`.
    let mut clean = String::with_capacity(out.len());
    let bytes: Vec<char> = out.chars().collect();
    let mut in_string = false;
    for (i, &c) in bytes.iter().enumerate() {
        if c == '"' && (i == 0 || bytes[i - 1] != '\\') {
            in_string = !in_string;
        }
        if !in_string && c == ',' {
            let next = bytes[i + 1..].iter().find(|n| !n.is_whitespace());
            if matches!(next, Some('}') | Some(']')) {
                continue;
            }
        }
        clean.push(c);
    }
    serde_json::from_str(&clean).ok()
}

impl Prices {
    /// Reads models.dev's format: `{provider: {models: {id: {cost: {input, output,
    /// cache_read, cache_write}, release_date}}}}` (entries without `models` are skipped).
    ///
    /// Only those fields are kept, as the text is read: opencode's models cache is about a
    /// megabyte of JSON (names, limits, modalities of some 1,500 models), which as a
    /// `serde_json::Value` took more than 10 MB; anything else is skipped unread, and an entry
    /// of another shape is passed over, as before.
    pub fn parse_models_dev(json: &str, source: PriceSource) -> Result<Prices, String> {
        let providers: models_dev::Providers =
            serde_json::from_str(json).map_err(|e| e.to_string())?;
        let mut by_model = HashMap::new();
        let mut released = HashMap::new();
        for (provider, models) in providers.0 {
            for (id, model) in models {
                if let Some(price) = model.cost {
                    let key = format!("{provider}/{id}");
                    if let Some(d) = model.release_date {
                        released.insert(key.clone(), d);
                    }
                    by_model.insert(key, price);
                }
            }
        }
        Ok(Prices {
            by_model,
            released,
            source,
            overrides: 0,
        })
    }

    /// The bundled snapshot.
    pub fn bundled() -> Prices {
        let date = serde_json::from_str::<Value>(BUNDLED_PRICES)
            .ok()
            .and_then(|v| v["_snapshot"]["date"].as_str().map(str::to_owned))
            .unwrap_or_default();
        Prices::parse_models_dev(
            BUNDLED_PRICES,
            PriceSource {
                bundled: date,
                ..PriceSource::default()
            },
        )
        .expect("the bundled price snapshot is valid")
    }

    /// opencode's models cache in `cache_dir` (opencode's cache directory) over the bundled
    /// snapshot; then `overrides` (`provider/model` → price) on top.
    pub fn load(cache_dir: Option<&Path>, overrides: &[(String, Price)]) -> Prices {
        Prices::load_layers(cache_dir, &[], overrides)
    }

    /// The bundled snapshot, opencode's models cache in `cache_dir` over it (read, never
    /// written), the prices of opencode's config files `opencode_config`
    /// (`provider.<p>.models.<m>.cost`) over that, and `overrides` on top.
    pub fn load_layers(
        cache_dir: Option<&Path>,
        opencode_config: &[PathBuf],
        overrides: &[(String, Price)],
    ) -> Prices {
        let mut prices = Prices::bundled();
        if let Some(p) = cache_dir.map(|d| d.join("models.json"))
            && let Ok(text) = std::fs::read_to_string(&p)
            && let Ok(cached) = Prices::parse_models_dev(&text, PriceSource::default())
            && !cached.by_model.is_empty()
        {
            let date = std::fs::metadata(&p)
                .and_then(|m| m.modified())
                .map(|t| crate::utc::day(crate::utc::to_ms(t)))
                .unwrap_or_else(|_| "an unknown day".into());
            prices.source.cache = Some((p, date, cached.by_model.len()));
            prices.by_model.extend(cached.by_model);
            prices.released.extend(cached.released);
        }
        for file in opencode_config {
            let Some(v) = std::fs::read_to_string(file)
                .ok()
                .and_then(|t| parse_jsonc(&t))
            else {
                continue;
            };
            let mut n = 0;
            for (provider, p) in v["provider"].as_object().into_iter().flatten() {
                for (id, m) in p["models"].as_object().into_iter().flatten() {
                    if let Some(price) = m.get("cost").and_then(price_of) {
                        prices.by_model.insert(format!("{provider}/{id}"), price);
                        n += 1;
                    }
                }
            }
            if n > 0 {
                prices.source.opencode_config.0.push(file.clone());
                prices.source.opencode_config.1 += n;
            }
        }
        for (model, price) in overrides {
            prices.by_model.insert(model.clone(), *price);
        }
        prices.overrides = overrides.len();
        prices
    }

    /// opencode's cache directory as `env` says (`XDG_CACHE_HOME`, else `~/.cache`) + `opencode`.
    pub fn opencode_cache_dir(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
        env("XDG_CACHE_HOME")
            .filter(|v| Path::new(v).is_absolute())
            .map(PathBuf::from)
            .or_else(|| env("HOME").map(|h| Path::new(&h).join(".cache")))
            .map(|d| d.join("opencode"))
    }

    /// opencode's global config files as `env` says (`$XDG_CONFIG_HOME/opencode`, else
    /// `~/.config/opencode`: `config.json`, `opencode.json`, `opencode.jsonc`), then the file
    /// `OPENCODE_CONFIG` names: the order opencode merges them in.
    pub fn opencode_config_files(env: impl Fn(&str) -> Option<String>) -> Vec<PathBuf> {
        let dir = env("XDG_CONFIG_HOME")
            .filter(|v| Path::new(v).is_absolute())
            .map(PathBuf::from)
            .or_else(|| env("HOME").map(|h| Path::new(&h).join(".config")))
            .map(|d| d.join("opencode"));
        let mut out: Vec<PathBuf> = dir
            .into_iter()
            .flat_map(|d| ["config.json", "opencode.json", "opencode.jsonc"].map(|f| d.join(f)))
            .collect();
        out.extend(
            env(bridge_env::OPENCODE_CONFIG.name)
                .map(|p| p.trim().to_owned())
                .filter(|p| Path::new(p).is_absolute())
                .map(PathBuf::from),
        );
        out
    }

    /// The newest model of a Claude family (`sonnet`, `opus`, `haiku`) in these prices:
    /// `anthropic/claude-<family>-…` of the highest version (`5-5` over `5` over `4-6`; a
    /// dated id such as `…-20250929` is the same version as its alias, which wins), its
    /// release date breaking ties.
    pub fn newest(&self, family: &str) -> Option<String> {
        let prefix = format!("anthropic/claude-{family}-");
        self.by_model
            .keys()
            .filter_map(|k| {
                let rest = k.strip_prefix(&prefix)?;
                let mut version = Vec::new();
                let mut dated = false;
                for part in rest.split('-') {
                    match part.parse::<u32>() {
                        Ok(_) if part.len() == 8 && !dated => dated = true,
                        Ok(n) if !dated && part.len() <= 2 => version.push(n),
                        // Not a plain version (`…_prompt_greater_than_200k_tokens`, `-fast`).
                        _ => return None,
                    }
                }
                let date = self.released.get(k).cloned().unwrap_or_default();
                Some(((version, date, !dated), k))
            })
            .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(a.1)))
            .map(|(_, k)| k.clone())
    }

    /// `model` with a family alias resolved: `sonnet`, `opus`, `haiku` (also as
    /// `anthropic/…` or `claude/…`) name the family's [`newest`](Self::newest) model; any
    /// other name is itself.
    pub fn resolve(&self, model: &str) -> String {
        let m = model.trim();
        let bare = m
            .strip_prefix("anthropic/")
            .or_else(|| m.strip_prefix("claude/"))
            .unwrap_or(m);
        match bare {
            "sonnet" | "opus" | "haiku" => self.newest(bare).unwrap_or_else(|| m.to_owned()),
            _ => m.to_owned(),
        }
    }

    /// The price of `model` (`provider/model`; a bare id or `claude/<id>` is looked up under
    /// `anthropic/` first, then under any provider).
    pub fn get(&self, model: &str) -> Option<Price> {
        let resolved = self.resolve(model);
        let model = resolved.as_str();
        if let Some(p) = self.by_model.get(model) {
            return Some(*p);
        }
        let bare = model
            .strip_prefix("claude/")
            .or_else(|| model.strip_prefix("anthropic/"))
            .unwrap_or(model);
        if bare.contains('/') {
            return None;
        }
        if let Some(p) = self.by_model.get(&format!("anthropic/{bare}")) {
            return Some(*p);
        }
        let mut hits: Vec<(&String, &Price)> = self
            .by_model
            .iter()
            .filter(|(k, _)| k.rsplit('/').next() == Some(bare))
            .collect();
        hits.sort_by(|a, b| a.0.cmp(b.0));
        hits.first().map(|(_, p)| **p)
    }

    /// How many models have a price.
    pub fn len(&self) -> usize {
        self.by_model.len()
    }

    /// True when no model has a price.
    pub fn is_empty(&self) -> bool {
        self.by_model.is_empty()
    }
}

/// The prices a supervisor uses and the model tasks are compared with.
///
/// Read on first use, not when made: opencode's models cache is about a megabyte of JSON, and
/// a cold start (`initialize`, `tools/list`) prices nothing, so reading it there cost every
/// start its parse and its memory. The environment is read when made (what the layers are),
/// the files when first needed; clones share what was read.
#[derive(Clone)]
pub struct Pricing {
    loaded: std::sync::Arc<std::sync::OnceLock<Loaded>>,
    layers: std::sync::Arc<Layers>,
}

/// The prices once read, and the compare model resolved in them.
#[derive(Debug)]
struct Loaded {
    prices: Prices,
    compare_model: String,
}

/// Where the prices come from (see [`Prices::load_layers`]) and the compare model as named.
#[derive(Debug, Default)]
struct Layers {
    cache: Option<PathBuf>,
    files: Vec<PathBuf>,
    overrides: Vec<(String, Price)>,
    named: String,
}

impl std::fmt::Debug for Pricing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.loaded.get() {
            Some(l) => f.debug_tuple("Pricing").field(l).finish(),
            None => f.debug_tuple("Pricing").field(&self.layers).finish(),
        }
    }
}

impl Default for Pricing {
    /// The bundled snapshot, compared with [`DEFAULT_COMPARE_MODEL`].
    fn default() -> Self {
        Pricing::lazy(Layers {
            named: DEFAULT_COMPARE_MODEL.to_owned(),
            ..Layers::default()
        })
    }
}

impl Pricing {
    /// These prices, compared with `compare_model` as given.
    pub fn new(prices: Prices, compare_model: impl Into<String>) -> Pricing {
        let pricing = Pricing::lazy(Layers::default());
        let _ = pricing.loaded.set(Loaded {
            prices,
            compare_model: compare_model.into(),
        });
        pricing
    }

    fn lazy(layers: Layers) -> Pricing {
        Pricing {
            loaded: std::sync::Arc::default(),
            layers: std::sync::Arc::new(layers),
        }
    }

    /// From the environment `get` reads: the bundled snapshot, opencode's models cache over
    /// it, opencode's config files' prices over that, the compare model (an alias resolved
    /// in those prices); `overrides` are the bridge's config file's prices, on top. The files
    /// are read on first use.
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
        overrides: &[(String, Price)],
    ) -> Pricing {
        let named = get(bridge_env::COMPARE_MODEL.name)
            .map(|m| m.trim().to_owned())
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| DEFAULT_COMPARE_MODEL.to_owned());
        Pricing::lazy(Layers {
            cache: Prices::opencode_cache_dir(&get),
            files: Prices::opencode_config_files(&get),
            overrides: overrides.to_vec(),
            named,
        })
    }

    fn loaded(&self) -> &Loaded {
        self.loaded.get_or_init(|| {
            let l = &self.layers;
            let prices = Prices::load_layers(l.cache.as_deref(), &l.files, &l.overrides);
            Loaded {
                compare_model: prices.resolve(&l.named),
                prices,
            }
        })
    }

    /// Prices by model.
    pub fn prices(&self) -> &Prices {
        &self.loaded().prices
    }

    /// `OPENCODE_BRIDGE_COMPARE_MODEL` (default [`DEFAULT_COMPARE_MODEL`]), an alias resolved
    /// in the prices.
    pub fn compare_model(&self) -> &str {
        &self.loaded().compare_model
    }

    /// The compare model's price (`None`: it has none).
    pub fn compare_price(&self) -> Option<Price> {
        self.prices().get(self.compare_model())
    }

    /// `tokens` and the reported `cost` of a run of `model` (see [`Usage::priced`]).
    pub fn usage(&self, tokens: TokenUsage, cost: f64, model: Option<&str>) -> Usage {
        Usage::priced(tokens, cost, model, self.prices(), self.compare_price())
    }
}

/// How a cost was arrived at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostBasis {
    /// As opencode (or `claude -p`) recorded it.
    #[default]
    Reported,
    /// Recorded as 0 for a model that has a price: computed from the price.
    Estimated,
    /// The model's price is 0.
    Free,
    /// Recorded as 0 and the model has no known price.
    Unknown,
}

impl CostBasis {
    /// snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            CostBasis::Reported => "reported",
            CostBasis::Estimated => "estimated",
            CostBasis::Free => "free",
            CostBasis::Unknown => "unknown",
        }
    }

    /// The basis of two usages added together: the least certain one.
    fn join(self, other: CostBasis) -> CostBasis {
        use CostBasis::*;
        let rank = |b| match b {
            Free => 0,
            Reported => 1,
            Estimated => 2,
            Unknown => 3,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

/// What one attempt (or one task, attempts added up) used and cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens.
    pub tokens: TokenUsage,
    /// Cost in USD (reported or estimated, see `basis`).
    pub cost: f64,
    /// How `cost` was arrived at.
    pub basis: CostBasis,
    /// The same tokens at the compare model's price (USD); `None` when that model has no price.
    pub claude_equivalent: Option<f64>,
}

/// One assistant message's usage, as a session's store or server reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageUsage {
    /// `provider/model` of the message.
    pub model: Option<String>,
    /// Its tokens.
    pub tokens: TokenUsage,
    /// The cost opencode recorded.
    pub cost: f64,
}

impl Usage {
    /// `tokens` for which `cost` was reported, by `model` (`None`: unknown), priced with
    /// `prices` where the report is 0, and compared with `compare`.
    pub fn priced(
        tokens: TokenUsage,
        cost: f64,
        model: Option<&str>,
        prices: &Prices,
        compare: Option<Price>,
    ) -> Usage {
        let price = model.and_then(|m| prices.get(m));
        let used = tokens != TokenUsage::default();
        let (cost, basis) = match price {
            _ if cost > 0.0 => (cost, CostBasis::Reported),
            Some(p) if p.is_free() => (0.0, CostBasis::Free),
            Some(p) => (p.cost(&tokens), CostBasis::Estimated),
            None if !used => (0.0, CostBasis::Reported),
            None => (0.0, CostBasis::Unknown),
        };
        Usage {
            tokens,
            cost,
            basis,
            claude_equivalent: compare.map(|p| p.cost(&tokens)),
        }
    }

    /// A session's assistant messages, each priced by its own model (see [`Usage::priced`]).
    pub fn from_messages<'a>(
        messages: impl IntoIterator<Item = &'a MessageUsage>,
        prices: &Prices,
        compare: Option<Price>,
    ) -> Usage {
        let mut total = Usage {
            claude_equivalent: compare.map(|_| 0.0),
            ..Usage::default()
        };
        for m in messages {
            total.add(&Usage::priced(
                m.tokens,
                m.cost,
                m.model.as_deref(),
                prices,
                compare,
            ));
        }
        total
    }

    /// Adds `other` to this one.
    pub fn add(&mut self, other: &Usage) {
        let (a, b) = (&mut self.tokens, &other.tokens);
        a.input += b.input;
        a.output += b.output;
        a.reasoning += b.reasoning;
        a.cache_read += b.cache_read;
        a.cache_write += b.cache_write;
        self.cost += other.cost;
        self.basis = self.basis.join(other.basis);
        self.claude_equivalent = match (self.claude_equivalent, other.claude_equivalent) {
            (Some(x), Some(y)) => Some(x + y),
            (x, y) => x.or(y),
        };
    }

    /// What counts against a budget: the cost, or for a cost of unknown basis the
    /// Claude-equivalent (never 0 for tokens that were used).
    pub fn budget_cost(&self) -> f64 {
        match self.basis {
            CostBasis::Unknown => self.cost.max(self.claude_equivalent.unwrap_or(0.0)),
            _ => self.cost,
        }
    }

    /// Claude-equivalent minus cost (`None` when there is no Claude-equivalent).
    pub fn saved(&self) -> Option<f64> {
        self.claude_equivalent.map(|c| c - self.cost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(input: u64, output: u64) -> TokenUsage {
        TokenUsage {
            input,
            output,
            ..TokenUsage::default()
        }
    }

    #[test]
    fn models_dev_is_read_for_prices_only_and_odd_entries_are_passed_over() {
        let json = r#"{
          "_snapshot": {"date": "2026-12-01"},
          "odd": "not a provider",
          "listy": {"models": []},
          "p\u0031": {
            "name": "P one", "env": ["P1_KEY"], "doc": {"nested": [1, {"deep": true}]},
            "models": {
              "good": {"id": "good", "limit": {"context": 1}, "modalities": {"input": ["text"]},
                       "cost": {"input": 1, "output": 2.5, "cache_read": null, "reasoning": 9},
                       "release_date": "2026-01-02"},
              "cached": {"cost": {"input": 3, "output": 4, "cache_read": 0.3, "cache_write": 3.75},
                         "release_date": 20260102},
              "text-cost": {"cost": {"input": "1", "output": 2}},
              "bad-cache": {"cost": {"input": 1, "output": 2, "cache_write": "x"}},
              "no-output": {"cost": {"input": 1}},
              "list-cost": {"cost": [1, 2]},
              "string-model": "x",
              "free": {"cost": {"input": 0, "output": 0}},
              "uncosted": {"release_date": "2026-01-01"}
            }
          }
        }"#;
        let p = Prices::parse_models_dev(json, PriceSource::default()).unwrap();
        let mut keys: Vec<&str> = p.by_model.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, ["p1/cached", "p1/free", "p1/good"]);
        assert_eq!(
            p.get("p1/good"),
            Some(Price {
                input: 1.0,
                output: 2.5,
                cache_read: None,
                cache_write: None
            })
        );
        assert_eq!(p.get("p1/cached").unwrap().cache_write, Some(3.75));
        assert_eq!(
            p.released.get("p1/good").map(String::as_str),
            Some("2026-01-02")
        );
        // A release date that is not a string is none; a model without a price has none kept.
        assert!(!p.released.contains_key("p1/cached"));
        assert!(!p.released.contains_key("p1/uncosted"));
        assert!(Prices::parse_models_dev("[1]", PriceSource::default()).is_err());
        assert!(
            Prices::parse_models_dev("{\"a\": {\"models\": {\"m\": ", PriceSource::default())
                .is_err()
        );
    }

    #[test]
    fn the_bundled_snapshot_has_the_compare_model_and_a_date() {
        let p = Prices::bundled();
        assert!(p.get(DEFAULT_COMPARE_MODEL).is_some());
        assert_eq!(p.source.bundled.len(), 10, "{:?}", p.source);
        assert!(p.source.cache.is_none());
        // Bare ids and the claude runner's names find the anthropic entry.
        assert_eq!(
            p.get("claude-sonnet-4-5"),
            p.get("anthropic/claude-sonnet-4-5")
        );
        assert_eq!(
            p.get("claude/claude-sonnet-4-5"),
            p.get("anthropic/claude-sonnet-4-5")
        );
        assert_eq!(p.get("nobody/nothing"), None);
        // The default compare model is the newest Sonnet of the data, whatever its name.
        assert_eq!(
            Pricing::default().compare_model(),
            "anthropic/claude-sonnet-5-5"
        );
        assert_eq!(p.get("sonnet"), p.get("anthropic/claude-sonnet-5-5"));
        assert_eq!(p.resolve("claude/opus"), "anthropic/claude-opus-5-5");
        assert_eq!(p.resolve("haiku"), "anthropic/claude-haiku-4-5");
        assert_eq!(p.resolve("openai/gpt-5"), "openai/gpt-5");
        assert_eq!(
            p.source.to_string(),
            format!("the bridge's price snapshot of {}", p.source.bundled)
        );
    }

    #[test]
    fn reported_costs_are_kept_zero_costs_of_priced_models_are_estimated() {
        let mut prices = Prices::bundled();
        prices.by_model.insert(
            "fk/cheap".into(),
            Price {
                input: 1.0,
                output: 2.0,
                cache_read: None,
                cache_write: None,
            },
        );
        prices.by_model.insert("fk/free".into(), Price::default());
        let sonnet = prices.get("anthropic/claude-sonnet-4-5");
        let t = toks(1_000_000, 500_000);
        let r = Usage::priced(t, 0.25, Some("fk/cheap"), &prices, sonnet);
        assert_eq!((r.cost, r.basis), (0.25, CostBasis::Reported));
        assert_eq!(r.claude_equivalent, Some(3.0 + 7.5));
        assert_eq!(r.saved(), Some(10.25));
        let e = Usage::priced(t, 0.0, Some("fk/cheap"), &prices, sonnet);
        assert_eq!((e.cost, e.basis), (2.0, CostBasis::Estimated));
        let f = Usage::priced(t, 0.0, Some("fk/free"), &prices, sonnet);
        assert_eq!((f.cost, f.basis), (0.0, CostBasis::Free));
        assert_eq!(f.budget_cost(), 0.0);
        let u = Usage::priced(t, 0.0, Some("fk/unpriced"), &prices, sonnet);
        assert_eq!((u.cost, u.basis), (0.0, CostBasis::Unknown));
        // Unknown is never free against a budget: it counts at the Claude-equivalent.
        assert_eq!(u.budget_cost(), 10.5);
        let mut sum = r.clone();
        sum.add(&u);
        assert_eq!(sum.basis, CostBasis::Unknown);
        assert_eq!(sum.tokens.input, 2_000_000);
        let msgs = [
            MessageUsage {
                model: Some("fk/cheap".into()),
                tokens: t,
                cost: 0.25,
            },
            MessageUsage {
                model: Some("fk/cheap".into()),
                tokens: t,
                cost: 0.0,
            },
        ];
        let m = Usage::from_messages(&msgs, &prices, sonnet);
        assert_eq!((m.cost, m.basis), (2.25, CostBasis::Estimated));
        assert_eq!(m.claude_equivalent, Some(21.0));
    }

    #[test]
    fn opencode_cache_wins_over_the_snapshot_and_the_config_over_both() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("models.json"),
            r#"{"fk":{"models":{"m":{"cost":{"input":4,"output":8}}}}}"#,
        )
        .unwrap();
        let p = Prices::load(Some(dir.path()), &[]);
        assert!(p.source.cache.is_some(), "{:?}", p.source);
        assert!(
            p.source.to_string().starts_with(&format!(
                "opencode's models cache {} of ",
                dir.path().join("models.json").display()
            )),
            "{}",
            p.source
        );
        assert_eq!(p.get("fk/m").unwrap().input, 4.0);
        // The snapshot still prices what the cache does not name.
        assert!(p.get("anthropic/claude-sonnet-5").is_some());
        let over = Price {
            input: 9.0,
            ..Price::default()
        };
        let p = Prices::load(Some(dir.path()), &[("fk/m".into(), over)]);
        assert_eq!(p.get("fk/m").unwrap().input, 9.0);
        let none = Prices::load(Some(&dir.path().join("absent")), &[]);
        assert!(none.source.cache.is_none());
        // opencode's own config (JSONC) prices its models over the cache, as in opencode.
        let conf = dir.path().join("opencode.jsonc");
        std::fs::write(
            &conf,
            "{\n  // my provider\n  \"provider\": {\"fk\": {\"models\": {\n    \"m\": {\"cost\": {\"input\": 6, \"output\": 7}},\n    \"n\": {\"name\": \"no cost\"}, /* none */\n  }}},\n}\n",
        )
        .unwrap();
        let p = Prices::load_layers(
            Some(dir.path()),
            &[conf.clone(), dir.path().join("absent.json")],
            &[],
        );
        assert_eq!(p.get("fk/m").unwrap().input, 6.0);
        assert_eq!(p.get("fk/n"), None);
        assert_eq!(p.source.opencode_config, (vec![conf.clone()], 1));
        assert!(
            p.source
                .to_string()
                .contains(&format!(", 1 from opencode's config ({})", conf.display())),
            "{}",
            p.source
        );
        // The compare model's alias resolves in the prices loaded, the cache's newest Sonnet
        // included.
        std::fs::create_dir_all(dir.path().join("opencode")).unwrap();
        std::fs::write(
            dir.path().join("opencode").join("models.json"),
            r#"{"anthropic":{"models":{"claude-sonnet-6":{"release_date":"2027-01-01","cost":{"input":1,"output":5}},"claude-sonnet-6-20270101":{"cost":{"input":1,"output":5}}}}}"#,
        )
        .unwrap();
        let dirs = dir.path().to_str().unwrap().to_owned();
        let pr = Pricing::from_lookup(
            |k| match k {
                "XDG_CACHE_HOME" | "XDG_CONFIG_HOME" => Some(dirs.clone()),
                _ => None,
            },
            &[],
        );
        assert_eq!(pr.compare_model(), "anthropic/claude-sonnet-6");
    }
}
