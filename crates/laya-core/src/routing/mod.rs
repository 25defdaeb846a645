//! Checkpoint routing as upstream laya-serve 0.4.15 does it (`laya/router.py` and
//! `laya/lang.py`), spec api.md §4.5, §4.6, §6.6: which of `english`, `multilingual` and
//! `typed-decisions` a request goes to, why, and what language detection saw, rendered as the
//! response's `routing` block.
//!
//! * [`resolve_model_field`]: the body's `model` field (pipeline step 11, may be a 422).
//! * [`route`]: the decision for one state (the batch route calls it once per state); an
//!   unknown `task` is its error (a 422 raised inside inference).
//! * [`Routing::write_json`]: the exact `routing` JSON text.
//! * [`analyse`]: the detector alone.
//!
//! [`RoutingConfig`] is the registry: the three built-in names and any registered beside them
//! (upstream's `LAYA_EXTRA_MODELS`), each with what `routing.repo` prints for it.

mod detect;
mod route;
mod text;
mod unicode_table;
mod words;

pub use detect::{analyse, Detection};
use route::unknown_model_detail_in;
pub use route::{
    english_from_code, match_workflow, resolve_model_field, route, unknown_model_detail,
};

use std::sync::Arc;

use pyjson::{repr_str, write_float, write_str, Object, Value};

/// The canonical name of a checkpoint the router knows: one of the three built-in names, or
/// one registered beside them (upstream's `LAYA_EXTRA_MODELS`). Trimmed, lower-cased, aliases
/// resolved.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Checkpoint(Arc<str>);

impl Checkpoint {
    /// The built-in names, in upstream's registry order.
    pub const BUILT_IN: [&'static str; 3] = ["english", "multilingual", "typed-decisions"];

    /// Upstream's `_ALIASES`: alias -> built-in name.
    pub const ALIASES: [(&'static str, &'static str); 10] = [
        ("en", "english"),
        ("laya", "english"),
        ("default", "english"),
        ("multi", "multilingual"),
        ("ml", "multilingual"),
        ("laya-multilingual", "multilingual"),
        ("typed", "typed-decisions"),
        ("typed_decisions", "typed-decisions"),
        ("laya-typed-decisions", "typed-decisions"),
        ("decisions", "typed-decisions"),
    ];

    pub fn english() -> Checkpoint {
        Checkpoint("english".into())
    }

    pub fn multilingual() -> Checkpoint {
        Checkpoint("multilingual".into())
    }

    pub fn typed_decisions() -> Checkpoint {
        Checkpoint("typed-decisions".into())
    }

    /// The three built-in checkpoints, in registry order.
    pub fn built_in() -> [Checkpoint; 3] {
        [
            Checkpoint::english(),
            Checkpoint::multilingual(),
            Checkpoint::typed_decisions(),
        ]
    }

    /// A name as it stands, already canonical (a registry entry's).
    pub fn new(name: &str) -> Checkpoint {
        Checkpoint(name.into())
    }

    /// The canonical name.
    pub fn name(&self) -> &str {
        &self.0
    }

    /// Whether this is one of the three built-in names.
    pub fn is_built_in(&self) -> bool {
        Checkpoint::BUILT_IN.contains(&self.name())
    }

    /// A built-in name or alias (upstream's `normalise_name`, which knows the built-ins only).
    pub fn from_name(name: &str) -> Option<Checkpoint> {
        let key = canonical_name(name);
        Checkpoint::BUILT_IN
            .contains(&key.as_str())
            .then(|| Checkpoint(key.into()))
    }

    /// Upstream's `_repo_str` of a built-in bundled checkpoint (`repo/subfolder`).
    pub fn bundle_repo(name: &str) -> Option<&'static str> {
        match name {
            "english" => Some("convaiinnovations/laya"),
            "multilingual" => Some("convaiinnovations/laya/multilingual"),
            "typed-decisions" => Some("convaiinnovations/laya/typed-decisions"),
            _ => None,
        }
    }
}

impl std::fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Upstream's `canonical_name`: `str(name).strip().lower()`, then an alias's built-in name.
/// Whether the result names a checkpoint is the registry's question.
pub fn canonical_name(name: &str) -> String {
    let key = text::py_lower(text::py_strip(name));
    Checkpoint::ALIASES
        .iter()
        .find(|(alias, _)| *alias == key)
        .map_or(key, |(_, name)| (*name).to_owned())
}

