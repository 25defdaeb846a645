//! From raw logits to typed answers: upstream `Agent._decode_answers` (spec `model.md` 4).
//!
//! The arithmetic follows numpy's exactly where it decides a 4th decimal: float32 softmax and
//! entropy with numpy's pairwise summation, the expected score in float64, and Python's
//! `round(x, 4)`.

use crate::config::{AgentConfig, QType};
use crate::engine::RowLogits;
use crate::question::{Kind, Question};
use pyjson::{round4, Value};

/// One decoded answer, in the fields and order upstream emits them.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub body: AnswerBody,
    pub answer_confidence: f64,
    pub act_probability: f64,
    /// Set by `predict_long`: which window decided this answer.
    pub window: Option<WindowRef>,
    /// Set by the confidence gate (`min_confidence`).
    pub gate: Option<Gate>,
    /// Jev's confidence (server's `x_jev_confidence`), on choice and score answers.
    pub x_jev_confidence: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AnswerBody {
    Choice {
        /// The winning label, with its original JSON type.
        choice: Value,
        /// `(label, rounded probability)` in criteria order.
        probabilities: Vec<(Value, f64)>,
        confidence: f64,
    },
    Score {
        score: f64,
        legend: Vec<String>,
        probabilities: Vec<f64>,
        confidence: f64,
    },
    Noul {
        noul: f64,
        confidence: f64,
    },
}

impl AnswerBody {
    pub fn type_name(&self) -> &'static str {
        match self {
            AnswerBody::Choice { .. } => "choice",
            AnswerBody::Score { .. } => "score",
            AnswerBody::Noul { .. } => "noul",
        }
    }

    /// The `confidence` field (entropy-based for choice/score, max(p) for noul), rounded.
    pub fn confidence(&self) -> f64 {
        match self {
            AnswerBody::Choice { confidence, .. }
            | AnswerBody::Score { confidence, .. }
            | AnswerBody::Noul { confidence, .. } => *confidence,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowRef {
    pub index: usize,
    pub token_start: usize,
    pub token_end: usize,
    pub count: usize,
}

/// The confidence gate's verdict on one answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gate {
    pub low_confidence: bool,
    pub abstention: &'static str,
    pub threshold: f64,
}

/// numpy's pairwise summation (`pairwise_sum` in `loops_utils.h.src`), which is what
/// `ndarray.sum()` does on a contiguous array; summing in another order moves the last bits.
pub trait PairwiseSum: Copy + std::ops::Add<Output = Self> {
    const NEG_ZERO: Self;
    fn pairwise_sum(a: &[Self]) -> Self {
        let n = a.len();
        if n < 8 {
            let mut res = Self::NEG_ZERO;
            for &x in a {
                res = res + x;
            }
            res
        } else if n <= 128 {
            let mut r = [a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]];
            let mut i = 8;
            while i < n - n % 8 {
                for j in 0..8 {
                    r[j] = r[j] + a[i + j];
                }
                i += 8;
            }
            let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
            while i < n {
                res = res + a[i];
                i += 1;
            }
            res
        } else {
            let mut n2 = n / 2;
            n2 -= n2 % 8;
            Self::pairwise_sum(&a[..n2]) + Self::pairwise_sum(&a[n2..])
        }
    }
}

impl PairwiseSum for f32 {
    const NEG_ZERO: f32 = -0.0;
}

impl PairwiseSum for f64 {
    const NEG_ZERO: f64 = -0.0;
}

/// `p = exp(z - max z); p /= p.sum()` in float32, with `z = logits / T` (numpy casts the Python
/// float temperature to float32 first).
pub fn softmax_f32(logits: &[f32], temperature: f32) -> Vec<f32> {
    let z: Vec<f32> = logits.iter().map(|&x| x / temperature).collect();
    let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut p: Vec<f32> = z.iter().map(|&x| (x - max).exp()).collect();
    let sum = f32::pairwise_sum(&p);
    for v in &mut p {
        *v /= sum;
    }
    p
}

/// Upstream `unpermute_probs`: slot order back to option order.
fn unpermute(p: Vec<f32>, order: Option<&[usize]>) -> Vec<f32> {
    match order {
        Some(order) if order.len() == p.len() => {
            let mut canonical = vec![0.0; p.len()];
            for (slot, &option) in order.iter().enumerate() {
                canonical[option] = p[slot];
            }
            canonical
        }
        _ => p,
    }
}

