//! Test support for every layer: where the shared fixtures are, the reference files upstream
//! laya 0.4.15 recorded (`references/<checkpoint>/*.jsonl`), engines that answer with
//! upstream's recorded logits ([`Replay`] for one request's rows, [`Recorded`] for a whole
//! server's), and the parity rules of the engine issue (f32: equal after rounding unless
//! upstream's value sits on a rounding boundary; f16: probabilities within 1e-2, argmax equal
//! except near ties).
//!
//! References are read with [`pyjson`], so duplicate keys, big integers and float
//! spelling survive exactly as upstream sent them.

mod agreement;
mod compare;
mod references;
mod suites;
mod unrounded;

pub use agreement::{fixture_workload, workload_decisions, Agreement};
pub use compare::{check_f16, check_f32, F16Stats, NumberDiff};
pub use references::{
    checkpoints, decision_cases, fixtures_dir, read_jsonl, references, DecisionCall, DecisionCase,
    Recorded, RefRow, Reference, Replay, UnknownRow, WORKLOADS,
};
pub use suites::{check_batch_mates, check_f16_references, max_logit_diff, reference_passes};
pub use unrounded::{
    long_unrounded, open_text, unrounded_body, unrounded_body_routed, unrounded_like,
    upstream_results, ReplayAgents,
};
