//! A request body through everything before and after the model: validation
//! (`laya_core::request`), routing, question checks, prompt layout and tokenization, decoding
//! and rendering (`laya_core::decide`, `render`), on the `tiny` fixture checkpoint with the
//! recorded-logits engine. Never a panic; an answer renders to JSON that parses. The first
//! byte picks the route, the settings and strict Jev mode's rules, the rest is the body.
#![no_main]

use std::sync::{Mutex, OnceLock};

use laya_core::agent::Agent;
use laya_core::checkpoints::Single;
use laya_core::decide::{decide, Decision, Settings};
use laya_core::render::{batch_body, single_body, Output};
use laya_core::request::{parse_batch, parse_decision, Limits};
use laya_core::routing::RoutingConfig;
use laya_fixtures::{fixtures_dir, Recorded};
use libfuzzer_sys::fuzz_target;

fn checkpoints() -> &'static Mutex<Single<Recorded>> {
    static CHECKPOINTS: OnceLock<Mutex<Single<Recorded>>> = OnceLock::new();
    CHECKPOINTS.get_or_init(|| {
        let dir = fixtures_dir().join("checkpoints").join("tiny");
        let agent = Agent::load(&dir, Recorded::for_checkpoint("tiny")).expect("the tiny fixture");
        Mutex::new(Single::new(agent, None))
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let batch = pick & 1 == 1;
    let tournament_group = [0, 0, 2, 3][usize::from(pick >> 1 & 3)];
    let routing = RoutingConfig {
        auto_task: pick & 8 != 0,
        ..RoutingConfig::default()
    };
    let mut limits = Limits::default();
    if tournament_group > 0 {
        limits.max_choice_options = laya_core::request::MAX_TOURNAMENT_CHOICE_OPTIONS;
    }
    let mut decision: Decision = if batch {
        match parse_batch(body, &limits, &routing) {
            Ok(r) => r.into(),
            Err(e) => return assert!(!e.to_string().is_empty()),
        }
    } else {
        match parse_decision(body, &limits, &routing) {
            Ok(r) => r.into(),
            Err(e) => return assert!(!e.to_string().is_empty()),
        }
    };
    // Strict Jev mode's request rules.
    if pick & 16 != 0 {
        if let Err(e) = laya_core::request::jev::apply(&mut decision.questions) {
            return assert!(!e.to_string().is_empty());
        }
    }
    let settings = Settings {
        routing,
        tournament_group,
        pass_tokens: 4096,
    };
    let mut checkpoints = checkpoints().lock().unwrap_or_else(|e| e.into_inner());
    let decided = match decide(&mut *checkpoints, &settings, &decision) {
        Ok(d) => d,
        Err(e) => return assert!(!e.to_string().is_empty()),
    };
    for output in [Output::Full, Output::JevStrict] {
        let rendered = if batch {
            batch_body(&decided, output)
        } else {
            single_body(&decided, output)
        };
        if let Ok(text) = rendered {
            pyjson::loads(text.as_bytes()).expect("an answer is JSON");
        }
    }
});
