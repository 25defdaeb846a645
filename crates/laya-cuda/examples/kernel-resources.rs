//! Registers, spills and shared memory of every kernel of the forward pass, as ptxas reports
//! them for the options the engine compiles with, and a hash of each kernel's machine code.
//! Needs NVRTC, not a GPU (`scripts/setup-nvrtc.sh` prints its directory for
//! `LD_LIBRARY_PATH`), so a kernel change can be checked for register pressure before it goes
//! to a GPU, and a reshaped source (helpers moved out, nothing computed differently) checked
//! against the measured one: the same hash, the same code.
//!
//! ```text
//! cargo run --release -p laya-cuda --example kernel-resources -- [compute capability=9.0] [hidden=1024]
//! ```

type BoxError = Box<dyn std::error::Error>;

fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let cc = args.next().unwrap_or_else(|| "9.0".into());
    let (major, minor) = cc
        .split_once('.')
        .ok_or("compute capability as MAJOR.MINOR, e.g. 9.0")?;
    let cc = (major.parse()?, minor.parse()?);
    let hidden: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1024);
    laya_cuda::load_nvrtc()?;
    let kernels = laya_cuda::compile::kernel_resources(cc, hidden)?;
    println!(
        "sm_{}{}, hidden {hidden}\n{:<18} {:>9} {:>12} {:>11} {:>12}  code sha256",
        cc.0, cc.1, "kernel", "registers", "spill stores", "spill loads", "shared bytes"
    );
    for k in kernels {
        println!(
            "{:<18} {:>9} {:>12} {:>11} {:>12}  {}",
            k.name,
            k.registers,
            k.spill_stores,
            k.spill_loads,
            k.shared_bytes,
            k.code_sha256.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}
