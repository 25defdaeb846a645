//! Bulk comparison against CPython 3.11 on vector files written by `gen_vectors.py` (run it
//! first; the files are too large to commit). Ignored by default:
//! `PYJSON_VECTORS=/tmp/pyjson-vectors cargo test -p pyjson --release -- --ignored`

use std::path::PathBuf;

use super::*;

fn lines(name: &str) -> Vec<String> {
    let dir = std::env::var_os("PYJSON_VECTORS")
        .map(PathBuf::from)
        .expect("set PYJSON_VECTORS to the directory gen_vectors.py wrote");
    let text = std::fs::read_to_string(dir.join(name)).expect("vector file");
    text.lines().map(str::to_owned).collect()
}

fn unhex(h: &str) -> Vec<u8> {
    (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

fn text(h: &str) -> String {
    String::from_utf8(unhex(h)).expect("surrogate-free UTF-8")
}

fn f64_of(h: &str) -> f64 {
    f64::from_bits(u64::from_str_radix(h, 16).expect("hex bits"))
}

#[test]
#[ignore]
fn float_repr_vectors() {
    let all = lines("float_repr.tsv");
    for line in &all {
        let (b, want) = line.split_once('\t').expect("2 columns");
        assert_eq!(float_repr(f64_of(b)), want, "bits {b}");
    }
    eprintln!("float_repr: {} vectors", all.len());
}

#[test]
#[ignore]
fn round_vectors() {
    let all = lines("round.tsv");
    for line in &all {
        let cols: Vec<&str> = line.split('\t').collect();
        let (x, n) = (f64_of(cols[0]), cols[1].parse::<i32>().expect("ndigits"));
        let got = round_ndigits(x, n);
        if cols[2] == "OVERFLOW" {
            assert_eq!(got, Err(RoundOverflowError), "round({x:?}, {n})");
        } else {
            let want = f64_of(cols[2]);
            let got = got.expect("no overflow");
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "round({x:?}, {n}) = {got:?}, want {want:?}"
            );
            if n == 4 {
                assert_eq!(round4(x).to_bits(), want.to_bits());
            }
        }
    }
    eprintln!("round: {} vectors", all.len());
}

#[test]
#[ignore]
fn repr_char_vectors() {
    let all = lines("repr_chars.tsv");
    for line in &all {
        let (cp, want) = line.split_once('\t').expect("2 columns");
        let c = char::from_u32(u32::from_str_radix(cp, 16).expect("hex")).expect("scalar");
        assert_eq!(repr_str(&c.to_string()), text(want), "U+{cp}");
    }
    eprintln!("repr chars: {} vectors", all.len());
}

#[test]
#[ignore]
fn document_vectors() {
    let all = lines("docs.tsv");
    let (mut ok, mut err) = (0, 0);
    for line in &all {
        let cols: Vec<&str> = line.split('\t').collect();
        let body = unhex(cols[0]);
        let got = loads(&body);
        if cols[1] == "ERR" {
            assert!(
                got.is_err(),
                "python refused {:?}, we parsed {got:?}",
                String::from_utf8_lossy(&body)
            );
            err += 1;
            continue;
        }
        let parsed = got.unwrap_or_else(|e| {
            panic!(
                "python parsed {:?}, we failed: {e}",
                String::from_utf8_lossy(&body)
            )
        });
        assert_eq!(
            parsed.has_lone_surrogate,
            cols[2] == "1",
            "{:?}",
            String::from_utf8_lossy(&body)
        );
        let v = &parsed.value;
        match dumps(v, Style::Compact) {
            Ok(t) => assert_eq!(t, text(cols[3])),
            Err(_) => assert_eq!(cols[3], hex("NONFINITE")),
        }
        assert_eq!(dumps(v, Style::Spaced).expect("allow_nan"), text(cols[4]));
        assert_eq!(py_repr(v), text(cols[5]));
        assert_eq!(py_str(v), text(cols[6]));
        // The value survives a round trip through our own text.
        let again = loads(dumps(v, Style::Spaced).expect("allow_nan").as_bytes()).expect("reparse");
        assert!(py_equal(v, &again.value) || has_nan(v));
        ok += 1;
    }
    eprintln!("documents: {ok} parsed, {err} refused, as python did");
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn has_nan(v: &Value) -> bool {
    match v {
        Value::Float(x) => x.is_nan(),
        Value::Array(items) => items.iter().any(has_nan),
        Value::Object(o) => o.values().any(has_nan),
        _ => false,
    }
}
