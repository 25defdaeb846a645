//! The routing decision (upstream `Router._route`) and the body `model` field
//! (upstream `serve._resolve_model`), spec api.md §4.5-4.6 and §6.6.

use super::detect::analyse;
use super::text::{py_lower, py_strip};
use super::{Checkpoint, Routing, RoutingConfig};
use pyjson::{py_repr, py_str, repr_str, Value};

/// The four typed-decisions workflows and their question-id sets (exact set match).
const WORKFLOWS: [(&str, [&str; 5]); 4] = [
    (
        "agent_trace_observability",
        ["action", "needs_review", "outcome", "risk", "urgency"],
    ),
    (
        "customer_service",
        ["action", "category", "churn_risk", "needs_human", "urgency"],
    ),
    (
        "invoice_processing",
        [
            "discrepancy_severity",
            "disposition",
            "duplicate",
            "matches_order",
            "urgency",
        ],
    ),
    (
        "security_incidents",
        [
            "credential_compromise",
            "disposition",
            "severity",
            "true_positive",
            "urgency",
        ],
    ),
];

/// Language codes that name no language (`LANG=C`, `C.UTF-8`, ISO 639-2 `und`/`zxx`/`mul`):
/// they fall through to the next routing signal.
const LANGUAGE_AGNOSTIC: [&str; 5] = ["c", "posix", "und", "zxx", "mul"];
const ENGLISH_SUBTAGS: [&str; 3] = ["en", "eng", "english"];

/// The bundle id that means "let the router choose" rather than pinning English.
const BUNDLE_REPO: &str = "convaiinnovations/laya";
/// The standalone Hub ids a client may name to pin a checkpoint.
const PUBLISHED: [(&str, &str); 2] = [
    ("convaiinnovations/laya-multilingual", "multilingual"),
    ("convaiinnovations/laya-typed-decisions", "typed-decisions"),
];

/// The workflow whose question-id set equals `ids`, if any (`match_typed_decisions_workflow`).
pub fn match_workflow(ids: &[&str]) -> Option<&'static str> {
    let mut set: Vec<&str> = ids.to_vec();
    set.sort_unstable();
    set.dedup();
    WORKFLOWS
        .iter()
        .find(|(_, sig)| set.as_slice() == sig.as_slice())
        .map(|(name, _)| *name)
}

/// `_english_from_code`: whether a language code names English (`Some(true)`), another
/// language (`Some(false)`), or nothing usable (`None`: blank, `C`, `POSIX`, `und`, …).
/// `en_US.UTF-8` reads as `en`.
pub fn english_from_code(code: &str) -> Option<bool> {
    let code = py_lower(py_strip(code));
    if code.is_empty() {
        return None;
    }
    let code = code.split('.').next().unwrap_or("");
    let primary = code.replace('_', "-");
    let primary = primary.split('-').next().unwrap_or("");
    if primary.is_empty() || LANGUAGE_AGNOSTIC.contains(&primary) {
        return None;
    }
    Some(ENGLISH_SUBTAGS.contains(&primary))
}

