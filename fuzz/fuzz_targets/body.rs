//! Request body decoding (`Content-Encoding: gzip`, `zstd`, none): never a panic, and never
//! more than the limit out. The first byte picks the encoding and whether the rest is sent
//! as is or first compressed (then perhaps truncated, flipped or extended), so the fuzzer
//! reaches deep into valid streams as well as broken ones.
#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;
use sys1rust::http::body::decode;

/// Small enough that a fuzzer's bodies reach it, as the server's 2 MiB would not.
const LIMIT: usize = 4096;

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).expect("in memory");
    e.finish().expect("in memory")
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let encoding = ["gzip", "zstd", " X-GZIP ", "identity"][usize::from(pick & 3)];
    let mut raw = rest.to_vec();
    if pick & 4 != 0 {
        raw = match pick & 3 {
            1 => zstd::bulk::compress(rest, 1).expect("in memory"),
            3 => raw,
            _ => gzip(rest),
        };
        let mid = raw.len() / 2;
        match pick >> 3 & 3 {
            1 => raw.truncate(mid),
            2 if mid < raw.len() => raw[mid] ^= 0x5a,
            3 => raw.extend_from_slice(rest),
            _ => {}
        }
    }
    let identity = pick & 3 == 3;
    match decode(Some(encoding), raw.clone(), LIMIT) {
        Ok(out) if identity => assert_eq!(out, raw, "an unknown encoding leaves the body as is"),
        Ok(out) => {
            assert!(out.len() <= LIMIT, "{} bytes out of {LIMIT}", out.len());
            if pick & 0x1c == 4 && rest.len() <= LIMIT {
                assert_eq!(out, rest, "an intact stream decodes to what was compressed");
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
