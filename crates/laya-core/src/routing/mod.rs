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
//! sys1rust serves one checkpoint under all three names; [`RoutingConfig::repos`] says what
//! `routing.repo` prints for each. Upstream's `LAYA_EXTRA_MODELS` (more names) is not
//! supported: the names are exactly the three built-in ones.

mod detect;
mod route;
mod text;
mod unicode_table;
mod words;

pub use detect::{analyse, Detection};
pub use route::{
    english_from_code, match_workflow, resolve_model_field, route, unknown_model_detail,
};

use pyjson::{repr_str, write_float, write_str, Object, Value};

/// One of upstream's three checkpoint names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Checkpoint {
    English,
    Multilingual,
    TypedDecisions,
}

impl Checkpoint {
    pub const ALL: [Checkpoint; 3] = [
        Checkpoint::English,
        Checkpoint::Multilingual,
        Checkpoint::TypedDecisions,
    ];

    /// Upstream's `_ALIASES`.
    pub const ALIASES: [(&'static str, Checkpoint); 10] = [
        ("en", Checkpoint::English),
        ("laya", Checkpoint::English),
        ("default", Checkpoint::English),
        ("multi", Checkpoint::Multilingual),
        ("ml", Checkpoint::Multilingual),
        ("laya-multilingual", Checkpoint::Multilingual),
        ("typed", Checkpoint::TypedDecisions),
        ("typed_decisions", Checkpoint::TypedDecisions),
        ("laya-typed-decisions", Checkpoint::TypedDecisions),
        ("decisions", Checkpoint::TypedDecisions),
    ];

    /// The canonical name: `english`, `multilingual`, `typed-decisions`.
    pub fn name(self) -> &'static str {
        match self {
            Checkpoint::English => "english",
            Checkpoint::Multilingual => "multilingual",
            Checkpoint::TypedDecisions => "typed-decisions",
        }
    }

    /// Upstream's `Router.resolve` on a text: trimmed and lower-cased (Python's rules), then
    /// an alias or a name. Note `default` is an alias of `english`.
    pub fn resolve(name: &str) -> Option<Checkpoint> {
        let key = text::py_lower(text::py_strip(name));
        Checkpoint::ALIASES
            .iter()
            .find(|(a, _)| *a == key)
            .map(|(_, c)| *c)
            .or_else(|| Checkpoint::ALL.iter().copied().find(|c| c.name() == key))
    }

    /// A name or alias (upstream's `normalise_name`): the same reading as [`Checkpoint::resolve`].
    pub fn from_name(name: &str) -> Option<Checkpoint> {
        Checkpoint::resolve(name)
    }

    /// Upstream's `_repo_str` of the bundled checkpoint (`repo/subfolder`).
    pub fn bundle_repo(self) -> &'static str {
        match self {
            Checkpoint::English => "convaiinnovations/laya",
            Checkpoint::Multilingual => "convaiinnovations/laya/multilingual",
            Checkpoint::TypedDecisions => "convaiinnovations/laya/typed-decisions",
        }
    }

    fn index(self) -> usize {
        match self {
            Checkpoint::English => 0,
            Checkpoint::Multilingual => 1,
            Checkpoint::TypedDecisions => 2,
        }
    }
}

/// `LAYA_DEFAULT_MODEL` as upstream reads it at start-up: unset or blank → `Ok(None)` (the
/// router's default, `multilingual`); a name or alias → that checkpoint; anything else → the
/// exact exit message `invalid LAYA_DEFAULT_MODEL %r: unknown model %r; …`.
pub fn parse_default_model(raw: Option<&str>) -> Result<Option<Checkpoint>, String> {
    let Some(raw) = raw.filter(|r| !text::py_strip(r).is_empty()) else {
        return Ok(None);
    };
    match Checkpoint::resolve(raw) {
        Some(c) => Ok(Some(c)),
        None => Err(format!(
            "invalid LAYA_DEFAULT_MODEL {}: {}",
            repr_str(text::py_strip(raw)),
            unknown_model_detail(&Value::Str(raw.to_string()))
        )),
    }
}

/// Server-wide routing settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingConfig {
    /// `LAYA_DEFAULT_MODEL`: where letterless and unidentified-Latin states go
    /// (upstream default `multilingual`).
    pub default_model: Checkpoint,
    /// `LAYA_AUTO_TASK`: route exact typed-decisions workflow id sets to `typed-decisions`.
    pub auto_task: bool,
    /// What `routing.repo` prints per checkpoint, indexed english, multilingual,
    /// typed-decisions.
    pub repos: [String; 3],
}

impl Default for RoutingConfig {
    /// Upstream's defaults, with the bundle repos.
    fn default() -> Self {
        RoutingConfig {
            default_model: Checkpoint::Multilingual,
            auto_task: false,
            repos: Checkpoint::ALL.map(|c| c.bundle_repo().to_string()),
        }
    }
}

impl RoutingConfig {
    /// Defaults, with every checkpoint name reporting `repo` (one served checkpoint; upstream
    /// prints the `LAYA_EXTRA_MODELS` source string in that setup, e.g. `"tiny"`).
    pub fn single_source(repo: &str) -> Self {
        RoutingConfig {
            repos: [repo.to_string(), repo.to_string(), repo.to_string()],
            ..Default::default()
        }
    }

    /// One served checkpoint printed as `repo` under every name, with the given
    /// `LAYA_DEFAULT_MODEL` and `LAYA_AUTO_TASK`.
    pub fn single(repo: impl Into<String>, default_model: Checkpoint, auto_task: bool) -> Self {
        let repo = repo.into();
        RoutingConfig {
            default_model,
            auto_task,
            repos: [repo.clone(), repo.clone(), repo],
        }
    }

    pub fn repo(&self, c: Checkpoint) -> &str {
        &self.repos[c.index()]
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
