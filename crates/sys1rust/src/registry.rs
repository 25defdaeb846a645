//! The checkpoints `serve` routes between when no `--model` is given: upstream's three
//! built-in names plus `LAYA_EXTRA_MODELS`, each with its source, parsed and refused exactly as
//! upstream's `serve._extra_models_option` and `Router._add` do (spec api.md §12.1), and the
//! [`Loader`] that builds one on the engine worker.

use std::path::{Path, PathBuf};

use laya_core::agent::Agent;
use laya_core::checkpoints::{Loaded, Loader};
use laya_core::engine::Forward;
use laya_core::routing::{canonical_name, Checkpoint, Registered, RoutingConfig};
use pyjson::{repr_str, Value};

use crate::cli::{EngineArgs, RouterArgs};
use crate::engine::AnyForward;

/// Where a registered checkpoint's files come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A model name laya-hub knows, or any Hugging Face repo id.
    Hub(String),
    /// A local checkpoint directory.
    Dir(PathBuf),
    /// A subfolder of a Hugging Face repo (upstream's `["repo", "subfolder"]`).
    HubSubfolder { repo: String, subfolder: String },
}

/// One registered checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: Checkpoint,
    pub source: Source,
    /// What `routing.repo` prints (upstream's `_repo_str` of the source).
    pub label: String,
}

/// The registry, in upstream's order: the built-ins, then the extra names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registry {
    pub entries: Vec<Entry>,
}

/// The registry of the command line: the built-ins, re-pointed or joined by
/// `--extra-models` / `LAYA_EXTRA_MODELS`, whose relative paths are read from `base` (the
/// working directory). The error is upstream's exit message.
pub fn registry(args: &RouterArgs, base: &Path) -> Result<Registry, String> {
    let mut entries: Vec<Entry> = Checkpoint::built_in()
        .into_iter()
        .map(|name| Entry {
            label: Checkpoint::bundle_repo(name.name())
                .unwrap_or_default()
                .to_owned(),
            source: Source::Hub(name.name().to_owned()),
            name,
        })
        .collect();
    let raw = args.extra_models.as_deref().map(py_strip).unwrap_or("");
    if raw.is_empty() {
        return Ok(Registry { entries });
    }
    let parsed = pyjson::loads(raw.as_bytes()).map_err(|e| {
        format!(
            "invalid LAYA_EXTRA_MODELS: not a JSON object ({})",
            json_error_text(raw, &e)
        )
    })?;
    let Value::Object(map) = parsed.value else {
        return Err(format!(
            "invalid LAYA_EXTRA_MODELS: a JSON object {{name: source}}, got {}",
            parsed.value.type_name()
        ));
    };
    let mut sources = Vec::new();
    for (name, source) in map.iter() {
        let source = match source {
            Value::Str(s) => (s.clone(), None),
            Value::Array(items) => {
                let part = |i: usize| items.get(i).map(pyjson::py_str);
                (part(0).unwrap_or_else(|| "None".into()), part(1))
            }
            other => {
                return Err(format!(
                    "invalid LAYA_EXTRA_MODELS: source for {} must be a repo id, a local path, or a [repo, subfolder] pair; got {}",
                    repr_str(name),
                    other.type_name()
                ))
            }
        };
        sources.push((name.to_owned(), source));
    }
    for (name, (repo, subfolder)) in sources {
        let key = canonical_name(&name);
        if !Checkpoint::BUILT_IN.contains(&key.as_str()) {
            check_name(&name, &key)?;
        }
        let repo = expand_home(&repo);
        let (label, source) = match subfolder {
            None => (repo.clone(), local_or_hub(&repo, base)),
            Some(sub) => {
                let dir = base.join(&repo).join(&sub);
                let source = if dir.is_dir() {
                    Source::Dir(dir)
                } else {
                    Source::HubSubfolder {
                        repo: repo.clone(),
                        subfolder: sub.clone(),
                    }
                };
                (format!("{repo}/{sub}"), source)
            }
        };
        let entry = Entry {
            name: Checkpoint::new(&key),
            source,
            label,
        };
        match entries.iter_mut().find(|e| e.name.name() == key) {
            Some(existing) => *existing = entry,
            None => entries.push(entry),
        }
    }
    Ok(Registry { entries })
}

