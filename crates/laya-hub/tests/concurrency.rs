//! Two pulls of one model at the same time, as threads and as processes: both succeed, the
//! cache ends with one good copy, and the big file crosses the network once (the second
//! pull waits for the repo lock, then finds the files there).

use std::process::Command;
use std::time::Duration;

use laya_hub::{Hub, HubConfig, LineProgress, NoProgress, ResolvedModel};

use crate::support::mock::Fault;
use crate::support::{assert_checkpoint, digest_for, names, Env, Fixture, PIN};

fn slow_model(env: &Env) {
    // ~0.8 s for the 15 MB file, so the two pulls overlap.
    env.mock.fault(
        "model.safetensors",
        Fault::Slow {
            chunk: 1 << 20,
            delay: Duration::from_millis(50),
        },
    );
}

fn assert_one_good_copy(env: &Env, dirs: &[std::path::PathBuf]) {
    let snap = env.snapshot("laya-test/tiny", PIN);
    assert!(dirs.iter().all(|d| *d == snap), "{dirs:?}");
    assert_checkpoint(&snap, &env.fx.files);
    let mut want: Vec<String> = env
        .fx
        .files
        .iter()
        .map(|(p, b)| digest_for(p, b).hex().to_owned())
        .collect();
    want.sort();
    assert_eq!(
        names(&env.repo_dir("laya-test/tiny").join("blobs")),
        want,
        "extra or partial blobs"
    );
    assert_eq!(
        env.mock.body_gets("model.safetensors").len(),
        1,
        "model.safetensors downloaded twice"
    );
}

#[test]
fn concurrent_pulls_in_threads_end_with_one_good_copy() {
    let env = Env::new();
    slow_model(&env);
    let results: Vec<Result<ResolvedModel, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    Hub::new(env.config())
                        .and_then(|h| h.pull("tiny", None, &NoProgress))
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
            .collect()
    });
    let dirs: Vec<_> = results
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("{e}")).dir)
        .collect();
    assert_one_good_copy(&env, &dirs);
}

#[test]
fn concurrent_pulls_in_processes_end_with_one_good_copy() {
    let env = Env::new();
    slow_model(&env);
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "concurrency::child_pull",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env("LAYA_HUB_CHILD_ENDPOINT", env.mock.endpoint())
                .env("LAYA_HUB_CHILD_CACHE", env.cache_dir())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("{}: {e}", exe.display()))
        })
        .collect();
    let mut dirs = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
        let dir = stdout
            .lines()
            .find_map(|l| l.split_once("CHILD-OK ").map(|(_, dir)| dir.trim()))
            .unwrap_or_else(|| panic!("child did not pull:\n{stdout}\n{stderr}"));
        eprintln!("child:\n{stderr}");
        dirs.push(std::path::PathBuf::from(dir));
    }
    assert_one_good_copy(&env, &dirs);
}

/// The body of one child process of `concurrent_pulls_in_processes_end_with_one_good_copy`.
#[test]
#[ignore = "run as a child process by concurrent_pulls_in_processes_end_with_one_good_copy"]
fn child_pull() {
    let (Ok(endpoint), Some(cache)) = (
        std::env::var("LAYA_HUB_CHILD_ENDPOINT"),
        std::env::var_os("LAYA_HUB_CHILD_CACHE"),
    ) else {
        return;
    };
    let fx = Fixture::new();
    let mut c = HubConfig::new(cache.into());
    c.endpoint = endpoint;
    c.models = fx.table();
    c.retries = 0;
    let progress = LineProgress::new(std::io::stderr());
    let m = Hub::new(c)
        .and_then(|h| h.pull("tiny", None, &progress))
        .unwrap_or_else(|e| panic!("{e}"));
    println!("CHILD-OK {}", m.dir.display());
}
