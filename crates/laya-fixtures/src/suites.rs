//! Whole checks that every engine's tests run the same way.

use laya_core::agent::Agent;
use laya_core::decode::{self, Answer};
use laya_core::engine::{Forward, Row, RowLogits};

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

/// Every pass of rows checkpoint `ckpt`'s decision references make, as `agent`'s layout
/// builds them (a reference its layout refuses is left out).
pub fn reference_passes<F: Forward>(agent: &Agent<F>, ckpt: &str) -> Vec<Vec<Row>> {
    let mut out = Vec::new();
    for case in decision_cases(ckpt) {
        if let Ok(passes) = agent.layout(&case.call.states, &case.questions, &case.call.opts) {
            out.extend(
                passes
                    .iter()
                    .map(|p| p.iter().map(|e| e.row.clone()).collect()),
            );
        }
    }
    out
}

/// A 64-bit linear congruential generator: the same compositions on every run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// `compositions` random batches: a random pass (a request's rows) packed among 1-12 random
/// other passes at a random position, so in other token and selection buckets and at other
/// offsets; the pass's logits must have the very bits they have alone. Panics, naming the
/// composition, at the first that differs; returns `compositions`.
pub fn check_batch_mates<F: Forward>(
    engine: &mut F,
    passes: &[Vec<Row>],
    compositions: usize,
    seed: u64,
    what: &str,
) -> usize {
    let mut rng = Lcg(seed);
    let mut alone: Vec<Option<Vec<RowLogits>>> = vec![None; passes.len()];
    let mut tokens_max = 0;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for k in 0..compositions {
        let i = rng.below(passes.len());
        let rows = &passes[i];
        let solo = alone[i].get_or_insert_with(|| engine.forward(rows).expect("forward"));
        let mates = 1 + rng.below(12);
        let at = rng.below(mates + 1);
        let mut batch: Vec<Row> = Vec::new();
        let mut offset = 0;
        for m in 0..=mates {
            if m == at {
                offset = batch.len();
                batch.extend(rows.iter().cloned());
            } else {
                batch.extend(passes[rng.below(passes.len())].iter().cloned());
            }
        }
        let tokens: usize = batch.iter().map(|r| r.ids.len()).sum();
        tokens_max = tokens_max.max(tokens);
        let together = engine.forward(&batch).expect("forward");
        for (j, (t, a)) in together[offset..offset + rows.len()]
            .iter()
            .zip(solo.iter())
            .enumerate()
        {
            assert!(
                bits(&t.logits) == bits(&a.logits) && bits(&t.act_logits) == bits(&a.act_logits),
                "{what} composition {k}: pass {i} row {j} changed with {mates} batch mates at \
                 position {at} ({} rows, {tokens} tokens): {a:?} alone, {t:?} together",
                batch.len()
            );
        }
    }
    println!(
        "{what}: {compositions} compositions bit-identical (up to {tokens_max} tokens a batch)"
    );
    compositions
}
