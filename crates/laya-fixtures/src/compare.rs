//! The parity rules of the engine issue, on rendered JSON text and on decoded answers.

use laya_core::decode::{Answer, AnswerBody};

/// One number that differed from upstream's text and was accepted as a rounding-boundary case.
#[derive(Debug, Clone, PartialEq)]
pub struct NumberDiff {
    pub mine: f64,
    pub upstream: f64,
    /// Upstream's value before rounding, recomputed from its raw logits.
    pub unrounded: f64,
}

#[derive(Debug, Clone, PartialEq)]
enum Token<'a> {
    Number(f64, &'a str),
    Other(&'a str),
}

/// Splits JSON text into tokens, numbers parsed, everything else compared as text.
fn tokens(text: &str) -> Vec<Token<'_>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(Token::Other(&text[start..i.min(b.len())]));
        } else if c == b'-' || c.is_ascii_digit() {
            let start = i;
            i += 1;
            while i < b.len()
                && (b[i].is_ascii_digit() || matches!(b[i], b'.' | b'e' | b'E' | b'+' | b'-'))
            {
                i += 1;
            }
            let s = &text[start..i];
            out.push(Token::Number(s.parse().unwrap_or(f64::NAN), s));
        } else if c.is_ascii_alphabetic() {
            let start = i;
            while i < b.len() && b[i].is_ascii_alphabetic() {
                i += 1;
            }
            out.push(Token::Other(&text[start..i]));
        } else {
            out.push(Token::Other(&text[i..i + 1]));
            i += 1;
        }
    }
    out
}

/// Distance from `x` to the nearest 4-decimal rounding boundary (`(k + 0.5) / 10^4`).
fn boundary_distance(x: f64) -> f64 {
    let scaled = x * 1e4;
    ((scaled - scaled.floor()) - 0.5).abs() / 1e4
}

/// The f32 rule: `mine` (rounded answers as JSON text) must equal `upstream` (upstream's text)
/// token for token, except a number one unit off in the 4th decimal whose unrounded upstream
/// value (the same position in `unrounded`, a rendering of the unrounded answers) lies within
/// `boundary` of a rounding boundary. Returns the accepted differences.
pub fn check_f32(
    mine: &str,
    upstream: &str,
    unrounded: &str,
    boundary: f64,
) -> Result<Vec<NumberDiff>, String> {
    let (a, b, u) = (tokens(mine), tokens(upstream), tokens(unrounded));
    if a.len() != b.len() || b.len() != u.len() {
        return Err(format!(
            "structure differs:\n mine     {mine}\n upstream {upstream}"
        ));
    }
    let mut diffs = Vec::new();
    // `x_jev_confidence` is computed from the *rounded* probabilities, so a probability that
    // legitimately rounded the other way carries into it: within the answer that had such a
    // boundary case, it may differ by what one unit in one probability can move it.
    let mut boundary_in_answer = false;
    let mut last_key = "";
    for (i, ((x, y), z)) in a.iter().zip(&b).zip(&u).enumerate() {
        match (x, y, z) {
            (Token::Number(m, ms), Token::Number(p, ps), Token::Number(raw, _)) => {
                if ms == ps {
                    continue;
                }
                let one_unit = ((m - p).abs() - 1e-4).abs() < 1e-9;
                if one_unit && boundary_distance(*raw) <= boundary {
                    diffs.push(NumberDiff {
                        mine: *m,
                        upstream: *p,
                        unrounded: *raw,
                    });
                    boundary_in_answer = true;
                } else if last_key == "\"x_jev_confidence\""
                    && boundary_in_answer
                    && (m - p).abs() <= 5e-4 + 1e-9
                {
                    diffs.push(NumberDiff {
                        mine: *m,
                        upstream: *p,
                        unrounded: *raw,
                    });
                } else {
                    return Err(format!(
                        "{ms} != upstream {ps} (unrounded {raw}, {:.2e} from a boundary):\n mine     {mine}\n upstream {upstream}",
                        boundary_distance(*raw)
                    ));
                }
            }
            (Token::Other(s), Token::Other(t), _) if s == t => {
                if s.starts_with('"') && a.get(i + 1) == Some(&Token::Other(":")) {
                    last_key = s;
                    if *s == "\"type\"" {
                        boundary_in_answer = false;
                    }
                }
            }
            _ => {
                return Err(format!(
                    "text differs:\n mine     {mine}\n upstream {upstream}"
                ))
            }
        }
    }
    Ok(diffs)
}

/// Running totals of the f16 rule, so precision losses stay visible.
#[derive(Debug, Clone, Default)]
pub struct F16Stats {
    pub errors: Vec<f64>,
    pub near_tie_flips: usize,
    pub answers: usize,
}

impl F16Stats {
    pub fn max(&self) -> f64 {
        self.errors.iter().copied().fold(0.0, f64::max)
    }

    pub fn p99(&self) -> f64 {
        let mut e = self.errors.clone();
        e.sort_by(f64::total_cmp);
        e.get((e.len().saturating_sub(1) as f64 * 0.99).round() as usize)
            .copied()
            .unwrap_or(0.0)
    }

    pub fn summary(&self) -> String {
        format!(
            "{} answers, {} probabilities: max error {:.5}, p99 {:.5}, near-tie argmax flips {}",
            self.answers,
            self.errors.len(),
            self.max(),
            self.p99(),
            self.near_tie_flips
        )
    }
}

/// The probabilities an answer reports (noul: `[1 - p, p]`) and its argmax.
fn probabilities(a: &Answer) -> (Vec<f64>, usize) {
    let p: Vec<f64> = match &a.body {
        AnswerBody::Choice { probabilities, .. } => probabilities.iter().map(|(_, p)| *p).collect(),
        AnswerBody::Score { probabilities, .. } => probabilities.clone(),
        AnswerBody::Noul { noul, .. } => vec![1.0 - noul, *noul],
    };
    let mut best = 0;
    for (i, v) in p.iter().enumerate() {
        if *v > p[best] {
            best = i;
        }
    }
    (p, best)
}

/// The f16 rule: every probability within 1e-2 of upstream's f32 value (`upstream` unrounded,
/// decoded from its raw logits) and the argmax equal unless upstream's top two are within 0.02.
pub fn check_f16(mine: &Answer, upstream: &Answer, stats: &mut F16Stats) -> Result<(), String> {
    let (pm, am) = probabilities(mine);
    let (pu, au) = probabilities(upstream);
    if pm.len() != pu.len() {
        return Err(format!(
            "{} probabilities, upstream has {}",
            pm.len(),
            pu.len()
        ));
    }
    stats.answers += 1;
    for (m, u) in pm.iter().zip(&pu) {
        let e = (m - u).abs();
        stats.errors.push(e);
        if e > 1e-2 {
            return Err(format!(
                "probability {m} vs upstream {u} (error {e:.4} > 1e-2)"
            ));
        }
    }
    if am != au {
        let mut sorted = pu.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let gap = sorted[0] - sorted.get(1).copied().unwrap_or(0.0);
        if gap <= 0.02 {
            stats.near_tie_flips += 1;
        } else {
            return Err(format!(
                "argmax {am} vs upstream {au} with a gap of {gap:.4}"
            ));
        }
    }
    Ok(())
}
