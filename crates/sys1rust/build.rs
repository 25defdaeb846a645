// What `--version` reports, and the run-time search path for libmlx that laya-mlx's own
// binaries get (its build script, run here as a nested function).

use std::process::Command;

mod mlx {
    include!("../laya-mlx/build.rs");

    pub fn link() {
        main();
    }
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    mlx::link();
    let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    // A release build may name its commit (a source tarball has no .git).
    println!("cargo:rerun-if-env-changed=SYS1_COMMIT");
    let commit = var("SYS1_COMMIT")
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{head}");
        }
        println!("cargo:rerun-if-changed={dir}/packed-refs");
    }
    println!("cargo:rustc-env=SYS1_COMMIT={commit}");
    println!(
        "cargo:rustc-env=SYS1_MLX_VERSION={}",
        var("DEP_MLX_VERSION").unwrap_or_else(|| "unknown".into())
    );
    // The bundle flavors of packaging/build-bundle.sh, by the backend of the linked libmlx.
    let bundle = match var("DEP_MLX_BACKEND").as_deref() {
        Some("cuda") => "cuda13",
        Some("metal") => "metal",
        _ => "cpu",
    };
    println!("cargo:rustc-env=SYS1_BUNDLE={bundle}");
}
