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

/// Register budgets, as ptxas reports them for the engine's own options. On Hopper
/// `attention_mma` runs at the 128 registers its four blocks a multiprocessor leave, with one
/// 8-byte value spilled, read back only when the next key tile's copy is queued; variants
/// that spilled more ran slower (results/GPU.md, 2026-12-06). No other kernel spills.
#[test]
fn kernels_keep_their_register_budgets() {
    if !nvrtc() {
        return;
    }
    for (cc, hidden, attention_spill) in [((9, 0), 1024, 8), ((8, 0), 768, 0)] {
        let kernels = laya_cuda::compile::kernel_resources(cc, hidden)
            .unwrap_or_else(|e| panic!("sm_{}{}: {e}", cc.0, cc.1));
        for name in [
            "attention_mma",
            "rope_qk",
            "geglu",
            "norm_f16",
            "embed_norm",
        ] {
            assert!(
                kernels.iter().any(|k| k.name == name && k.registers > 0),
                "sm_{}{}: no report for {name}: {kernels:?}",
                cc.0,
                cc.1
            );
        }
        for k in &kernels {
            assert!(
                k.code_sha256.as_ref().is_some_and(|h| h.len() == 16),
                "sm_{}{}: no code hash for {}",
                cc.0,
                cc.1,
                k.name
            );
            let allowed = if k.name == "attention_mma" {
                attention_spill
            } else {
                0
            };
            assert!(
                k.spill_loads <= allowed && k.spill_stores <= allowed,
                "sm_{}{}: {k:?} spills more than {allowed} bytes",
                cc.0,
                cc.1
            );
        }
        // gemm_wg (wgmma) exists on Hopper alone.
        let wgmma = kernels
            .iter()
            .filter(|k| k.name.starts_with("gemm_wg_"))
            .count();
        assert_eq!(
            wgmma,
            if cc == (9, 0) { 2 } else { 0 },
            "sm_{}{}: gemm_wg kernels",
            cc.0,
            cc.1
        );
        let wg = kernels.iter().filter(|k| k.name == "attention_wg").count();
        assert_eq!(
            wg,
            usize::from(cc == (9, 0)),
            "sm_{}{}: attention_wg",
            cc.0,
            cc.1
        );
        let mma = kernels.iter().find(|k| k.name == "attention_mma");
        assert!(
            mma.is_some_and(|k| k.shared_bytes == 46080),
            "sm_{}{}: attention_mma's shared memory: {mma:?}",
            cc.0,
            cc.1
        );
    }
}
