//! `decide_many` against `decide`: every request of the fixture workloads decided alone, in
//! order, and again in random groups sharing forward passes. The answers (or errors), the
//! loads and the residency order after every group must be the same, and the shared passes
//! must really be shared. Each runs twice: decided in one call ([`decide_many`]), and with
//! every request prepared ahead from the layouts published after the previous group, as the
//! server's worker does ([`prepare`], [`decide_prepared`]; stale after a load or eviction).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use laya_core::agent::Agent;
use laya_core::checkpoints::{Checkpoints, Loaded, Router, Single};
use laya_core::decide::{
    decide, decide_many, decide_prepared, prepare, DecideError, Decided, Decision, Layouts,
    Settings,
};
use laya_core::engine::{EngineError, EngineInfo, Forward, Row, RowLogits};
use laya_core::request::{parse_batch, parse_decision, Limits};
use laya_core::routing::{Checkpoint, RoutingConfig};
use laya_fixtures::{fixtures_dir, Recorded};
use pyjson::Value;

/// The recorded-logits engine, counting its passes, optionally claiming batch invariance.
struct Counted {
    inner: Recorded,
    passes: Arc<AtomicUsize>,
    invariant: bool,
}

impl Forward for Counted {
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<RowLogits>, EngineError> {
        self.passes.fetch_add(1, Ordering::SeqCst);
        self.inner.forward(rows)
    }

    fn info(&self) -> EngineInfo {
        self.inner.info()
    }

    fn batch_invariant(&self) -> bool {
        self.invariant
    }
}

/// Which fixture checkpoint stands in for each name.
fn fixture_of(name: &Checkpoint) -> &'static str {
    match name.name() {
        "english" => "tiny-english",
        "multilingual" => "tiny-multilingual-shape",
        _ => "tiny",
    }
}

fn agent(ckpt: &str, passes: &Arc<AtomicUsize>, invariant: bool) -> Agent<Counted> {
    let dir = fixtures_dir().join("checkpoints").join(ckpt);
    let engine = Counted {
        inner: Recorded::for_checkpoint(ckpt),
        passes: passes.clone(),
        invariant,
    };
    Agent::load(&dir, engine).expect("fixture checkpoint")
}

fn router(
    max_loaded: usize,
    passes: &Arc<AtomicUsize>,
    loads: &Arc<AtomicUsize>,
) -> Router<Counted> {
    let (passes, loads) = (passes.clone(), loads.clone());
    Router::new(
        Box::new(move |name: &Checkpoint| {
            loads.fetch_add(1, Ordering::SeqCst);
            Ok(Loaded {
                agent: agent(fixture_of(name), &passes, true),
                revision: None,
            })
        }),
        max_loaded,
    )
}

/// Every request body of the fixture workloads that passes validation.
fn decisions(routing: &RoutingConfig) -> Vec<Decision> {
    let mut out = Vec::new();
    for workload in ["smoke", "short", "edge", "routing", "lru"] {
        let path = fixtures_dir()
            .join("workloads")
            .join(format!("{workload}.jsonl"));
        let text = std::fs::read(&path).expect("workload");
        for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let case = pyjson::loads(line).expect("workload line").value;
            let Some(obj) = case.as_object() else {
                continue;
            };
            let body = match (obj.get("raw_body"), obj.get("body")) {
                (Some(Value::Str(raw)), _) => raw.as_bytes().to_vec(),
                (_, Some(body)) => pyjson::dumps_spaced(body).into_bytes(),
                _ => continue,
            };
            let batch = matches!(obj.get("path"), Some(Value::Str(p)) if p.ends_with("/batch"));
            let limits = Limits::default();
            let parsed: Option<Decision> = if batch {
                parse_batch(&body, &limits, routing).ok().map(Into::into)
            } else {
                parse_decision(&body, &limits, routing).ok().map(Into::into)
            };
            out.extend(parsed);
        }
    }
    out
}

fn same(a: &Result<Decided, DecideError>, b: &Result<Decided, DecideError>) -> bool {
    match (a, b) {
        // Debug text, not `==`: an option label may be a NaN float.
        (Ok(a), Ok(b)) => format!("{a:?}") == format!("{b:?}"),
        (Err(a), Err(b)) => a.to_string() == b.to_string(),
        _ => false,
    }
}

