//! Pull and resolve against the mock hub: cache layout, token handling across the CDN
//! redirect, 401/404, corrupted and interrupted downloads, slow and stalled answers,
//! offline use, revisions, repo ids and local directories.

use std::fs;
use std::time::Duration;

use laya_hub::{
    render_models_table, Hub, HubConfig, HubError, LineProgress, NoProgress, CHECKPOINT_FILES,
};

use crate::support::mock::{Fault, MockHub, MockRepo};
use crate::support::{assert_checkpoint, digest_for, names, Env, OTHER, OTHER_MAIN, PIN, TOKEN};

fn hub(env: &Env, tweak: impl FnOnce(&mut HubConfig)) -> Hub {
    let mut c = env.config();
    tweak(&mut c);
    Hub::new(c).unwrap_or_else(|e| panic!("{e}"))
}

fn err_text<T: std::fmt::Debug>(r: Result<T, HubError>) -> (HubError, String) {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => {
            let s = e.to_string();
            (e, s)
        }
    }
}

#[test]
fn pull_builds_the_hugging_face_cache_layout() {
    let env = Env::new();
    let h = hub(&env, |_| {});
    let m = h
        .pull("tiny", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    let snap = env.snapshot("laya-test/tiny", PIN);
    assert_eq!(m.dir, snap);
    assert_eq!(
        (
            m.name.as_str(),
            m.repo.as_deref(),
            m.revision.as_deref(),
            m.pinned
        ),
        ("tiny", Some("laya-test/tiny"), Some(PIN), true)
    );
    assert_checkpoint(&m.dir, &env.fx.files);

    // blobs/<sha256 or git blob id>, one per file, nothing partial left.
    let mut want_blobs: Vec<String> = env
        .fx
        .files
        .iter()
        .map(|(p, b)| digest_for(p, b).hex().to_owned())
        .collect();
    want_blobs.sort();
    assert_eq!(
        names(&env.repo_dir("laya-test/tiny").join("blobs")),
        want_blobs
    );
    // snapshots/<commit>/<path> are relative symlinks into blobs/.
    for (path, bytes) in &env.fx.files {
        let link = fs::read_link(snap.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        let ups = "../".repeat(path.split('/').count() + 1);
        assert_eq!(
            link.to_string_lossy(),
            format!("{ups}blobs/{}", digest_for(path, bytes).hex()),
            "{path}"
        );
    }
    // A pinned commit is not a branch: no refs/ (huggingface_hub writes none either).
    assert!(!env.repo_dir("laya-test/tiny").join("refs").exists());

    // LFS files came through the CDN origin, the rest from the hub.
    assert_eq!(env.mock.body_gets("model.safetensors").len(), 1);
    assert!(env
        .mock
        .cdn
        .log()
        .iter()
        .any(|r| r.target.contains("file=model.safetensors")));
    assert!(env
        .mock
        .hub
        .log()
        .iter()
        .all(|r| r.path().starts_with("/laya-test/tiny/resolve/")));

    let listed = h.list();
    assert_eq!(listed.len(), 1);
    let total: u64 = env.fx.files.values().map(|b| b.len() as u64).sum();
    assert_eq!(
        (listed[0].complete, listed[0].pinned, listed[0].size),
        (true, true, total)
    );
    let table = render_models_table(&listed);
    let row = table.lines().nth(1).unwrap_or_default();
    assert!(
        row.starts_with("tiny  c0ffee0   10.2 MiB  complete  /"),
        "{table}"
    );

    // resolve() of a complete snapshot touches no network.
    let before = env.mock.hub.log().len();
    let again = h
        .resolve("tiny-alias", Some(&PIN[..7]), false, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.dir, snap);
    assert_eq!(env.mock.hub.log().len(), before);
}

#[test]
fn token_reaches_the_endpoint_only_never_the_redirect_target() {
    let env = Env::new();
    let h = hub(&env, |c| c.token = Some(TOKEN.into()));
    h.pull("private", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    let bearer = format!("Bearer {TOKEN}");
    let hub_log = env.mock.hub.log();
    assert!(!hub_log.is_empty());
    for r in &hub_log {
        assert_eq!(
            r.header("authorization"),
            Some(bearer.as_str()),
            "hub request {}",
            r.target
        );
    }
    let cdn_log = env.mock.cdn.log();
    assert!(
        cdn_log
            .iter()
            .any(|r| r.target.contains("model.safetensors")),
        "redirect not followed"
    );
    for r in &cdn_log {
        assert_eq!(
            r.header("authorization"),
            None,
            "token leaked to the CDN: {}",
            r.target
        );
        assert!(
            r.headers.iter().all(|(_, v)| !v.contains(TOKEN)),
            "token leaked to the CDN: {r:?}"
        );
    }
}

/// Hub → CDN → back to the hub: once the chain has left the endpoint's origin the token is
/// not sent again, even to the endpoint itself.
#[test]
fn token_is_not_sent_after_leaving_the_origin_even_when_coming_back() {
    let env = Env::new();
    env.mock.fault("model.safetensors", Fault::BounceToHub);
    let h = hub(&env, |c| c.token = Some(TOKEN.into()));
    let m = h
        .pull("tiny", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_checkpoint(&m.dir, &env.fx.files);
    let hub_log = env.mock.hub.log();
    let bounced: Vec<_> = hub_log
        .iter()
        .filter(|r| r.path().starts_with("/bounced/"))
        .collect();
    assert_eq!(bounced.len(), 1);
    assert_eq!(bounced[0].header("authorization"), None);
    let direct = hub_log.iter().filter(|r| r.path().contains("/resolve/"));
    assert!(direct.clone().count() > 0);
    assert!(direct
        .into_iter()
        .all(|r| r.header("authorization").is_some()));
}

#[test]
fn private_repo_without_token_is_a_clear_401() {
    let env = Env::new();
    let h = hub(&env, |_| {});
    let (e, msg) = err_text(h.pull("private", None, &NoProgress));
    assert!(
        matches!(e, HubError::Unauthorized { status: 401, .. }),
        "{e:?}"
    );
    assert!(msg.contains("set HF_TOKEN"), "{msg}");
    assert!(msg.contains("/laya-test/private/resolve/"), "{msg}");
    assert!(names(&env.snapshot("laya-test/private", PIN)).is_empty());

    let bad = hub(&env, |c| c.token = Some("hf_wrong".into()));
    let (_, msg) = err_text(bad.pull("private", None, &NoProgress));
    assert!(msg.contains("was sent but does not give access"), "{msg}");
}

#[test]
fn missing_files_and_repos_are_clear_404s() {
    let env = Env::new();
    let h = hub(&env, |_| {});
    let (e, msg) = err_text(h.resolve("laya-test/incomplete", None, false, &NoProgress));
    assert!(matches!(e, HubError::NotFound { .. }), "{e:?}");
    assert!(
        msg.contains("encoder/config.json") && msg.contains("EntryNotFound"),
        "{msg}"
    );
    // The branch is not recorded for a snapshot that never completed.
    assert!(!env.repo_dir("laya-test/incomplete").join("refs").exists());
    assert!(h.list().iter().all(|m| !m.complete));

    let (_, msg) = err_text(h.resolve("laya-test/nope", None, false, &NoProgress));
    assert!(msg.contains("RepoNotFound"), "{msg}");
    let (_, msg) = err_text(h.resolve("tiny", Some("v9"), false, &NoProgress));
    assert!(msg.contains("RevisionNotFound"), "{msg}");
}

#[test]
fn corrupted_bytes_are_deleted_and_never_visible() {
    let env = Env::new();
    env.mock.fault("model.safetensors", Fault::Corrupt);
    // Retries on: a hash failure is not retried, it is reported.
    let h = hub(&env, |c| c.retries = 2);
    let (e, msg) = err_text(h.pull("tiny", None, &NoProgress));
    assert!(matches!(e, HubError::Integrity { .. }), "{e:?}");
    let sha = digest_for("model.safetensors", &env.fx.files["model.safetensors"]);
    assert!(
        msg.contains("model.safetensors") && msg.contains(&format!("sha256 {}", sha.hex())),
        "{msg}"
    );
    assert!(msg.contains("deleted"), "{msg}");
    let snap = env.snapshot("laya-test/tiny", PIN);
    assert!(!snap.join("model.safetensors").exists());
    let blobs = names(&env.repo_dir("laya-test/tiny").join("blobs"));
    assert!(blobs.iter().all(|b| !b.starts_with(sha.hex())), "{blobs:?}");
    assert_eq!(env.mock.body_gets("model.safetensors").len(), 1);
    let (e, _) = err_text(h.resolve("tiny", None, true, &NoProgress));
    assert!(matches!(e, HubError::NotCached { .. }), "{e:?}");

    // A corrupt partial file (a resume would append good bytes to bad ones) fails too and
    // is deleted; the pull after that starts from zero and succeeds.
    let partial = env
        .repo_dir("laya-test/tiny")
        .join("blobs")
        .join(format!("{}.incomplete", sha.hex()));
    fs::write(&partial, vec![0u8; 1 << 20]).unwrap_or_else(|e| panic!("{e}"));
    let (e, _) = err_text(h.pull("tiny", None, &NoProgress));
    assert!(matches!(e, HubError::Integrity { .. }), "{e:?}");
    assert!(!partial.exists());
    let m = h
        .pull("tiny", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_checkpoint(&m.dir, &env.fx.files);
    let gets = env.mock.body_gets("model.safetensors");
    assert_eq!(gets.len(), 3);
    assert_eq!(gets[1].header("range"), Some("bytes=1048576-"));
    assert_eq!(gets[2].header("range"), None);
}

#[test]
fn a_killed_download_resumes_with_a_range_request() {
    let env = Env::new();
    let cut = 5_000_000;
    env.mock.fault("model.safetensors", Fault::CloseAfter(cut));
    let h = hub(&env, |_| {});
    let (e, msg) = err_text(h.pull("tiny", None, &NoProgress));
    assert!(
        matches!(e, HubError::Interrupted { received, .. } if received == cut as u64),
        "{e:?}"
    );
    assert!(msg.contains("run the command again to resume"), "{msg}");
    let sha = digest_for("model.safetensors", &env.fx.files["model.safetensors"]);
    let partial = env
        .repo_dir("laya-test/tiny")
        .join("blobs")
        .join(format!("{}.incomplete", sha.hex()));
    assert_eq!(
        fs::metadata(&partial).map(|m| m.len()).ok(),
        Some(cut as u64)
    );
    assert!(!env
        .snapshot("laya-test/tiny", PIN)
        .join("model.safetensors")
        .exists());
    let listed = h.list();
    assert_eq!(listed.len(), 1);
    assert!(!listed[0].complete);
    assert!(render_models_table(&listed).contains("  incomplete  "));

    let m = h
        .pull("tiny", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_checkpoint(&m.dir, &env.fx.files);
    assert!(!partial.exists());
    let gets = env.mock.body_gets("model.safetensors");
    assert_eq!(gets.len(), 2);
    assert_eq!(
        gets[1].header("range"),
        Some(format!("bytes={cut}-").as_str())
    );
}

#[test]
fn an_interrupted_transfer_is_retried_from_where_it_stopped() {
    let env = Env::new();
    env.mock
        .fault("model.safetensors", Fault::CloseAfter(3_000_000));
    let h = hub(&env, |c| c.retries = 1);
    let m = h
        .pull("tiny", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_checkpoint(&m.dir, &env.fx.files);
    let gets = env.mock.body_gets("model.safetensors");
    assert_eq!(gets.len(), 2);
    assert_eq!(gets[1].header("range"), Some("bytes=3000000-"));
}

#[test]
fn a_slow_answer_completes_with_progress_lines() {
    let env = Env::new();
    env.mock.fault(
        "model.safetensors",
        Fault::Slow {
            chunk: 512 * 1024,
            delay: Duration::from_millis(20),
        },
    );
    let h = hub(&env, |c| c.read_timeout = Duration::from_secs(2));
    let progress = LineProgress::new(Vec::new());
    let m = h
        .pull("tiny", None, &progress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_checkpoint(&m.dir, &env.fx.files);
    let text = String::from_utf8(progress.into_inner()).unwrap_or_default();
    for want in [
        "pulling tiny (laya-test/tiny@c0ffee0)",
        "model.safetensors: downloading 6.8 MiB",
        "model.safetensors: 50% (",
        "model.safetensors: verifying 6.8 MiB",
        "model.safetensors: ok",
        "tokenizer/tokenizer_config.json: ok",
    ] {
        assert!(text.contains(want), "missing `{want}` in:\n{text}");
    }
}

#[test]
fn a_stalled_answer_times_out_then_resumes() {
    let env = Env::new();
    env.mock.fault(
        "model.safetensors",
        Fault::StallAfter {
            bytes: 2_000_000,
            pause: Duration::from_secs(3),
        },
    );
    let h = hub(&env, |c| c.read_timeout = Duration::from_millis(500));
    let (e, msg) = err_text(h.pull("tiny", None, &NoProgress));
    assert!(
        matches!(
            e,
            HubError::Interrupted {
                received: 2_000_000,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(msg.contains("model.safetensors"), "{msg}");
    let m = h
        .pull("tiny", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_checkpoint(&m.dir, &env.fx.files);
    let gets = env.mock.body_gets("model.safetensors");
    assert_eq!(
        gets.last().and_then(|g| g.header("range")),
        Some("bytes=2000000-")
    );
}

#[test]
fn offline_needs_the_cache_and_says_how_to_fill_it() {
    let env = Env::new();
    let offline = hub(&env, |c| c.offline = true);
    let (e, msg) = err_text(offline.resolve("tiny", None, false, &NoProgress));
    assert!(matches!(e, HubError::NotCached { .. }), "{e:?}");
    assert!(
        msg.contains("`sys1rust pull tiny`") && msg.contains("--model DIR"),
        "{msg}"
    );
    assert!(
        msg.contains(&env.cache_dir().display().to_string()),
        "{msg}"
    );
    let (_, msg) = err_text(hub(&env, |_| {}).resolve("laya-test/other", None, true, &NoProgress));
    assert!(
        msg.contains("`sys1rust pull laya-test/other --revision main`"),
        "{msg}"
    );
    assert!(env.mock.hub.log().is_empty(), "offline touched the network");

    let m = hub(&env, |_| {})
        .pull("tiny", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    // With the hub gone, offline and online resolution both serve the cache.
    let cfg = env.config();
    drop(env.mock);
    for offline in [true, false] {
        let h = Hub::new(cfg.clone()).unwrap_or_else(|e| panic!("{e}"));
        let again = h
            .resolve("tiny", None, offline, &NoProgress)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again.dir, m.dir);
    }
    // An offline pull re-verifies what is cached.
    let mut c = cfg;
    c.offline = true;
    Hub::new(c)
        .and_then(|h| h.pull("tiny", None, &NoProgress))
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn pull_repairs_a_cached_file_that_went_bad() {
    let env = Env::new();
    let h = hub(&env, |_| {});
    let m = h
        .pull("tiny", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    // Same size, one byte changed, behind the snapshot's back.
    let blob =
        fs::canonicalize(m.dir.join("encoder/config.json")).unwrap_or_else(|e| panic!("{e}"));
    let mut bytes = fs::read(&blob).unwrap_or_else(|e| panic!("{e}"));
    bytes[0] ^= 1;
    fs::write(&blob, &bytes).unwrap_or_else(|e| panic!("{e}"));
    // resolve() trusts a snapshot that looks complete; pull() re-hashes and repairs it.
    h.resolve("tiny", None, true, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    h.pull("tiny", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_checkpoint(&m.dir, &env.fx.files);
}

#[test]
fn revisions_select_snapshots() {
    let env = Env::new();
    let h = hub(&env, |_| {});
    // The pin's 7-character prefix (or all of it) is the pin.
    for rev in [&PIN[..7], PIN] {
        let m = h
            .resolve("tiny", Some(rev), false, &NoProgress)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(m.pinned && m.revision.as_deref() == Some(PIN));
    }
    // Another commit is fetched against the hub's own hashes.
    let other = h
        .resolve("tiny", Some(OTHER), false, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (other.pinned, other.revision.as_deref()),
        (false, Some(OTHER))
    );
    assert_checkpoint(&other.dir, &env.fx.other_files());
    // ...and served from the cache by its prefix afterwards, offline.
    let again = h
        .resolve("tiny", Some(&OTHER[..7]), true, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.dir, other.dir);
    let (e, _) = err_text(h.resolve("tiny", Some("abcdef1"), true, &NoProgress));
    assert!(matches!(e, HubError::NotCached { .. }), "{e:?}");
    // Shared blobs are stored once.
    assert_eq!(
        names(&env.repo_dir("laya-test/tiny").join("blobs")).len(),
        CHECKPOINT_FILES.len() + 1
    );

    let listed = h.list();
    let rows: Vec<(&str, &str, bool, bool)> = listed
        .iter()
        .map(|m| (m.name.as_str(), &m.revision[..7], m.pinned, m.complete))
        .collect();
    assert_eq!(
        rows,
        [
            ("tiny", &PIN[..7], true, true),
            ("tiny", &OTHER[..7], false, true)
        ]
    );
}

#[test]
fn a_repo_id_follows_main_and_records_the_ref() {
    let env = Env::new();
    let h = hub(&env, |_| {});
    let m = h
        .resolve("laya-test/other", None, false, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (m.name.as_str(), m.revision.as_deref(), m.pinned),
        ("laya-test/other", Some(OTHER_MAIN), false)
    );
    assert_checkpoint(&m.dir, &env.fx.files);
    let main =
        fs::read_to_string(env.repo_dir("laya-test/other").join("refs/main")).unwrap_or_default();
    assert_eq!(main, OTHER_MAIN);
    let again = h
        .resolve("laya-test/other", None, true, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.dir, m.dir);
    assert!(h
        .list()
        .iter()
        .any(|r| r.name == "laya-test/other" && r.complete));
}

#[test]
fn a_local_directory_is_used_in_place() {
    let env = Env::new();
    let h = hub(&env, |_| {});
    let dir = env.fx.dir.path();
    let spec = dir.to_str().unwrap_or_else(|| panic!("non-UTF-8 temp dir"));
    let m = h
        .resolve(spec, None, false, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((m.dir.as_path(), m.repo.as_deref()), (dir, None));
    assert!(env.mock.hub.log().is_empty());
    let (e, _) = err_text(h.resolve(spec, Some("main"), false, &NoProgress));
    assert!(matches!(e, HubError::RevisionForLocal { .. }), "{e:?}");
    fs::remove_file(dir.join("tokenizer/tokenizer.json")).unwrap_or_else(|e| panic!("{e}"));
    let (_, msg) = err_text(h.resolve(spec, None, false, &NoProgress));
    assert!(msg.contains("missing tokenizer/tokenizer.json"), "{msg}");
    assert!(
        !env.cache_dir().exists(),
        "a local directory must not create a cache"
    );
}

/// The fixture's small files are the typed-decisions files of model.md §1.2: our git blob
/// hashing agrees with the spec's values.
#[test]
fn builtin_pins_verify_the_published_small_files() {
    let env = Env::new();
    let table = laya_hub::ModelTable::builtin();
    let typed = table
        .find("typed-decisions")
        .unwrap_or_else(|| panic!("typed-decisions"));
    for path in [
        "rl_agent_config.json",
        "tokenizer/tokenizer.json",
        "tokenizer/tokenizer_config.json",
    ] {
        let pin = typed
            .files
            .iter()
            .find(|f| f.path == path)
            .unwrap_or_else(|| panic!("{path}"));
        let bytes = &env.fx.files[path];
        assert_eq!(pin.size, bytes.len() as u64, "{path}");
        assert_eq!(
            pin.digest.hex(),
            crate::support::git_blob_id(bytes),
            "{path}"
        );
    }
}

/// A token that cannot be a header value (here a trailing non-ASCII character, as an editor
/// may leave in the token file) is a typed error that never shows the token, sent nowhere
/// and not retried. Work that needs no network still runs.
#[test]
fn an_unsendable_token_is_refused_without_leaking_or_retrying() {
    let env = Env::new();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let token_file = dir.path().join("token");
    fs::write(&token_file, "hf_SECRET\u{e9}\n").unwrap_or_else(|e| panic!("{e}"));
    let token_path = token_file.to_string_lossy().into_owned();
    for vars in [
        vec![("HF_TOKEN", "hf_SECRET\u{e9}")],
        vec![("HF_TOKEN_PATH", token_path.as_str())],
    ] {
        let from_env = HubConfig::from_vars(|k| {
            (k == "HF_HOME")
                .then(|| dir.path().to_string_lossy().into_owned())
                .or_else(|| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).into()))
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let h = hub(&env, |c| {
            c.token = from_env.token.clone();
            c.retries = 3;
            c.retry_delay = Duration::from_secs(1);
        });
        let started = std::time::Instant::now();
        let (e, msg) = err_text(h.pull("private", None, &NoProgress));
        assert!(
            matches!(e, HubError::InvalidToken { position: 10, .. }),
            "{e:?}"
        );
        assert!(
            !msg.contains("SECRET") && !format!("{e:?}").contains("SECRET"),
            "{msg}"
        );
        assert!(
            msg.contains("non-ASCII") && msg.contains("HF_TOKEN"),
            "{msg}"
        );
        assert!(started.elapsed() < Duration::from_secs(1), "retried");
        assert!(env.mock.hub.log().is_empty(), "sent a request");
    }
    // Offline resolution of a cached model does not need the token.
    hub(&env, |_| {})
        .pull("tiny", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    hub(&env, |c| c.token = Some("hf_SECRET\u{e9}".into()))
        .resolve("tiny", None, true, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
}

/// `HF_TOKEN=$'hf_SECRET\nx'` is cleaned to `hf_SECRETx` (huggingface_hub drops line breaks
/// anywhere in a token) and sent; the refusal does not show it.
#[test]
fn a_token_with_a_line_break_is_cleaned_not_echoed() {
    let env = Env::new();
    let from_env = HubConfig::from_vars(|k| match k {
        "HF_HOME" => Some("/nonexistent".into()),
        "HF_TOKEN" => Some("hf_SECRET\nx".into()),
        _ => None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let h = hub(&env, |c| {
        c.token = from_env.token.clone();
        c.retries = 2;
    });
    let (e, msg) = err_text(h.pull("private", None, &NoProgress));
    assert!(
        matches!(e, HubError::Unauthorized { status: 401, .. }),
        "{e:?}"
    );
    assert!(!msg.contains("SECRET"), "{msg}");
    let sent: Vec<_> = env
        .mock
        .hub
        .log()
        .iter()
        .filter_map(|r| r.header("authorization").map(str::to_owned))
        .collect();
    assert_eq!(sent, ["Bearer hf_SECRETx"]);
}

/// A download link refused by the CDN (or, after a bounce, by the hub's host without the
/// token) is not a missing-token problem, and the signed query never shows.
#[test]
fn a_refused_download_link_gets_link_advice_without_its_query() {
    let env = Env::new();
    for token in [Some(TOKEN), None] {
        env.mock.fault("model.safetensors", Fault::Status(403));
        let h = hub(&env, |c| c.token = token.map(str::to_owned));
        let (e, msg) = err_text(h.pull("tiny", None, &NoProgress));
        assert!(
            matches!(e, HubError::Unauthorized { status: 403, .. }),
            "{e:?}"
        );
        assert!(!msg.contains("set HF_TOKEN"), "{msg}");
        assert!(
            msg.contains("expired") && msg.contains("Run the command again"),
            "{msg}"
        );
        assert_eq!(
            msg.contains("HF_TOKEN is set"),
            token.is_some(),
            "{token:?}: {msg}"
        );
        assert!(!msg.contains("sig=") && !msg.contains('?'), "{msg}");
        assert!(msg.contains(&env.mock.cdn.origin()), "{msg}");
    }
    // CDN → back to the hub's own host, where the token is no longer sent.
    env.mock.fault("model.safetensors", Fault::BounceToHub);
    env.mock.fault("model.safetensors", Fault::Status(401));
    let h = hub(&env, |c| c.token = Some(TOKEN.into()));
    let (e, msg) = err_text(h.pull("tiny", None, &NoProgress));
    assert!(
        matches!(e, HubError::Unauthorized { status: 401, .. }),
        "{e:?}"
    );
    assert!(
        !msg.contains("set HF_TOKEN") && msg.contains("HF_TOKEN is set"),
        "{msg}"
    );
    assert!(!msg.contains("sig=") && msg.contains("/bounced/"), "{msg}");
    // The next pull gets a fresh link and succeeds.
    let m = h
        .pull("tiny", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_checkpoint(&m.dir, &env.fx.files);
}

/// Empty files (an empty LFS file and an empty git file) download and verify, pinned and
/// unpinned.
#[test]
fn empty_files_download_and_verify() {
    let mut fx = crate::support::Fixture::new();
    for path in ["model.safetensors", "tokenizer/tokenizer_config.json"] {
        fx.files.insert(path.to_owned(), Vec::new());
    }
    let repos = std::collections::HashMap::from([
        (
            "laya-test/tiny".to_owned(),
            MockRepo::new(PIN, fx.files.clone()),
        ),
        (
            "laya-test/other".to_owned(),
            MockRepo::new(OTHER_MAIN, fx.files.clone()),
        ),
    ]);
    let mock = MockHub::start(repos, TOKEN);
    let home = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut c = HubConfig::new(home.path().join("hub"));
    c.endpoint = mock.endpoint();
    c.models = fx.table();
    c.retries = 0;
    let h = Hub::new(c).unwrap_or_else(|e| panic!("{e}"));
    for (spec, commit) in [("tiny", PIN), ("laya-test/other", OTHER_MAIN)] {
        let m = h
            .pull(spec, None, &NoProgress)
            .unwrap_or_else(|e| panic!("{spec}: {e}"));
        assert_eq!(m.revision.as_deref(), Some(commit));
        assert_checkpoint(&m.dir, &fx.files);
        // Cached now: a second pull re-verifies without downloading.
        h.pull(spec, None, &NoProgress)
            .unwrap_or_else(|e| panic!("{spec} again: {e}"));
        h.resolve(spec, None, true, &NoProgress)
            .unwrap_or_else(|e| panic!("{spec} offline: {e}"));
    }
    let blobs = home.path().join("hub/models--laya-test--tiny/blobs");
    // sha256 of nothing, and `git hash-object /dev/null`.
    for empty in [
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391",
    ] {
        assert_eq!(
            fs::metadata(blobs.join(empty)).map(|m| m.len()).ok(),
            Some(0)
        );
    }
}

/// An offline pull that finds a corrupt cached file deletes the blob too (not just the
/// link), and says that downloads are off and which pull fetches it again.
#[test]
fn offline_pull_deletes_a_corrupt_blob_and_says_how_to_refetch() {
    let env = Env::new();
    let m = hub(&env, |_| {})
        .pull("tiny", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    let link = m.dir.join("model.safetensors");
    let blob = fs::canonicalize(&link).unwrap_or_else(|e| panic!("{e}"));
    let mut bytes = fs::read(&blob).unwrap_or_else(|e| panic!("{e}"));
    bytes[100] ^= 1;
    fs::write(&blob, &bytes).unwrap_or_else(|e| panic!("{e}"));

    let offline = hub(&env, |c| c.offline = true);
    let (e, msg) = err_text(offline.pull("tiny", None, &NoProgress));
    assert!(matches!(e, HubError::CorruptInCache { .. }), "{e:?}");
    assert!(
        msg.contains("model.safetensors")
            && msg.contains("deleted from the cache")
            && msg.contains("`sys1rust pull tiny`")
            && !msg.contains("Run the command again"),
        "{msg}"
    );
    assert!(!blob.exists(), "the corrupt blob was kept");
    assert!(fs::symlink_metadata(&link).is_err(), "the link was kept");
    // What the message says is what the cache now is: offline, the file is missing.
    let (e, _) = err_text(offline.pull("tiny", None, &NoProgress));
    assert!(matches!(e, HubError::NotCached { .. }), "{e:?}");
    let m = hub(&env, |_| {})
        .pull("tiny", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_checkpoint(&m.dir, &env.fx.files);

    // An unpinned snapshot names its commit, so the repair fetches that very snapshot.
    hub(&env, |_| {})
        .pull("laya-test/other", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    let other = env.snapshot("laya-test/other", OTHER_MAIN);
    let blob =
        fs::canonicalize(other.join("rl_agent_config.json")).unwrap_or_else(|e| panic!("{e}"));
    let mut bytes = fs::read(&blob).unwrap_or_else(|e| panic!("{e}"));
    bytes[0] ^= 1;
    fs::write(&blob, &bytes).unwrap_or_else(|e| panic!("{e}"));
    let (_, msg) = err_text(offline.pull("laya-test/other", None, &NoProgress));
    assert!(
        msg.contains(&format!(
            "`sys1rust pull laya-test/other --revision {OTHER_MAIN}`"
        )),
        "{msg}"
    );
}