/// Upstream `answer_confidence`: max(p) clipped to [0, 1] (1.0 for no options).
fn answer_confidence(p: &[f32]) -> f64 {
    if p.is_empty() {
        return 1.0;
    }
    let max = p.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    max.clamp(0.0, 1.0)
}

/// Upstream `confidence_from_probs`: `1 - H(p)/ln k`, entropy summed in float32.
fn entropy_confidence(p: &[f32]) -> f64 {
    let k = p.len();
    if k < 2 {
        return 1.0;
    }
    let terms: Vec<f32> = p.iter().map(|&x| x * x.clamp(1e-12, 1.0).ln()).collect();
    let ent = -(f32::pairwise_sum(&terms) as f64);
    let score = 1.0 - ent / (k as f64).ln();
    score.clamp(0.0, 1.0)
}

/// First index of the maximum, as `np.argmax`.
fn argmax(p: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in p.iter().enumerate() {
        if v > p[best] {
            best = i;
        }
    }
    best
}

/// `torch.softmax(act.float(), -1)[0]`: the probability of acting.
pub fn act_probability(act_logits: &[f32]) -> f64 {
    if act_logits.is_empty() {
        return 1.0;
    }
    softmax_f32(act_logits, 1.0)[0] as f64
}

/// Decodes one row into the answer of `q`, every number rounded as upstream rounds it.
pub fn decode(q: &Question, out: &RowLogits, cfg: &AgentConfig) -> Answer {
    decode_unrounded(q, out, cfg).rounded()
}

/// The same answer before Python's `round(x, 4)`: what parity checks use to tell a genuine
/// difference from a value that sits on a rounding boundary.
pub fn decode_unrounded(q: &Question, out: &RowLogits, cfg: &AgentConfig) -> Answer {
    let k = out.logits.len();
    let temperature = cfg.temperature_for(q.qtype, k) as f32;
    let p = unpermute(
        softmax_f32(&out.logits, temperature),
        q.option_order.as_deref(),
    );
    let body = match &q.kind {
        Kind::Choice { labels } => AnswerBody::Choice {
            choice: labels.get(argmax(&p)).cloned().unwrap_or(Value::Null),
            probabilities: labels
                .iter()
                .cloned()
                .zip(p.iter().map(|&v| v as f64))
                .collect(),
            confidence: entropy_confidence(&p),
        },
        Kind::Score { legend } => {
            let weighted: Vec<f64> = p
                .iter()
                .enumerate()
                .map(|(i, &v)| i as f64 * v as f64)
                .collect();
            AnswerBody::Score {
                score: f64::pairwise_sum(&weighted),
                legend: legend.clone(),
                probabilities: p.iter().map(|&v| v as f64).collect(),
                confidence: entropy_confidence(&p),
            }
        }
        Kind::Noul => {
            let p1 = p.get(1).copied().unwrap_or(0.0) as f64;
            AnswerBody::Noul {
                noul: p1,
                confidence: p1.max(1.0 - p1),
            }
        }
    };
    debug_assert_eq!(
        q.qtype == QType::Noul,
        matches!(body, AnswerBody::Noul { .. })
    );
    Answer {
        body,
        answer_confidence: answer_confidence(&p),
        act_probability: act_probability(&out.act_logits),
        window: None,
        gate: None,
        x_jev_confidence: None,
    }
}

impl Answer {
    /// Applies Python's `round(x, 4)` to every number upstream rounds.
    pub fn rounded(mut self) -> Answer {
        match &mut self.body {
            AnswerBody::Choice {
                probabilities,
                confidence,
                ..
            } => {
                for (_, p) in probabilities.iter_mut() {
                    *p = round4(*p);
                }
                *confidence = round4(*confidence);
            }
            AnswerBody::Score {
                score,
                probabilities,
                confidence,
                ..
            } => {
                *score = round4(*score);
                for p in probabilities.iter_mut() {
                    *p = round4(*p);
                }
                *confidence = round4(*confidence);
            }
            AnswerBody::Noul { noul, confidence } => {
                *noul = round4(*noul);
                *confidence = round4(*confidence);
            }
        }
        self.answer_confidence = round4(self.answer_confidence);
        self.act_probability = round4(self.act_probability);
        self
    }
}
