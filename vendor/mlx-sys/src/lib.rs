#![allow(non_upper_case_globals)]
#![allow(non_camel_case_types)]
#![allow(non_snake_case)]
#![allow(clippy::all)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// mlx-rs seeds its default random state with macOS' `mach_approximate_time` (through mach-sys)
/// on every target, and only Apple's libc defines it: this stand-in lets `mlx_rs::random` link
/// elsewhere. Nanoseconds since the Unix epoch; only its variation matters for a seed.
/// Added by the vendoring project; see VENDORED.md.
#[cfg(not(target_vendor = "apple"))]
#[no_mangle]
pub extern "C" fn mach_approximate_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64)
}
