#![allow(non_upper_case_globals)]
#![allow(non_camel_case_types)]
#![allow(non_snake_case)]
#![allow(clippy::all)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

extern "C" {
    /// mlx-c's `mlx_pad`, declared here rather than by bindgen: mlx-rs 0.33 hands it the pad
    /// mode as `*const i8`, while bindgen spells `const char*` as `*const c_char`, which is
    /// `*const u8` where C's `char` is unsigned (Linux on Arm). A pointer is a pointer to the
    /// C ABI, so `i8` is right on every target. Added by the vendoring project; see VENDORED.md.
    pub fn mlx_pad(
        res: *mut mlx_array,
        a: mlx_array,
        axes: *const ::std::os::raw::c_int,
        axes_num: usize,
        low_pad_size: *const ::std::os::raw::c_int,
        low_pad_size_num: usize,
        high_pad_size: *const ::std::os::raw::c_int,
        high_pad_size_num: usize,
        pad_value: mlx_array,
        mode: *const i8,
        s: mlx_stream,
    ) -> ::std::os::raw::c_int;
}

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
