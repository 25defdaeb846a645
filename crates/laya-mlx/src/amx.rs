//! Intel AMX, shared by the two kernels that use its tiles (`int8.rs`'s `tdpbusd` and
//! `f32_amx.rs`'s `tdpbf16ps`): whether the CPU has a tile unit and Linux lets this process
//! use it, and the one tile configuration both load.
//!
//! This crate enables no AMX target feature, so the compiler emits no tile instruction of its
//! own: the kernels' `asm!` blocks are the only code that touches the tiles. Each kernel call
//! loads the configuration once and releases the tiles at its end (the guard
//! [`TileConfig::load`] returns), so the configuration is the one piece of tile state that
//! lasts from one `asm!` block to the next within a call. The module is x86-64 only.

/// A unit of the tile multiplier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// `tdpbusd` and the other int8 products.
    Int8,
    /// `tdpbf16ps`.
    Bf16,
}

/// Whether the CPU has AMX with `unit` and Linux lets this process use the tile registers
/// (asked once for the whole process: `ARCH_REQ_XCOMP_PERM` for `XFEATURE_XTILEDATA`, then
/// read back).
pub(crate) fn ready(unit: Unit) -> bool {
    // CPUID leaf 7, EDX: bit 22 AMX-BF16, bit 24 AMX-TILE, bit 25 AMX-INT8.
    let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
    let bit = match unit {
        Unit::Int8 => 25,
        Unit::Bf16 => 22,
    };
    edx & (1 << 24) != 0 && edx & (1 << bit) != 0 && permitted()
}

#[cfg(target_os = "linux")]
fn permitted() -> bool {
    static PERMITTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PERMITTED.get_or_init(|| {
        const ARCH_GET_XCOMP_PERM: libc::c_long = 0x1022;
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        let mut granted: u64 = 0;
        // SAFETY: the two `arch_prctl` requests take an integer and a pointer to a u64.
        unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            ) == 0
                && libc::syscall(
                    libc::SYS_arch_prctl,
                    ARCH_GET_XCOMP_PERM,
                    &mut granted as *mut u64,
                ) == 0
                && granted & (1 << XFEATURE_XTILEDATA) != 0
        }
    })
}

#[cfg(not(target_os = "linux"))]
fn permitted() -> bool {
    false
}

/// `ldtilecfg`'s 64 bytes: palette 1, then each tile's bytes a row and rows.
#[repr(C, align(64))]
pub(crate) struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

impl TileConfig {
    /// Rows of every tile; also the rows of a tile product.
    pub const ROWS: usize = 16;
    /// Bytes of each tile row.
    pub const ROW_BYTES: usize = 64;

    /// All eight tiles at their largest: 16 rows of 64 bytes.
    pub fn full() -> TileConfig {
        let mut cfg = TileConfig {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            colsb: [0; 16],
            rows: [0; 16],
        };
        for t in 0..8 {
            cfg.colsb[t] = Self::ROW_BYTES as u16;
            cfg.rows[t] = Self::ROWS as u8;
        }
        cfg
    }

    /// Loads the configuration (zeroing every tile), until the guard returned is dropped,
    /// which releases the tiles, on a panic too.
    ///
    /// # Safety
    /// [`ready`] must have said yes for the unit the caller then uses, and the guard must be
    /// dropped on the thread that loaded it.
    #[must_use = "the tiles are released when the guard is dropped"]
    pub unsafe fn load(&self) -> Loaded {
        std::arch::asm!("ldtilecfg [{}]", in(reg) self, options(nostack, readonly));
        Loaded(std::marker::PhantomData)
    }
}

/// Tiles configured on this thread ([`TileConfig::load`]); released when dropped.
pub(crate) struct Loaded(std::marker::PhantomData<*const ()>);

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: the tiles were configured on this thread (`Loaded` is not `Send`), by a
        // caller that AMX was granted to.
        unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) };
    }
}
