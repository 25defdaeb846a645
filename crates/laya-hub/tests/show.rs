//! `show` against a cache filled from the mock hub: revisions are checked as `pull` and
//! `resolve` check them before anything is read from the cache.

use laya_hub::{Hub, HubError, NoProgress};

use crate::support::{Env, OTHER_MAIN};

#[test]
fn show_checks_the_revision_before_reading_refs() {
    let env = Env::new();
    let h = Hub::new(env.config()).unwrap_or_else(|e| panic!("{e}"));
    h.pull("laya-test/other", None, &NoProgress)
        .unwrap_or_else(|e| panic!("{e}"));
    let shown = h
        .show("laya-test/other", Some("main"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shown.revision.as_deref(), Some(OTHER_MAIN));

    // `refs/../refs/main` is `refs/main` on disk: it must not resolve.
    for bad in ["../refs/main", "main/../main", "", " main", "/main"] {
        for spec in ["laya-test/other", "tiny"] {
            match h.show(spec, Some(bad)) {
                Err(HubError::InvalidRevision(r)) => assert_eq!(r, bad),
                other => panic!("{spec} --revision {bad:?}: {other:?}"),
            }
        }
    }
    let dir = env.fx.dir.path().to_string_lossy().into_owned();
    assert!(matches!(
        h.show(&dir, Some("main")),
        Err(HubError::RevisionForLocal { .. })
    ));
}