/// A small deterministic generator: random groups, the same on every run.
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

/// Runs `ds` alone on `alone` and in random groups of 1-16 on `shared` (prepared `ahead` or
/// not), comparing answers and what `check` says of the two after each group. Returns how
/// many requests were laid out ahead.
fn compare<C: Checkpoints>(
    ds: &[Decision],
    settings: &Settings,
    alone: &mut C,
    shared: &mut C,
    seed: u64,
    ahead: bool,
    mut check: impl FnMut(&C, &C, usize),
) -> usize {
    let mut laid_ahead = 0;
    let mut rng = Lcg(seed);
    let mut at = 0;
    let mut layouts = Layouts::default();
    while at < ds.len() {
        let n = (1 + rng.below(16)).min(ds.len() - at);
        let group: Vec<&Decision> = ds[at..at + n].iter().collect();
        let together = if ahead {
            let preps: Vec<_> = group
                .iter()
                .map(|d| Some(prepare(settings, &layouts, d)))
                .collect();
            laid_ahead += preps.iter().flatten().filter(|p| p.laid_out()).count();
            let out = decide_prepared(shared, settings, &group, preps);
            let routed: Vec<Checkpoint> = out
                .iter()
                .flatten()
                .flat_map(|d| d.states.iter().map(|s| s.routing.model.clone()))
                .collect();
            let known: Vec<Checkpoint> = layouts.names().cloned().collect();
            layouts = Layouts::of(shared, known.into_iter().chain(routed));
            out
        } else {
            decide_many(shared, settings, &group)
        };
        assert_eq!(together.len(), n);
        for (k, d) in group.iter().enumerate() {
            let solo = decide(alone, settings, d);
            assert!(
                same(&solo, &together[k]),
                "request {}: alone {:?}\ntogether {:?}",
                at + k,
                solo.as_ref().map(|_| "answered").map_err(|e| e.to_string()),
                together[k]
                    .as_ref()
                    .map(|_| "answered")
                    .map_err(|e| e.to_string())
            );
        }
        check(alone, shared, at + n);
        at += n;
    }
    laid_ahead
}

#[test]
fn shared_passes_give_every_request_its_own_answer() {
    for (tournament_group, ahead) in [(0, false), (2, false), (0, true), (2, true)] {
        let settings = Settings {
            routing: RoutingConfig::single("tiny".to_owned(), Checkpoint::multilingual(), false),
            tournament_group,
            pass_tokens: 4096,
        };
        let ds = decisions(&settings.routing);
        assert!(ds.len() > 200, "{} requests", ds.len());
        let (alone_passes, shared_passes) = (Arc::default(), Arc::default());
        let mut alone = Single::new(agent("tiny", &alone_passes, true), None);
        let mut shared = Single::new(agent("tiny", &shared_passes, true), None);
        let laid = compare(
            &ds,
            &settings,
            &mut alone,
            &mut shared,
            3,
            ahead,
            |a, b, n| {
                assert_eq!(
                    a.resident(),
                    b.resident(),
                    "residency order after {n} requests"
                );
            },
        );
        let (a, s): (usize, usize) = (
            alone_passes.load(Ordering::SeqCst),
            shared_passes.load(Ordering::SeqCst),
        );
        println!(
            "tournament {tournament_group}, prepared ahead {ahead}: {} requests, {a} passes alone, {s} shared",
            ds.len()
        );
        // With tournaments most choices play their rounds alone; the rest still share.
        let bound = if tournament_group == 0 { a / 2 } else { a };
        assert!(s < bound, "passes were not shared: {s} of {a}");
        if ahead && tournament_group == 0 {
            assert!(laid > ds.len() / 2, "{laid} of {} laid out ahead", ds.len());
        }
    }
}

