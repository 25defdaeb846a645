//! How far two engines' answers to the same requests agree: the pick of every answer (the
//! choice, the score's most probable level, the noul's side of 0.5) and the largest
//! difference of any probability a client reads. What `--int8` is held to against f32.

use laya_core::decide::{Decided, Decision};
use laya_core::decode::AnswerBody;
use laya_core::request::{parse_decision, Limits};
use laya_core::routing::RoutingConfig;
use pyjson::Value;

use crate::fixtures_dir;

/// Every single-state request body of a workload file (`{"body": …}` lines) that passes
/// validation, with its id.
pub fn workload_decisions(
    path: &std::path::Path,
    routing: &RoutingConfig,
) -> Vec<(String, Decision)> {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let Ok(case) = pyjson::loads(line) else {
            continue;
        };
        let Some(obj) = case.value.as_object() else {
            continue;
        };
        let (Some(body), None) = (obj.get("body"), obj.get("path")) else {
            continue;
        };
        let id = match obj.get("id") {
            Some(Value::Str(id)) => id.clone(),
            _ => format!("line {}", out.len() + 1),
        };
        let body = pyjson::dumps_spaced(body).into_bytes();
        if let Ok(parsed) = parse_decision(&body, &Limits::default(), routing) {
            out.push((id, parsed.into()));
        }
    }
    out
}

/// The fixture workload `name` (`smoke`, `short`, …).
pub fn fixture_workload(name: &str) -> std::path::PathBuf {
    fixtures_dir()
        .join("workloads")
        .join(format!("{name}.jsonl"))
}

/// Answers compared so far.
#[derive(Debug, Default, Clone)]
pub struct Agreement {
    /// Answers compared.
    pub answers: usize,
    /// Answers whose pick differs, as `request id / question`.
    pub flipped: Vec<String>,
    /// The widest margin among the flipped answers: the reference's two largest
    /// probabilities apart (a noul's distance from 0.5, doubled).
    pub widest_flip_margin: f64,
    /// Every reference answer's margin (see `widest_flip_margin`), in order.
    pub margins: Vec<f64>,
    /// The largest difference of a probability (choice and score probabilities, the noul
    /// value), and where.
    pub max_probability_diff: f64,
    pub max_at: String,
}

impl Agreement {
    /// Picks that agree, as a fraction (1 when nothing was compared).
    pub fn rate(&self) -> f64 {
        if self.answers == 0 {
            1.0
        } else {
            1.0 - self.flipped.len() as f64 / self.answers as f64
        }
    }

    /// Compares `b`'s answers to request `id` with `a`'s (the reference).
    pub fn add(&mut self, id: &str, a: &Decided, b: &Decided) {
        for (sa, sb) in a.states.iter().zip(&b.states) {
            for ((q, xa), (_, xb)) in sa.result.answers.iter().zip(&sb.result.answers) {
                let at = format!("{id}/{q}");
                self.answers += 1;
                self.margins.push(margin(&xa.body));
                let (pa, pb) = (probabilities(&xa.body), probabilities(&xb.body));
                if pick(&xa.body) != pick(&xb.body) || pa.len() != pb.len() {
                    self.flipped.push(at.clone());
                    self.widest_flip_margin = self.widest_flip_margin.max(margin(&xa.body));
                }
                for (u, v) in pa.iter().zip(&pb) {
                    let d = (u - v).abs();
                    if d > self.max_probability_diff {
                        self.max_probability_diff = d;
                        self.max_at = at.clone();
                    }
                }
            }
        }
    }
}

/// The answer's pick, as a comparable index.
fn pick(body: &AnswerBody) -> Option<usize> {
    match body {
        AnswerBody::Choice {
            choice,
            probabilities,
            ..
        } => probabilities.iter().position(|(label, _)| label == choice),
        AnswerBody::Score { probabilities, .. } => argmax(probabilities),
        AnswerBody::Noul { noul, .. } => Some(usize::from(*noul >= 0.5)),
    }
}

fn probabilities(body: &AnswerBody) -> Vec<f64> {
    match body {
        AnswerBody::Choice { probabilities, .. } => probabilities.iter().map(|(_, p)| *p).collect(),
        AnswerBody::Score { probabilities, .. } => probabilities.clone(),
        AnswerBody::Noul { noul, .. } => vec![*noul],
    }
}

/// How far the pick is from a tie: the two largest probabilities apart, or for a noul twice
/// its distance from 0.5 (its two sides' probabilities apart).
fn margin(body: &AnswerBody) -> f64 {
    let mut p = probabilities(body);
    if let AnswerBody::Noul { noul, .. } = body {
        return (2.0 * noul - 1.0).abs();
    }
    p.sort_by(|a, b| b.total_cmp(a));
    match p.as_slice() {
        [a, b, ..] => a - b,
        _ => 1.0,
    }
}

fn argmax(v: &[f64]) -> Option<usize> {
    (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j]).then(j.cmp(&i)))
}
