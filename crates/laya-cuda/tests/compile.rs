//! The kernels compile with NVRTC for the chips the engine targets. Needs only NVRTC (no
//! GPU): runs wherever libnvrtc loads, and says why it skipped elsewhere.

use laya_cuda::compile::{compile, KERNELS};

fn nvrtc() -> bool {
    match laya_cuda::load_nvrtc() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

#[test]
fn kernels_compile_for_ampere_and_hopper() {
    if !nvrtc() {
        return;
    }
    for (cc, hidden) in [((8, 0), 768), ((9, 0), 1024), ((9, 0), 128)] {
        let dir =
            std::env::temp_dir().join(format!("laya-cuda-compile-test-{}", std::process::id()));
        let first = compile(cc, hidden, Some(&dir))
            .unwrap_or_else(|e| panic!("sm_{}{} hidden {hidden}: {e}", cc.0, cc.1));
        assert!(
            !first.cached && first.image.len() > 1000,
            "a cubin came out"
        );
        let again = compile(cc, hidden, Some(&dir)).expect("cached");
        assert!(again.cached, "the second compile reads the cache");
        assert_eq!(again.image, first.image);
        let _ = std::fs::remove_dir_all(&dir);
    }
    for name in [
        "embed_norm",
        "attention_mma",
        "attention_rows",
        "attention_sel",
        "scorer_hidden",
        "act_hidden",
        "act_out",
    ] {
        assert!(
            KERNELS.contains(&format!("void {name}(")) || KERNELS.contains(&format!("\n{name}(")),
            "{name}"
        );
    }
}