#[test]
fn the_router_loads_and_evicts_as_it_would_for_each_request_alone() {
    let routing = RoutingConfig::default();
    let settings = Settings {
        routing: routing.clone(),
        tournament_group: 0,
        pass_tokens: 8192,
    };
    let ds = decisions(&routing);
    for (max_loaded, ahead) in [1, 2, 3].into_iter().flat_map(|m| [(m, false), (m, true)]) {
        let (passes_a, loads_a) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
        let (passes_b, loads_b) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
        let mut alone = router(max_loaded, &passes_a, &loads_a);
        let mut shared = router(max_loaded, &passes_b, &loads_b);
        compare(
            &ds,
            &settings,
            &mut alone,
            &mut shared,
            5,
            ahead,
            |a, b, n| {
                let names = |c: &Router<Counted>| -> Vec<(String, u64)> {
                    c.resident()
                        .into_iter()
                        .map(|r| (r.name.name().to_owned(), r.loaded))
                        .collect()
                };
                assert_eq!(
                    names(a),
                    names(b),
                    "max_loaded {max_loaded}: resident after {n} requests"
                );
                assert_eq!(
                    loads_a.load(Ordering::SeqCst),
                    loads_b.load(Ordering::SeqCst),
                    "max_loaded {max_loaded}: loads after {n} requests"
                );
            },
        );
        println!(
            "max_loaded {max_loaded}, prepared ahead {ahead}: {} loads; passes {} alone, {} shared",
            loads_a.load(Ordering::SeqCst),
            passes_a.load(Ordering::SeqCst),
            passes_b.load(Ordering::SeqCst)
        );
    }
}

#[test]
fn an_engine_that_is_not_batch_invariant_runs_each_request_alone() {
    let settings = Settings {
        routing: RoutingConfig::single("tiny".to_owned(), Checkpoint::multilingual(), false),
        tournament_group: 0,
        pass_tokens: 1 << 20,
    };
    let ds = decisions(&settings.routing);
    let (alone_passes, shared_passes) = (Arc::default(), Arc::default());
    let mut alone = Single::new(agent("tiny", &alone_passes, false), None);
    let mut shared = Single::new(agent("tiny", &shared_passes, false), None);
    compare(
        &ds,
        &settings,
        &mut alone,
        &mut shared,
        9,
        true,
        |_, _, _| {},
    );
    assert_eq!(
        alone_passes.load(Ordering::SeqCst),
        shared_passes.load(Ordering::SeqCst)
    );
}

/// One request body over the tiny checkpoint's tokenizer: a choice among `options` labels,
/// the last one a number when `numbered` (a tournament refuses that past 100 options).
fn choice(options: usize, numbered: bool) -> Decision {
    let mut criteria: Vec<String> = (0..options).map(|i| format!("\"Queue {i}\"")).collect();
    if numbered {
        criteria.push("7".to_owned());
    }
    let body = format!(
        r#"{{"state":"A customer asks where the parcel is.","questions":{{"q":{{"type":"choice","instructions":"Which queue?","criteria":[{}]}}}}}}"#,
        criteria.join(",")
    );
    let routing = RoutingConfig::single("tiny".to_owned(), Checkpoint::multilingual(), false);
    // The cap with tournaments on.
    let limits = Limits {
        max_choice_options: 255,
        ..Limits::default()
    };
    parse_decision(body.as_bytes(), &limits, &routing)
        .expect("a valid request")
        .into()
}

/// What `decide_prepared_each` handed over: each request's index, its result, when its
/// time starts, and the passes run and the time when it was handed over.
struct Handed {
    index: usize,
    result: Result<Decided, DecideError>,
    since: std::time::Instant,
    passes: usize,
    at: std::time::Instant,
}

fn hand_over(
    settings: &Settings,
    ds: &[&Decision],
    shared: &mut Single<Counted>,
    passes: &Arc<AtomicUsize>,
) -> Vec<Handed> {
    let mut handed = Vec::new();
    let preps = ds.iter().map(|_| None).collect();
    laya_core::decide::decide_prepared_each(shared, settings, ds, preps, |_, a| {
        handed.push(Handed {
            index: a.index,
            result: a.result,
            since: a.since,
            passes: passes.load(Ordering::SeqCst),
            at: std::time::Instant::now(),
        })
    });
    handed
}