/// `Router._add`'s rule for a name beside the built-ins.
fn check_name(name: &str, key: &str) -> Result<(), String> {
    let mut chars = key.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
    if !(first_ok && rest_ok) {
        return Err(format!(
            "invalid checkpoint name {}: use lowercase letters, digits, '.', '_' or '-', starting with a letter or digit",
            repr_str(name)
        ));
    }
    if key == "auto" {
        return Err(format!(
            "invalid checkpoint name {}: 'auto' means automatic routing in every model= argument",
            repr_str(name)
        ));
    }
    Ok(())
}

/// A string source: a directory when one is there (relative to `base`), else a repo id.
fn local_or_hub(source: &str, base: &Path) -> Source {
    let dir = base.join(source);
    if dir.is_dir() {
        Source::Dir(dir)
    } else if source.contains('/') && !source.starts_with(['/', '.']) && !dir.exists() {
        Source::Hub(source.to_owned())
    } else {
        Source::Dir(dir)
    }
}

/// Python's `os.path.expanduser` on a source that starts with `~`.
fn expand_home(source: &str) -> String {
    match (source.strip_prefix('~'), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            format!("{}{rest}", home.to_string_lossy())
        }
        _ => source.to_owned(),
    }
}

/// Python `str.strip()`.
fn py_strip(s: &str) -> &str {
    s.trim_matches(laya_core::question::py_isspace)
}

/// CPython's `JSONDecodeError` text: `<msg>: line L column C (char N)`, positions counted in
/// characters of `text`.
fn json_error_text(text: &str, e: &pyjson::JsonError) -> String {
    match e {
        pyjson::JsonError::Syntax { message, pos } => {
            let head = text.get(..*pos).unwrap_or(text);
            let char_pos = head.chars().count();
            let line = head.matches('\n').count() + 1;
            let col = match head.rfind('\n') {
                Some(nl) => head[nl + 1..].chars().count() + 1,
                None => char_pos + 1,
            };
            format!("{message}: line {line} column {col} (char {char_pos})")
        }
        other => other.to_string(),
    }
}

impl Registry {
    /// The routing registry: every name with what `routing.repo` prints for it.
    pub fn routing(&self, default_model: Checkpoint, auto_task: bool) -> RoutingConfig {
        RoutingConfig {
            default_model,
            auto_task,
            models: self
                .entries
                .iter()
                .map(|e| Registered {
                    name: e.name.clone(),
                    repo: e.label.clone(),
                })
                .collect(),
        }
    }

    /// The names beside the built-ins (a `LAYA_DEFAULT_MODEL` may name one).
    pub fn extra_names(&self) -> Vec<Checkpoint> {
        self.entries
            .iter()
            .filter(|e| !e.name.is_built_in())
            .map(|e| e.name.clone())
            .collect()
    }

