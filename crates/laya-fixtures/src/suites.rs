//! Whole checks that every engine's tests run the same way.

use laya_core::agent::Agent;
use laya_core::decode::{self, Answer};
use laya_core::engine::{Forward, RowLogits};

use crate::{check_f16, decision_cases, DecisionCase, F16Stats};

/// Every decision reference of checkpoint `ckpt` answered by `engine`, each probability
/// checked against upstream's f32 answer with the f16 rule ([`check_f16`]). Returns the
/// statistics, and how many raw-body requests have no upstream rows to compare with. Panics,
/// naming the reference and question, at the first answer outside the rule.
pub fn check_f16_references<F: Forward>(engine: &mut Agent<F>, ckpt: &str) -> (F16Stats, usize) {
    let mut stats = F16Stats::default();
    let mut without_rows = 0;
    for case in decision_cases(ckpt) {
        let DecisionCase {
            ctx,
            reference,
            call,
            questions,
        } = case;
        if reference.passes.is_empty() {
            without_rows += usize::from(!questions.is_empty());
            continue;
        }
        let results = engine
            .predict_batch(&call.states, &questions, &call.opts)
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        for (s, mine) in results.iter().enumerate() {
            for (q, (_, answer)) in questions.iter().zip(&mine.answers) {
                let r = reference.row(s, &q.id).expect("upstream row");
                let up: Answer = decode::decode_unrounded(q, &r.output(), &engine.config);
                check_f16(answer, &up, &mut stats)
                    .unwrap_or_else(|e| panic!("{ctx} {}: {e}", q.id));
            }
        }
    }
    (stats, without_rows)
}

/// The largest absolute difference between two passes' logits (options and act head).
pub fn max_logit_diff(a: &[RowLogits], b: &[RowLogits]) -> f32 {
    assert_eq!(a.len(), b.len(), "row counts differ");
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.logits.len(), y.logits.len(), "marker counts differ");
            x.logits
                .iter()
                .zip(&y.logits)
                .chain(x.act_logits.iter().zip(&y.act_logits))
                .map(|(p, q)| (p - q).abs())
        })
        .fold(0.0, f32::max)
}
