//! Confidence reporting after decoding: the `min_confidence` abstention gate (upstream
//! `laya.confidence.apply_confidence_gate`) and Jev's confidence formula (`x_jev_confidence`).

use crate::agent::StateResult;
use crate::config::{temp_bucket, QType};
use crate::decode::{Answer, AnswerBody, Gate};
use pyjson::round4;

/// A validated `min_confidence`: one threshold, or per option-count bucket (`"choice:3-5"`,
/// ..., plus `"default"`).
#[derive(Debug, Clone, PartialEq)]
pub enum MinConfidence {
    Scalar(f64),
    Buckets(Vec<(String, f64)>),
}

impl MinConfidence {
    /// Upstream `resolve_min_confidence`: the answer's bucket, else `"default"`, else 0.0.
    fn threshold_for(&self, a: &Answer) -> f64 {
        match self {
            MinConfidence::Scalar(t) => *t,
            MinConfidence::Buckets(map) => {
                let bucket = temp_bucket(answer_qtype(a), option_count(a));
                let find = |key: &str| map.iter().find(|(k, _)| k == key).map(|(_, t)| *t);
                find(&bucket).or_else(|| find("default")).unwrap_or(0.0)
            }
        }
    }
}

/// Every bucket name a map may use: `<type>:<2|3-5|6-10|11+>` for the three types.
pub fn bucket_keys() -> Vec<String> {
    let mut keys = Vec::new();
    for t in ["choice", "score", "noul"] {
        for size in ["2", "3-5", "6-10", "11+"] {
            keys.push(format!("{t}:{size}"));
        }
    }
    keys
}

fn answer_qtype(a: &Answer) -> QType {
    match a.body {
        AnswerBody::Choice { .. } => QType::Choice,
        AnswerBody::Score { .. } => QType::Score,
        AnswerBody::Noul { .. } => QType::Noul,
    }
}

/// Options an answer reports (`len(probabilities)`, 2 for noul), as upstream's gate counts them.
fn option_count(a: &Answer) -> usize {
    match &a.body {
        AnswerBody::Choice { probabilities, .. } => probabilities.len(),
        AnswerBody::Score { probabilities, .. } => probabilities.len(),
        AnswerBody::Noul { .. } => 2,
    }
}

/// Marks every answer with the gate's verdict. Our answers always carry a finite
/// `answer_confidence`, so upstream's "unevaluated" state cannot arise here.
pub fn apply_gate(results: &mut [StateResult], min: &MinConfidence) {
    for r in results {
        for (_, a) in &mut r.answers {
            let threshold = min.threshold_for(a);
            let low = a.answer_confidence < threshold;
            a.gate = Some(Gate {
                low_confidence: low,
                abstention: if low { "abstained" } else { "passed" },
                threshold,
            });
        }
    }
}

/// Jev's confidence for a choice or score answer, from its *rounded* probabilities (TypeSafe's
/// `confidence_metrics.py`, as upstream `jev_confidence` computes it), rounded to 4 decimals.
///
/// choice: `(max(p) - 1/n) / (1 - 1/n)`; score: `max(0, 1 - Σ p_i |i - mode| / D)` with `D` the
/// same spread for a uniform distribution. One option gives 1.0; a zero total reads as uniform.
pub fn jev_confidence(a: &Answer) -> Option<f64> {
    let p: Vec<f64> = match &a.body {
        AnswerBody::Choice { probabilities, .. } => probabilities.iter().map(|(_, p)| *p).collect(),
        AnswerBody::Score { probabilities, .. } => probabilities.clone(),
        AnswerBody::Noul { .. } => return None,
    };
    if p.is_empty() || !p.iter().all(|v| v.is_finite() && *v >= 0.0) {
        return None;
    }
    let n = p.len();
    if n == 1 {
        return Some(1.0);
    }
    // Python's sum() adds left to right.
    let total: f64 = p.iter().fold(0.0, |acc, v| acc + v);
    let p: Vec<f64> = if total != 0.0 {
        p.iter().map(|v| v / total).collect()
    } else {
        vec![1.0 / n as f64; n]
    };
    let nf = n as f64;
    let conf = if matches!(a.body, AnswerBody::Choice { .. }) {
        let max = p.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (max - 1.0 / nf) / (1.0 - 1.0 / nf)
    } else {
        let mut mode = 0;
        for (i, v) in p.iter().enumerate() {
            if *v > p[mode] {
                mode = i;
            }
        }
        let spread = p
            .iter()
            .enumerate()
            .fold(0.0, |acc, (i, v)| acc + v * (i as f64 - mode as f64).abs());
        let center = (nf - 1.0) / 2.0;
        let uniform = (0..n).fold(0.0, |acc, i| acc + (i as f64 - center).abs()) / nf;
        (1.0 - spread / uniform).max(0.0)
    };
    Some(round4(conf))
}

/// Adds `x_jev_confidence` to every choice and score answer (the server's default mode).
pub fn add_jev_confidence(results: &mut [StateResult]) {
    for r in results {
        for (_, a) in &mut r.answers {
            a.x_jev_confidence = jev_confidence(a);
        }
    }
}