    /// What `LAYA_PRELOAD` loads: the `LAYA_MODELS` list (names or aliases), else everything
    /// registered. An unknown name is upstream's `unknown model` error.
    pub fn preload_names(&self, models: Option<&str>) -> Result<Vec<Checkpoint>, String> {
        let listed: Vec<&str> = models
            .map(|m| {
                m.split(',')
                    .map(py_strip)
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if listed.is_empty() {
            return Ok(self.entries.iter().map(|e| e.name.clone()).collect());
        }
        let routing = self.routing(Checkpoint::multilingual(), false);
        listed
            .into_iter()
            .map(|name| {
                routing.resolve(name).ok_or_else(|| {
                    laya_core::routing::unknown_model_detail(&Value::Str(name.into()), &routing)
                })
            })
            .collect()
    }

    fn source(&self, name: &Checkpoint) -> Option<&Source> {
        self.entries
            .iter()
            .find(|e| &e.name == name)
            .map(|e| &e.source)
    }

    /// The loader the engine worker builds checkpoints with: files through the hub (verified,
    /// downloaded once; never with `offline`), then the engine and the tokenizer, warmed.
    pub fn loader(self, engine: EngineArgs, offline: bool) -> Loader<AnyForward> {
        // What this server has loaded stays marked as in use (for `sys1rust rm`) while the
        // loader, and so the server, lives.
        // One guard per repo, however often it is evicted and loaded again.
        let held: std::sync::Mutex<std::collections::HashMap<String, laya_hub::InUse>> =
            std::sync::Mutex::default();
        Box::new(move |name: &Checkpoint| {
            let source = self
                .source(name)
                .ok_or_else(|| format!("{name} is not registered"))?;
            let (dir, revision) = match source {
                Source::Dir(dir) => (dir.clone(), None),
                Source::Hub(spec) => {
                    let hub = laya_hub::Hub::from_env().map_err(|e| e.to_string())?;
                    let progress = laya_hub::stderr_progress();
                    let resolved = hub
                        .resolve(spec, None, offline, &*progress)
                        .map_err(|e| format!("{e:#}"))?;
                    let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(repo) = resolved.repo.clone().filter(|r| !held.contains_key(r)) {
                        if let Some(guard) = hub.hold(&resolved).map_err(|e| e.to_string())? {
                            held.insert(repo, guard);
                        }
                    }
                    (resolved.dir, resolved.revision)
                }
                Source::HubSubfolder { repo, subfolder } => {
                    return Err(format!(
                        "{repo} with subfolder {subfolder}: only a local directory can be a subfolder source"
                    ))
                }
            };
            let started = std::time::Instant::now();
            let mut agent: Agent<AnyForward> =
                engine.load_agent(&dir).map_err(|e| format!("{e:#}"))?;
            agent.forward.warm().map_err(|e| e.to_string())?;
            tracing::info!(
                checkpoint = %name,
                dir = %dir.display(),
                ms = started.elapsed().as_millis() as u64,
                "checkpoint ready"
            );
            Ok(Loaded { agent, revision })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &str) -> RouterArgs {
        RouterArgs {
            extra_models: Some(extra.into()),
            preload: true,
            models: None,
            max_loaded: 2,
            idle_unload_seconds: 0.0,
        }
    }

    fn labels(r: &Registry) -> Vec<(String, String)> {
        r.entries
            .iter()
            .map(|e| (e.name.name().to_owned(), e.label.clone()))
            .collect()
    }

    #[test]
    fn extra_models_as_upstream_reads_them() {
        let base = Path::new("/nonexistent-base");
        let r = registry(
            &args(r#"{"EN": "tiny", "papers": ["org/repo", "sub"], "x.y-1": "org/other"}"#),
            base,
        )
        .expect("valid");
        assert_eq!(
            labels(&r),
            [
                ("english", "tiny"),
                ("multilingual", "convaiinnovations/laya/multilingual"),
                ("typed-decisions", "convaiinnovations/laya/typed-decisions"),
                ("papers", "org/repo/sub"),
                ("x.y-1", "org/other"),
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
        assert_eq!(r.entries[0].source, Source::Dir(base.join("tiny")));
        assert_eq!(r.entries[4].source, Source::Hub("org/other".into()));
        assert_eq!(
            r.extra_names(),
            [Checkpoint::new("papers"), Checkpoint::new("x.y-1")]
        );
    }

    /// The exit messages of spec api.md §12.1, as `serve._extra_models_option` and
    /// `Router._add` word them.
    #[test]
    fn malformed_extra_models_are_refused_with_upstreams_text() {
        let err = |raw: &str| registry(&args(raw), Path::new(".")).expect_err("refused");
        assert_eq!(
            err("{"),
            "invalid LAYA_EXTRA_MODELS: not a JSON object (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"
        );
        assert_eq!(
            err("[1]"),
            "invalid LAYA_EXTRA_MODELS: a JSON object {name: source}, got list"
        );
        assert_eq!(
            err(r#"{"a": 5}"#),
            "invalid LAYA_EXTRA_MODELS: source for 'a' must be a repo id, a local path, or a [repo, subfolder] pair; got int"
        );
        assert_eq!(
            err(r#"{"Bad Name": "x"}"#),
            "invalid checkpoint name 'Bad Name': use lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"
        );
        assert_eq!(
            err(r#"{"auto": "x"}"#),
            "invalid checkpoint name 'auto': 'auto' means automatic routing in every model= argument"
        );
        // Blank is unset.
        assert_eq!(
            registry(&args("  "), Path::new(".")).map(|r| r.entries.len()),
            Ok(3)
        );
    }

    #[test]
    fn preload_list() {
        let r = registry(&args(r#"{"papers": "x"}"#), Path::new(".")).expect("valid");
        assert_eq!(r.preload_names(None).map(|v| v.len()), Ok(4));
        assert_eq!(
            r.preload_names(Some(" en , PAPERS,")),
            Ok(vec![Checkpoint::english(), Checkpoint::new("papers")])
        );
        assert!(r
            .preload_names(Some("nope"))
            .is_err_and(|e| e.starts_with("unknown model 'nope'; choose one of ['english', 'multilingual', 'papers', 'typed-decisions']")));
    }
}