#[test]
fn each_request_is_handed_over_once_its_own_passes_are_done() {
    let settings = Settings {
        routing: RoutingConfig::single("tiny".to_owned(), Checkpoint::multilingual(), false),
        tournament_group: 2,
        pass_tokens: 4096,
    };
    // Plain (two options), refused by the tournament's plan, a tournament that plays its
    // rounds alone (five options), plain, plain.
    let (a, r, t) = (choice(2, false), choice(101, true), choice(5, false));
    let (b, c) = (choice(2, false), choice(2, false));
    let (alone_passes, passes) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
    let mut alone = Single::new(agent("tiny", &alone_passes, true), None);
    let solo = decide(&mut alone, &settings, &t);
    let t_passes = alone_passes.load(Ordering::SeqCst);
    assert!(t_passes > 1, "the tournament ran {t_passes} passes");
    let mut shared = Single::new(agent("tiny", &passes, true), None);

    let ds = [&a, &r, &t, &b, &c];
    let handed = hand_over(&settings, &ds, &mut shared, &passes);
    let order: Vec<(usize, usize)> = handed.iter().map(|h| (h.index, h.passes)).collect();
    // The refusal leaves before any pass; `a` after its own pass, before the tournament's;
    // `b` and `c` share the last.
    assert_eq!(
        order,
        [
            (1, 0),
            (0, 1),
            (2, 1 + t_passes),
            (3, 2 + t_passes),
            (4, 2 + t_passes)
        ],
        "(request, passes run) as each was handed over"
    );
    assert!(same(&handed[2].result, &solo), "the tournament's answer");
    for h in &handed {
        assert_eq!(h.result.is_ok(), h.index != 1, "request {}", h.index);
        let on_its_own = decide(&mut alone, &settings, ds[h.index]);
        assert!(same(&h.result, &on_its_own), "request {}", h.index);
    }
    // Each one's time starts where its own work did, not at the call's start.
    let [refused, a_, t_, b_, c_] = &handed[..] else {
        unreachable!("five requests handed over")
    };
    assert!(refused.since <= a_.since && a_.since <= a_.at);
    assert!(t_.since >= a_.at, "the tournament counts from a's answer");
    assert!(b_.since >= t_.at, "b counts from the tournament's answer");
    assert_eq!(b_.since, c_.since, "b and c share their pass");

    // With room for one request a pass, `c` waits for `b`'s pass but not the other way.
    let settings = Settings {
        pass_tokens: 1,
        ..settings
    };
    passes.store(0, Ordering::SeqCst);
    let ds = [&a, &b, &c];
    let handed = hand_over(&settings, &ds, &mut shared, &passes);
    let order: Vec<(usize, usize)> = handed.iter().map(|h| (h.index, h.passes)).collect();
    assert_eq!(order, [(0, 1), (1, 2), (2, 3)], "(request, passes run)");
    assert!(handed[1].since >= handed[0].at && handed[2].since >= handed[1].at);
}

#[test]
fn a_preparation_says_what_it_takes_of_a_pass() {
    let settings = Settings {
        routing: RoutingConfig::single("tiny".to_owned(), Checkpoint::multilingual(), false),
        tournament_group: 2,
        pass_tokens: 4096,
    };
    let passes = Arc::default();
    let mut shared = Single::new(agent("tiny", &passes, true), None);
    let plain = choice(2, false);
    let answered = decide(&mut shared, &settings, &plain).expect("answered");
    let names = answered.states.iter().map(|s| s.routing.model.clone());
    let layouts = Layouts::of(&mut shared, names);
    let rows: usize = answered
        .states
        .iter()
        .map(|s| s.result.usage.input_tokens)
        .sum();
    assert!(rows > 0);
    // Laid out: its rows' tokens. Refused by the tournament's plan: nothing. A tournament
    // runs alone. Not laid out (no layouts yet): nothing until its turn.
    assert_eq!(prepare(&settings, &layouts, &plain).tokens(), Some(rows));
    let refused = choice(101, true);
    assert_eq!(prepare(&settings, &layouts, &refused).tokens(), Some(0));
    let tournament = choice(5, false);
    assert_eq!(prepare(&settings, &layouts, &tournament).tokens(), None);
    assert_eq!(
        prepare(&settings, &Layouts::default(), &plain).tokens(),
        Some(0)
    );
}
