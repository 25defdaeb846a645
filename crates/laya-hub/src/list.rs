//! `sys1rust models`: what the cache holds, and the table it is printed as.
//!
//! Listed: every snapshot of a known model's repo, every snapshot of another repo that holds
//! a Laya checkpoint (`rl_agent_config.json`), and a known model's pinned revision while its
//! download is under way or was interrupted (no snapshot yet, but blobs or `.incomplete`
//! files). Other repos in a shared Hugging Face cache are not ours to list.

use std::fs;
use std::path::{Path, PathBuf};

use crate::cache::RepoCache;
use crate::models::{short, ModelTable, CHECKPOINT_FILES};
use crate::progress::format_size;

/// One cached snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedModel {
    /// The model's name, or the repo id when the repo is not in the model table.
    pub name: String,
    /// Repo id.
    pub repo: String,
    /// Full commit.
    pub revision: String,
    /// Whether this is the model table's pinned revision.
    pub pinned: bool,
    /// Bytes on disk for this snapshot's files (for an unfinished download, including the
    /// partial file).
    pub size: u64,
    /// Whether every file a checkpoint needs is there (pinned: with the pinned size and hash
    /// name), i.e. whether `resolve` would use it offline.
    pub complete: bool,
    /// The snapshot directory (what `--model` would load).
    pub path: PathBuf,
}

/// Scans `cache_dir`; a missing cache is an empty list. Order: the table's models in table
/// order (pinned revision first, then other revisions by commit), then other repos by id.
pub(crate) fn list(cache_dir: &Path, table: &ModelTable) -> Vec<CachedModel> {
    let Ok(rd) = fs::read_dir(cache_dir) else {
        return Vec::new();
    };
    let mut rows: Vec<(usize, CachedModel)> = Vec::new();
    let mut folders: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    folders.sort();
    for folder in folders {
        let Some(repo) = RepoCache::repo_of_folder(&folder) else {
            continue;
        };
        let cache = RepoCache::new(cache_dir, &repo);
        let known = table
            .models()
            .iter()
            .position(|m| m.repo.eq_ignore_ascii_case(&repo));
        let rank = known.unwrap_or(usize::MAX);
        let model = known.map(|i| &table.models()[i]);
        let snapshots = cache.snapshots();
        for commit in &snapshots {
            let pinned = model.is_some_and(|m| &m.revision == commit);
            let complete = match model.filter(|_| pinned) {
                Some(m) => m
                    .files
                    .iter()
                    .all(|f| cache.has_file(commit, &f.path, Some((&f.digest, f.size)))),
                None => CHECKPOINT_FILES
                    .iter()
                    .all(|p| cache.has_file(commit, p, None)),
            };
            if model.is_none() && !cache.has_file(commit, CHECKPOINT_FILES[0], None) {
                continue;
            }
            let path = cache.snapshot_dir(commit);
            let name = model
                .map(|m| m.name.clone())
                .unwrap_or_else(|| repo.clone());
            let size = linked_size(&path);
            rows.push((
                rank,
                CachedModel {
                    name,
                    repo: repo.clone(),
                    revision: commit.clone(),
                    pinned,
                    size,
                    complete,
                    path,
                },
            ));
        }
        // A pinned download that has not linked any file yet still shows, as incomplete.
        if let Some(m) = model.filter(|m| !snapshots.contains(&m.revision)) {
            let size: u64 = m
                .files
                .iter()
                .map(|f| cache.bytes_of(&f.digest).unwrap_or(0))
                .sum();
            if size > 0 {
                rows.push((
                    rank,
                    CachedModel {
                        name: m.name.clone(),
                        repo: repo.clone(),
                        revision: m.revision.clone(),
                        pinned: true,
                        size,
                        complete: false,
                        path: cache.snapshot_dir(&m.revision),
                    },
                ));
            }
        }
    }
    rows.sort_by(|(ra, a), (rb, b)| {
        (ra, &a.repo, !a.pinned, &a.revision).cmp(&(rb, &b.repo, !b.pinned, &b.revision))
    });
    rows.into_iter().map(|(_, m)| m).collect()
}

/// Sum of the sizes of the files a snapshot shows, following its links to blobs. A partial
/// download is not in the snapshot, so it is not counted here.
fn linked_size(dir: &Path) -> u64 {
    let Ok(rd) = fs::read_dir(dir) else { return 0 };
    rd.filter_map(|e| e.ok())
        .map(|e| {
            let p = e.path();
            match fs::metadata(&p) {
                Ok(m) if m.is_dir() => linked_size(&p),
                Ok(m) if m.is_file() => m.len(),
                _ => 0,
            }
        })
        .sum()
}

/// The `sys1rust models` table. Stable format, one line per [`CachedModel`] after a header:
///
/// ```text
/// NAME             REVISION  SIZE       STATUS      PATH
/// typed-decisions  1a793eb   807.0 MiB  complete    /home/me/.cache/huggingface/hub/models--convaiinnovations--laya-typed-decisions/snapshots/1a793eb568e6718f15941d08f85432581df534e3
/// english          55cf4c4   120.0 MiB  incomplete  /home/me/.cache/huggingface/hub/models--convaiinnovations--laya/snapshots/55cf4c4ebb4ebe31b2550e8bdf3bd21b99753851
/// ```
///
/// * columns, in this order: `NAME` (model name, or repo id for a repo outside the model
///   table), `REVISION` (first 7 characters of the commit), `SIZE` (bytes on disk in binary
///   units with one decimal: `847 B`, `3.4 MiB`, `1.2 GiB`), `STATUS` (`complete` or
///   `incomplete`), `PATH` (the snapshot directory, absolute when the cache path is);
/// * each column but the last is left-aligned and padded to its widest cell, columns are
///   separated by two spaces, lines end with `\n` and have no trailing spaces;
/// * the header line is always printed, so an empty cache prints the header alone.
pub fn render_models_table(models: &[CachedModel]) -> String {
    let header = ["NAME", "REVISION", "SIZE", "STATUS", "PATH"];
    let rows: Vec<[String; 5]> = models
        .iter()
        .map(|m| {
            [
                m.name.clone(),
                short(&m.revision).to_owned(),
                format_size(m.size),
                if m.complete { "complete" } else { "incomplete" }.to_owned(),
                m.path.display().to_string(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; 5]| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 < cells.len() {
                s.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            } else {
                s.push_str(cell);
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(header);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3], &row[4]]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_format() {
        let rows = [
            CachedModel {
                name: "typed-decisions".into(),
                repo: "convaiinnovations/laya-typed-decisions".into(),
                revision: "1a793eb568e6718f15941d08f85432581df534e3".into(),
                pinned: true,
                size: 846_195_716,
                complete: true,
                path: "/c/hub/models--convaiinnovations--laya-typed-decisions/snapshots/1a793eb568e6718f15941d08f85432581df534e3".into(),
            },
            CachedModel {
                name: "org/other".into(),
                repo: "org/other".into(),
                revision: "0123456789abcdef0123456789abcdef01234567".into(),
                pinned: false,
                size: 847,
                complete: false,
                path: "/c/x".into(),
            },
        ];
        let want = "\
NAME             REVISION  SIZE       STATUS      PATH
typed-decisions  1a793eb   807.0 MiB  complete    /c/hub/models--convaiinnovations--laya-typed-decisions/snapshots/1a793eb568e6718f15941d08f85432581df534e3
org/other        0123456   847 B      incomplete  /c/x
";
        assert_eq!(render_models_table(&rows), want);
        assert_eq!(
            render_models_table(&[]),
            "NAME  REVISION  SIZE  STATUS  PATH\n"
        );
    }
}
