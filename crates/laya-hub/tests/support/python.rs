//! A Python interpreter with huggingface_hub, for the compatibility tests.
//!
//! `LAYA_HUB_PYTHON` names one to use as is. Otherwise a venv is made once under the
//! target directory (`target/tmp/hf-venv-<version>`) and huggingface_hub
//! `LAYA_HUB_HF_VERSION` (default [`HF_VERSION`]) is installed there from PyPI. Without a
//! `python3` the compatibility tests say so and pass; with one that cannot install the
//! package they fail, unless `LAYA_HUB_SKIP_PYTHON=1`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The huggingface_hub the tests install by default.
pub const HF_VERSION: &str = "2.4.0";

pub fn python() -> Option<PathBuf> {
    static PY: OnceLock<Option<PathBuf>> = OnceLock::new();
    PY.get_or_init(find_or_install).clone()
}

fn find_or_install() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LAYA_HUB_PYTHON") {
        return Some(PathBuf::from(p));
    }
    if std::env::var("LAYA_HUB_SKIP_PYTHON").is_ok_and(|v| v == "1") {
        eprintln!("LAYA_HUB_SKIP_PYTHON=1: huggingface_hub compatibility not checked");
        return None;
    }
    let version = std::env::var("LAYA_HUB_HF_VERSION").unwrap_or_else(|_| HF_VERSION.to_owned());
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("hf-venv-{version}"));
    let py = venv.join("bin").join("python");
    if has_hf(&py) {
        return Some(py);
    }
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("python3 not found: huggingface_hub compatibility not checked");
        return None;
    }
    let venv_s = venv.to_string_lossy().into_owned();
    run_or_panic(
        Command::new("python3").args(["-m", "venv", "--clear", &venv_s]),
        "python3 -m venv",
    );
    run_or_panic(
        Command::new(&py).args([
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            &format!("huggingface_hub=={version}"),
        ]),
        "pip install huggingface_hub",
    );
    assert!(
        has_hf(&py),
        "huggingface_hub not importable from {}",
        py.display()
    );
    Some(py)
}

fn has_hf(py: &Path) -> bool {
    Command::new(py)
        .args(["-c", "import huggingface_hub"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run_or_panic(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed (set LAYA_HUB_PYTHON to a python with huggingface_hub, or LAYA_HUB_SKIP_PYTHON=1):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `script` with `env` (on top of a scrubbed HF environment) and returns its stdout.
pub fn run(py: &Path, script: &str, env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(py);
    cmd.args(["-c", script]);
    for k in [
        "HF_HOME",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_ENDPOINT",
        "HF_TOKEN",
        "HF_HUB_OFFLINE",
    ] {
        cmd.env_remove(k);
    }
    // No telemetry or implicit token lookups from the developer's machine.
    cmd.env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1");
    // The mock hub is on loopback: never through a proxy the environment may name.
    cmd.env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost");
    cmd.envs(env.iter().copied());
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", py.display()));
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
