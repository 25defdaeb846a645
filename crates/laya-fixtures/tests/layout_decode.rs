//! laya-core against upstream, without a model: every 200 reference of the stored checkpoints
//! must lay out to upstream's exact token rows, and decoding upstream's own raw logits must
//! give upstream's answer and usage text.

use laya_core::agent::Agent;
use laya_core::confidence;
use laya_fixtures::{
    check_f32, checkpoints, decision_cases, fixtures_dir, open_text, unrounded_like,
    upstream_results, DecisionCase, Replay,
};

#[test]
fn layout_and_decoding_match_upstream() {
    let fixtures = fixtures_dir();
    let mut checked = 0;
    let mut boundary = 0;
    let mut without_rows = 0;
    for ckpt in &checkpoints() {
        let dir = fixtures.join("checkpoints").join(ckpt);
        let mut engine = Agent::load(&dir, Replay::default()).expect("checkpoint loads");
        for case in decision_cases(ckpt) {
            let DecisionCase {
                ctx,
                reference,
                call,
                questions,
            } = case;
            if reference.passes.is_empty() && !questions.is_empty() {
                // Raw-body requests (duplicate keys, NaN): upstream recorded no rows, so
                // only the engine's end-to-end test can check them.
                without_rows += 1;
                continue;
            }

            // Layout: exactly upstream's rows.
            let layout = engine
                .layout(&call.states, &questions, &call.opts)
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let ref_rows: Vec<_> = reference.passes.iter().flatten().collect();
            if !questions.is_empty() {
                assert_eq!(
                    layout.iter().map(Vec::len).sum::<usize>(),
                    ref_rows.len(),
                    "{ctx}: row count"
                );
            }
            for (s, rows) in layout.iter().enumerate() {
                for (q, mine) in questions.iter().zip(rows) {
                    let up = reference.row(s, &q.id).unwrap_or_else(|| {
                        panic!("{ctx}: no upstream row for state {s} question {}", q.id)
                    });
                    assert_eq!(mine.row.ids, up.row.ids, "{ctx}: token ids of {}", q.id);
                    assert_eq!(
                        mine.row.markers, up.row.markers,
                        "{ctx}: markers of {}",
                        q.id
                    );
                    assert_eq!(mine.row.qtype, up.row.qtype, "{ctx}: qtype of {}", q.id);
                }
            }

            // Decoding upstream's logits: upstream's text, up to rounding-boundary cases.
            engine.forward = Replay::new(&reference.passes);
            let mut results = engine
                .predict_batch(&call.states, &questions, &call.opts)
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            if let Some(min) = &call.min_confidence {
                confidence::apply_gate(&mut results, min);
            }
            confidence::add_jev_confidence(&mut results);
            let upstream = upstream_results(&reference.body);
            assert_eq!(results.len(), upstream.len(), "{ctx}: result count");
            for (s, (mine, up_text)) in results.iter().zip(&upstream).enumerate() {
                let mut unrounded = mine.clone();
                for (q, (_, a)) in questions.iter().zip(unrounded.answers.iter_mut()) {
                    let r = reference.row(s, &q.id).expect("upstream row");
                    *a = unrounded_like(a, q, &r.output(), &engine.config);
                }
                let diffs = check_f32(&open_text(mine), up_text, &open_text(&unrounded), 1e-6)
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
                boundary += diffs.len();
            }
            checked += 1;
        }
    }
    println!("{checked} references matched; {boundary} numbers on a rounding boundary; {without_rows} without rows");
    assert!(checked > 200, "only {checked} references checked");
}
