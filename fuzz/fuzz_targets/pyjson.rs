//! `json.loads` of any bytes: never a panic, and what parses survives a round trip. Python's
//! own round trip is exact for every document without NaN, which `dumps` then refuses in the
//! compact style and writes as `NaN` in the spaced one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pyjson::{dumps, dumps_spaced, loads, py_repr, Style};

fuzz_target!(|data: &[u8]| {
    let Ok(parsed) = loads(data) else { return };
    let spaced = dumps_spaced(&parsed.value);
    let again = loads(spaced.as_bytes()).expect("dumps writes what loads reads");
    assert_eq!(
        dumps_spaced(&again.value),
        spaced,
        "the spaced round trip is a fixed point"
    );
    if let Ok(compact) = dumps(&parsed.value, Style::Compact) {
        let back = loads(compact.as_bytes()).expect("compact output parses");
        assert_eq!(
            dumps(&back.value, Style::Compact).ok().as_deref(),
            Some(&compact[..])
        );
    }
    let _ = py_repr(&parsed.value);
});