/// `LAYA_DEFAULT_MODEL` as upstream reads it at start-up: unset or blank → `Ok(None)` (the
/// router's default, `multilingual`); a built-in name or alias, or a name `extra` registers
/// → that checkpoint; anything else → the exact exit message
/// `invalid LAYA_DEFAULT_MODEL %r: unknown model %r; …` (which lists the built-ins only).
pub fn parse_default_model(
    raw: Option<&str>,
    extra: &[Checkpoint],
) -> Result<Option<Checkpoint>, String> {
    let Some(raw) = raw.filter(|r| !text::py_strip(r).is_empty()) else {
        return Ok(None);
    };
    if let Some(c) = Checkpoint::from_name(raw) {
        return Ok(Some(c));
    }
    let key = canonical_name(raw);
    if let Some(c) = extra.iter().find(|c| c.name() == key) {
        return Ok(Some(c.clone()));
    }
    let built_in: Vec<&str> = Checkpoint::BUILT_IN.to_vec();
    Err(format!(
        "invalid LAYA_DEFAULT_MODEL {}: {}",
        repr_str(text::py_strip(raw)),
        unknown_model_detail_in(&Value::Str(raw.to_string()), &built_in)
    ))
}

/// A registry entry: a checkpoint and what `routing.repo` prints for it (upstream's
/// `_repo_str` of its source: the repo id, `repo/subfolder`, or the path as configured).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub name: Checkpoint,
    pub repo: String,
}

/// Server-wide routing settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingConfig {
    /// `LAYA_DEFAULT_MODEL`: where letterless and unidentified-Latin states go
    /// (upstream default `multilingual`).
    pub default_model: Checkpoint,
    /// `LAYA_AUTO_TASK`: route exact typed-decisions workflow id sets to `typed-decisions`.
    pub auto_task: bool,
    /// The registry in upstream's order: the three built-ins, then the names registered
    /// beside them. Always holds the built-ins.
    pub models: Vec<Registered>,
}

impl Default for RoutingConfig {
    /// Upstream's defaults, with the bundle repos.
    fn default() -> Self {
        RoutingConfig {
            default_model: Checkpoint::multilingual(),
            auto_task: false,
            models: Checkpoint::built_in()
                .into_iter()
                .map(|name| {
                    let repo = Checkpoint::bundle_repo(name.name()).unwrap_or_default();
                    Registered {
                        name,
                        repo: repo.to_owned(),
                    }
                })
                .collect(),
        }
    }
}

impl RoutingConfig {
    /// Defaults, with every built-in name reporting `repo` (one served checkpoint; upstream
    /// prints the `LAYA_EXTRA_MODELS` source string in that setup, e.g. `"tiny"`).
    pub fn single_source(repo: &str) -> Self {
        RoutingConfig::single(repo, Checkpoint::multilingual(), false)
    }

    /// One served checkpoint printed as `repo` under every built-in name, with the given
    /// `LAYA_DEFAULT_MODEL` and `LAYA_AUTO_TASK`.
    pub fn single(repo: impl Into<String>, default_model: Checkpoint, auto_task: bool) -> Self {
        let repo = repo.into();
        RoutingConfig {
            default_model,
            auto_task,
            models: Checkpoint::built_in()
                .into_iter()
                .map(|name| Registered {
                    name,
                    repo: repo.clone(),
                })
                .collect(),
        }
    }

    /// Upstream's `Router.resolve`: the registered checkpoint `name` (any case, trimmed, an
    /// alias) names, if any.
    pub fn resolve(&self, name: &str) -> Option<Checkpoint> {
        let key = canonical_name(name);
        self.models
            .iter()
            .find(|m| m.name.name() == key)
            .map(|m| m.name.clone())
    }

    /// What `routing.repo` prints for `c`.
    pub fn repo(&self, c: &Checkpoint) -> &str {
        self.models
            .iter()
            .find(|m| &m.name == c)
            .map_or("", |m| m.repo.as_str())
    }

    /// The registered names, sorted (as upstream's messages list them).
    pub fn sorted_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.models.iter().map(|m| m.name.name()).collect();
        names.sort_unstable();
        names
    }
}