/// Python truthiness of a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Int(i) => i.as_i64() != Some(0),
        Value::Float(x) => *x != 0.0,
        Value::Str(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Upstream's `Router.resolve` failure text for `name` (`%r` of the value as sent), listing
/// the registry of `cfg`.
pub fn unknown_model_detail(name: &Value, cfg: &RoutingConfig) -> String {
    unknown_model_detail_in(name, &cfg.sorted_names())
}

/// [`unknown_model_detail`] over the sorted registry `names`.
pub(super) fn unknown_model_detail_in(name: &Value, names: &[&str]) -> String {
    let mut aliases: Vec<&str> = Checkpoint::ALIASES.iter().map(|(a, _)| *a).collect();
    aliases.sort_unstable();
    let list = |items: &[&str]| {
        format!(
            "[{}]",
            items
                .iter()
                .map(|s| repr_str(s))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    format!(
        "unknown model {}; choose one of {} (or an alias: {})",
        py_repr(name),
        list(names),
        list(&aliases)
    )
}

/// Step 11 of the request pipeline (spec §4.5): the body's `model` field as a pin, `None` to
/// let the router choose, or the exact 422 detail for a path or an unknown Hub id.
///
/// Pass `Value::Null` when the key is absent. Names are looked up in `cfg`'s registry (the
/// built-ins and any registered beside them).
pub fn resolve_model_field(
    model: &Value,
    cfg: &RoutingConfig,
) -> Result<Option<Checkpoint>, String> {
    if !truthy(model) {
        return Ok(None);
    }
    let raw = py_str(model);
    let text = py_strip(&raw);
    let lower = py_lower(text);
    if let Some((_, name)) = PUBLISHED.iter().find(|(id, _)| *id == lower) {
        return Ok(Some(Checkpoint::new(name)));
    }
    if lower == BUNDLE_REPO {
        return Ok(None);
    }
    if let Some(c) = cfg.resolve(&raw) {
        return Ok(Some(c));
    }
    // A filesystem path or a Hub id names a checkpoint this server cannot load: refuse it.
    // Anything else (`jev-1`, `auto`, `5`) is a client's own model id: auto-route.
    let names_source = text.starts_with(['.', '~']) || text.contains(['/', '\\']);
    if names_source {
        return Err(format!(
            "{}, or omit model to let the router choose",
            unknown_model_detail(model, cfg)
        ));
    }
    Ok(None)
}

/// Upstream's routing decision for one state (`Router._route` as `laya-serve` calls it), spec
/// §4.6. Precedence: `pin` (the resolved `model` field), `task`, the typed-decisions workflow
/// (only with `auto_task`), `lang`, `lang_guess`, then detection on the state.
///
/// `question_ids` are the request's question ids; `task` is the body's raw value (`null`
/// counts as absent); `lang`/`lang_guess` are the validated strings. The batch route calls
/// this once per state with the same controls, as upstream's `route_batch` does.
///
/// Errors: an unknown `task`, with upstream's 422 detail (it is raised inside inference, so
/// after every pre-inference check).
pub fn route(
    state: &Value,
    question_ids: &[&str],
    pin: Option<&Checkpoint>,
    task: Option<&Value>,
    lang: Option<&str>,
    lang_guess: Option<&str>,
    cfg: &RoutingConfig,
) -> Result<Routing, String> {
    let decided = |model: Checkpoint, reason: String, workflow: Option<&'static str>| Routing {
        repo: cfg.repo(&model).to_string(),
        model,
        reason,
        detection: None,
        workflow,
    };
    if let Some(model) = pin {
        let reason = format!("explicit model={}", repr_str(model.name()));
        return Ok(decided(model.clone(), reason, None));
    }
    if let Some(task) = task.filter(|t| !t.is_null()) {
        let text = py_str(task);
        let model = if py_lower(&text).replace('-', "_") == "typed_decisions" {
            cfg.resolve("typed-decisions")
        } else {
            cfg.resolve(&text)
        };
        return match model {
            Some(m) => Ok(decided(m, format!("explicit task={}", py_repr(task)), None)),
            None => Err(unknown_model_detail(task, cfg)),
        };
    }
    let workflow = match_workflow(question_ids);
    if let Some(w) = workflow.filter(|_| cfg.auto_task) {
        let reason = format!(
            "question ids match the {} typed-decisions workflow",
            repr_str(w)
        );
        return Ok(decided(Checkpoint::typed_decisions(), reason, Some(w)));
    }
    if let Some(code) = lang {
        if let Some(english) = english_from_code(code) {
            let model = if english {
                Checkpoint::english()
            } else {
                Checkpoint::multilingual()
            };
            return Ok(decided(
                model,
                format!("explicit lang={}", repr_str(code)),
                workflow,
            ));
        }
    }
    if let Some(code) = lang_guess {
        if let Some(english) = english_from_code(code) {
            let (model, what) = if english {
                (Checkpoint::english(), "English")
            } else {
                (Checkpoint::multilingual(), "non-English")
            };
            let reason = format!("lang_guess: the caller identified this as {what} text");
            return Ok(decided(model, reason, workflow));
        }
    }

    let det = analyse(state);
    let (model, reason) = if det.script == "unknown" {
        let m = cfg.default_model.clone();
        let reason = format!("no letters detected in state; using default ({m})");
        (m, reason)
    } else if det.script != "latin" {
        let pct = 100.0 * det.non_latin_fraction;
        (
            Checkpoint::multilingual(),
            format!("non-Latin script ({}, {pct:.0}% of letters); the English checkpoint cannot read it", det.script),
        )
    } else if !det.is_english {
        let reason = match (&det.mixed_segment, det.language) {
            (Some(seg), lang) if !seg.is_empty() => format!(
                "Latin script, mostly English, but a line or field reads as {} ({}); the English checkpoint cannot read it",
                lang.map_or_else(|| "None".to_string(), repr_str),
                repr_str(super::text::prefix(seg, 60)),
            ),
            (_, Some(lang)) => format!("Latin script but language looks like {}, not English", repr_str(lang)),
            _ => format!(
                "Latin script, language not identified but {:.0}% non-English letters; not safe for the English checkpoint",
                100.0 * det.diacritic_rate
            ),
        };
        (Checkpoint::multilingual(), reason)
    } else if det.language_undecided {
        let m = cfg.default_model.clone();
        let reason = format!(
            "Latin script, language not identified and no non-English letters; using default ({m})"
        );
        (m, reason)
    } else {
        (Checkpoint::english(), "English Latin text".to_string())
    };
    Ok(Routing {
        repo: cfg.repo(&model).to_string(),
        model,
        reason,
        detection: Some(det),
        workflow,
    })
}
