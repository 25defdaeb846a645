//! What a `--model` value means: a known model name (or alias), a Hugging Face repo id, or a
//! local checkpoint directory. Known names win, then an existing directory (as
//! `from_pretrained` does), then a repo id.

use std::path::{Path, PathBuf};

use crate::error::HubError;
use crate::models::{KnownModel, ModelTable};
use crate::repo_id::is_repo_id;

/// A parsed `--model` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// A name from the model table, or the repo id of one (its pin applies).
    Known(KnownModel),
    /// Any other repo id, `org/name`; verified against the hub's own hashes, not a pin.
    Repo(String),
    /// A checkpoint directory used in place.
    Local(PathBuf),
}

impl ModelSpec {
    /// Interprets `spec` against `table`.
    pub fn parse(table: &ModelTable, spec: &str) -> Result<ModelSpec, HubError> {
        if let Some(m) = table.find(spec) {
            return Ok(ModelSpec::Known(m.clone()));
        }
        let path = Path::new(spec);
        if !spec.is_empty() && path.is_dir() {
            return Ok(ModelSpec::Local(path.to_path_buf()));
        }
        if is_repo_id(spec) {
            return Ok(match table.by_repo(spec) {
                Some(m) => ModelSpec::Known(m.clone()),
                None => ModelSpec::Repo(spec.to_owned()),
            });
        }
        if looks_like_path(spec) {
            return Err(HubError::LocalNotFound(path.to_path_buf()));
        }
        let known: Vec<String> = table
            .models()
            .iter()
            .map(|m| match m.aliases.as_slice() {
                [] => m.name.clone(),
                aliases => format!("{} ({})", m.name, aliases.join(", ")),
            })
            .collect();
        Err(HubError::UnknownModel {
            spec: spec.to_owned(),
            known: known.join(", "),
        })
    }
}

fn looks_like_path(s: &str) -> bool {
    s.starts_with(['/', '.', '~'])
        || s.ends_with('/')
        || s.contains('\\')
        || s.matches('/').count() > 1
        || Path::new(s).is_absolute()
}

/// A revision as the hub accepts it: a commit (prefix), a branch or a tag. Refused: empty,
/// whitespace or control characters, `..` and a leading `/`, since a branch name becomes a
/// path under `refs/`.
pub(crate) fn check_revision(rev: &str) -> Result<(), HubError> {
    let ok = !rev.is_empty()
        && rev.len() <= 256
        && !rev.starts_with('/')
        && !rev.ends_with('/')
        && !rev.contains("//")
        && rev.split('/').all(|seg| seg != "." && seg != "..")
        && !rev
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '\\');
    if ok {
        Ok(())
    } else {
        Err(HubError::InvalidRevision(rev.to_owned()))
    }
}

/// Whether `rev` can only be a commit or a commit prefix (7–40 lowercase hex).
pub(crate) fn is_commit_prefix(rev: &str) -> bool {
    (7..=40).contains(&rev.len()) && rev.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_repos_and_paths() {
        let t = ModelTable::builtin();
        let known = |s: &str| match ModelSpec::parse(&t, s) {
            Ok(ModelSpec::Known(m)) => m.name,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(known("typed-decisions"), "typed-decisions");
        assert_eq!(known("ML"), "multilingual");
        assert_eq!(known("convaiinnovations/laya"), "english");
        assert_eq!(
            ModelSpec::parse(&t, "someone/other-model").ok(),
            Some(ModelSpec::Repo("someone/other-model".into()))
        );
        let dir = std::env::temp_dir();
        let dir_s = dir.to_str().expect("temp dir is UTF-8");
        assert_eq!(
            ModelSpec::parse(&t, dir_s).ok(),
            Some(ModelSpec::Local(dir.clone()))
        );
        assert!(matches!(
            ModelSpec::parse(&t, "./no/such/dir"),
            Err(HubError::LocalNotFound(_))
        ));
        assert!(matches!(
            ModelSpec::parse(&t, "nonsense"),
            Err(HubError::UnknownModel { .. })
        ));
        let msg = ModelSpec::parse(&t, "nonsense")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            msg.contains("typed-decisions (typed, ") && msg.contains("english (en, "),
            "{msg}"
        );
    }

    #[test]
    fn revisions() {
        for ok in ["main", "v1.0", "refs/pr/1", "1a793eb"] {
            assert!(check_revision(ok).is_ok(), "{ok}");
        }
        for bad in ["", "../x", "a/../b", "/main", "a b", "a\nb", "main/"] {
            assert!(check_revision(bad).is_err(), "{bad:?}");
        }
        assert!(is_commit_prefix("1a793eb"));
        assert!(!is_commit_prefix("1a793e"));
        assert!(!is_commit_prefix("main"));
    }
}