/// A routing decision: the response's `routing` block.
#[derive(Debug, Clone, PartialEq)]
pub struct Routing {
    pub model: Checkpoint,
    pub repo: String,
    pub reason: String,
    /// `None` whenever the decision did not read the state (model, task, workflow, lang,
    /// lang_guess).
    pub detection: Option<Detection>,
    /// The matched typed-decisions workflow (reported even without `auto_task`), except on the
    /// model and task branches.
    pub workflow: Option<&'static str>,
}

impl Routing {
    /// The language upstream hands the checkpoint when the request sent no `lang`: the
    /// detected one (`effective_lang = lang or detection.language`).
    pub fn detected_language(&self) -> Option<&'static str> {
        self.detection.as_ref().and_then(|d| d.language)
    }

    /// Appends the block as upstream's response encoder writes it (compact separators,
    /// `ensure_ascii=False`, Python float repr), keys `model, repo, reason, detection,
    /// workflow`.
    pub fn write_json(&self, out: &mut String) {
        out.push_str("{\"model\":");
        write_str(out, self.model.name());
        out.push_str(",\"repo\":");
        write_str(out, &self.repo);
        out.push_str(",\"reason\":");
        write_str(out, &self.reason);
        out.push_str(",\"detection\":");
        match &self.detection {
            Some(d) => write_detection(out, d),
            None => out.push_str("null"),
        }
        out.push_str(",\"workflow\":");
        write_opt_str(out, self.workflow);
        out.push('}');
    }

    /// [`Routing::write_json`] as a new string.
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }

    /// The block as a [`Value`] with the same key order, for callers that assemble a value
    /// tree (`pyjson::dumps` of it equals [`Routing::to_json`]).
    pub fn to_value(&self) -> Value {
        let mut o = Object::new();
        o.insert("model".into(), self.model.name().into());
        o.insert("repo".into(), self.repo.as_str().into());
        o.insert("reason".into(), self.reason.as_str().into());
        let det = match &self.detection {
            None => Value::Null,
            Some(d) => {
                let mut m = Object::new();
                m.insert("script".into(), d.script.into());
                let prof: Object = d
                    .script_profile
                    .iter()
                    .map(|(k, v)| (k.to_string(), Value::Float(*v)))
                    .collect();
                m.insert("script_profile".into(), prof.into());
                m.insert(
                    "language".into(),
                    d.language.map_or(Value::Null, Value::from),
                );
                m.insert("is_english".into(), d.is_english.into());
                m.insert("language_undecided".into(), d.language_undecided.into());
                m.insert("diacritic_rate".into(), Value::Float(d.diacritic_rate));
                m.insert(
                    "non_latin_fraction".into(),
                    Value::Float(d.non_latin_fraction),
                );
                m.insert(
                    "mixed_segment".into(),
                    d.mixed_segment.as_deref().map_or(Value::Null, Value::from),
                );
                m.into()
            }
        };
        o.insert("detection".into(), det);
        o.insert(
            "workflow".into(),
            self.workflow.map_or(Value::Null, Value::from),
        );
        Value::Object(o)
    }
}

fn write_opt_str(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => write_str(out, s),
        None => out.push_str("null"),
    }
}

fn write_bool(out: &mut String, b: bool) {
    out.push_str(if b { "true" } else { "false" });
}

/// The `detection` object. Every float is finite (fractions of counts, rounded rates), so
/// Python's repr is the JSON text.
fn write_detection(out: &mut String, d: &Detection) {
    out.push_str("{\"script\":");
    write_str(out, d.script);
    out.push_str(",\"script_profile\":{");
    for (i, (name, frac)) in d.script_profile.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str(out, name);
        out.push(':');
        write_float(out, *frac);
    }
    out.push_str("},\"language\":");
    write_opt_str(out, d.language);
    out.push_str(",\"is_english\":");
    write_bool(out, d.is_english);
    out.push_str(",\"language_undecided\":");
    write_bool(out, d.language_undecided);
    out.push_str(",\"diacritic_rate\":");
    write_float(out, d.diacritic_rate);
    out.push_str(",\"non_latin_fraction\":");
    write_float(out, d.non_latin_fraction);
    out.push_str(",\"mixed_segment\":");
    write_opt_str(out, d.mixed_segment.as_deref());
    out.push('}');
}

#[cfg(test)]
mod tests;
