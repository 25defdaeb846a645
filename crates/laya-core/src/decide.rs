//! One decision, from a validated request to a finished answer: what upstream laya-serve does
//! once a request holds the inference gate (spec api.md §5.1 steps 15-17, §7, §12.3).
//!
//! [`decide`] routes every state ([`crate::routing`]), loads the routed checkpoints through
//! [`Checkpoints`] in upstream's order, validates the questions (step 16), plays a tournament
//! when one is configured and needed ([`crate::tournament`]), runs the forward passes through
//! each checkpoint's [`Agent`], then applies the `min_confidence` gate and adds Jev's
//! confidence. The caller renders the [`Decided`] with [`crate::render`].
//!
//! Nothing here knows HTTP: the server's engine worker calls [`decide`], or
//! [`decide_prepared_each`] for queued requests, and reports each answer's time from
//! [`Answered::since`]; the CLI calls [`decide`] directly.

use pyjson::{Object, Value};

use std::sync::Arc;
use std::time::Instant;

use crate::agent::{BatchOptions, LongOptions, PredictError, StateResult};
pub use crate::checkpoints::{Checkpoints, LoadError};
use crate::confidence::{self, MinConfidence};
use crate::config::AgentConfig;
use crate::engine::Forward as _;
use crate::question::{parse_questions, QuestionError};
use crate::request::{BatchRequest, DecisionRequest, Overflow, Windows};
use crate::routing::{self, Checkpoint, Routing, RoutingConfig};
use crate::tokenizer::Tokenizer;
use crate::tournament::{self, TournamentError};

/// A request that passed validation, as the decision needs it (both routes).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// One state on the single route, 1-64 on the batch route.
    pub states: Vec<Value>,
    /// Question definitions, not validated yet (step 16).
    pub questions: Object,
    /// `batch_size` is the batch route's effective states per pass (`None`: one pass).
    pub opts: BatchOptions,
    pub min_confidence: Option<MinConfidence>,
    /// Routing inputs: the checkpoint `model` pins, and the raw `task`, `lang`, `lang_guess`.
    pub pin: Option<Checkpoint>,
    pub task: Option<Value>,
    pub lang: Option<String>,
    pub lang_guess: Option<String>,
    /// sys1rust's opt-in windowed reading of long states.
    pub overflow: Overflow,
}

impl From<DecisionRequest> for Decision {
    fn from(r: DecisionRequest) -> Decision {
        Decision {
            states: vec![r.state],
            questions: r.questions,
            opts: r.opts,
            min_confidence: r.min_confidence,
            pin: r.pin,
            task: r.task,
            lang: r.lang,
            lang_guess: r.lang_guess,
            overflow: r.overflow,
        }
    }
}

impl From<BatchRequest> for Decision {
    fn from(r: BatchRequest) -> Decision {
        Decision {
            states: r.states,
            questions: r.questions,
            opts: r.opts,
            min_confidence: r.min_confidence,
            pin: r.pin,
            task: r.task,
            lang: r.lang,
            lang_guess: r.lang_guess,
            overflow: r.overflow,
        }
    }
}

/// Server-wide settings of the decision (fixed at start).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    pub routing: RoutingConfig,
    /// `LAYA_TOURNAMENT_GROUP`: narrow choices over this many options by elimination; 0 is off.
    pub tournament_group: usize,
    /// Tokens one forward pass may carry: requests share passes up to it ([`decide_many`]) and
    /// a windowed state's windows are split into passes of at most it (0: no bound).
    pub pass_tokens: usize,
}

/// One state's finished answer.
#[derive(Debug, Clone, PartialEq)]
pub struct StateDecision {
    pub result: StateResult,
    pub routing: Routing,
    /// The `x_tournament` report of each narrowed choice (empty without a tournament).
    pub tournament: Vec<(String, tournament::Report)>,
}

/// Every state's answer, in request order.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    pub states: Vec<StateDecision>,
}

impl Decided {
    /// Tokens run through the model, summed over states (`usage.input_tokens`).
    pub fn input_tokens(&self) -> usize {
        self.states
            .iter()
            .map(|s| s.result.usage.input_tokens)
            .sum()
    }

    /// Answers given (one per state and question).
    pub fn answers(&self) -> usize {
        self.states.iter().map(|s| s.result.answers.len()).sum()
    }

    /// States whose tokens did not all fit their rows.
    pub fn truncated_states(&self) -> usize {
        self.states
            .iter()
            .filter(|s| {
                s.result
                    .usage
                    .state
                    .as_ref()
                    .is_some_and(|u| matches!(u.truncated, crate::agent::Truncated::Flag(true)))
            })
            .count()
    }
}

/// Why a decision failed inside inference, in upstream's two classes
/// ([`DecideError::is_caller_error`]).
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// `task` names no checkpoint (the text lists the registry).
    #[error("{0}")]
    UnknownTask(String),
    /// Step 16: a question definition upstream refuses.
    #[error(transparent)]
    Question(#[from] QuestionError),
    #[error(transparent)]
    Tournament(#[from] TournamentError),
    #[error(transparent)]
    Predict(#[from] PredictError),
    /// A routed checkpoint could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// `overflow: "windows"` on a state that needs more windows than it may.
    #[error("overflow 'windows' needs {needed} windows of {size} tokens (stride {stride}) for this state, more than max_windows ({max_windows}{}); send a larger window or stride, a larger max_len, or overflow 'truncate'", if .max_windows == .cap { ", this server's cap".to_owned() } else { format!("; this server allows up to {}", .cap) })]
    TooManyWindows {
        needed: usize,
        size: usize,
        stride: usize,
        max_windows: usize,
        cap: usize,
    },
    /// `overflow: "windows"` with a choice the tournament would narrow.
    #[error("overflow 'windows' cannot be combined with a tournament (LAYA_TOURNAMENT_GROUP={group}): {qid} has {options} options; ask at most {group} options per choice or send overflow 'truncate'")]
    WindowsWithTournament {
        qid: String,
        options: usize,
        group: usize,
    },
}

impl DecideError {
    /// Whether upstream raises this as a `ValueError`, which it returns to the client with its
    /// text (422); every other failure is its 500 `inference failed`.
    pub fn is_caller_error(&self) -> bool {
        match self {
            DecideError::UnknownTask(_)
            | DecideError::Question(_)
            | DecideError::TooManyWindows { .. }
            | DecideError::WindowsWithTournament { .. } => true,
            DecideError::Tournament(t) => t.is_caller_error(),
            DecideError::Predict(p) => p.is_caller_error(),
            DecideError::Load(_) => false,
        }
    }

    /// Where in the body a caller error points (see [`crate::request::RequestError::field`]).
    pub fn field(&self) -> crate::request::Field {
        let at = |path: &[&str], kind: &'static str| crate::request::Field {
            path: path.iter().map(|p| (*p).to_owned()).collect(),
            kind,
        };
        match self {
            DecideError::UnknownTask(_) => at(&["task"], "value_error"),
            DecideError::TooManyWindows { .. } => at(&["max_windows"], "too_long"),
            DecideError::WindowsWithTournament { .. } => at(&["overflow"], "value_error"),
            DecideError::Predict(PredictError::Windows(_)) => at(&["stride"], "value_error"),
            _ => at(&["questions"], "value_error"),
        }
    }
}

/// Answers one validated request: upstream's work inside the inference gate.
pub fn decide<C: Checkpoints>(
    checkpoints: &mut C,
    settings: &Settings,
    d: &Decision,
) -> Result<Decided, DecideError> {
    // Upstream decides whether to narrow before routing anything, once per request.
    let plan = match settings.tournament_group {
        0 => None,
        group => tournament::plan(&d.questions, group)?,
    };
    if let Overflow::Windows(w) = &d.overflow {
        if let Some((qid, labels)) = plan.as_ref().and_then(|p| p.first()) {
            return Err(DecideError::WindowsWithTournament {
                qid: pyjson::repr_str(qid),
                options: labels.len(),
                group: settings.tournament_group,
            });
        }
        let (results, routes) = predict_long_call(checkpoints, settings, d, w)?;
        let states = results
            .into_iter()
            .zip(routes)
            .map(|(result, routing)| StateDecision {
                result,
                routing,
                tournament: Vec::new(),
            })
            .collect();
        return Ok(gate(states, d));
    }
    let states = match plan {
        None => {
            let (results, routes) =
                predict_call(checkpoints, settings, d, &d.states, &d.questions, &d.opts)?;
            results
                .into_iter()
                .zip(routes)
                .map(|(result, routing)| StateDecision {
                    result,
                    routing,
                    tournament: Vec::new(),
                })
                .collect::<Vec<_>>()
        }
        Some(plan) => {
            // Each state plays its own rounds; `batch_size` shapes nothing on this path.
            let opts = BatchOptions {
                batch_size: None,
                ..d.opts
            };
            let mut out = Vec::with_capacity(d.states.len());
            for state in &d.states {
                let group = settings.tournament_group;
                let (result, routing, tournament) = tournament::run(
                    &d.questions,
                    group,
                    &plan,
                    |questions| -> Result<_, DecideError> {
                        let (mut r, mut routes) = predict_call(
                            checkpoints,
                            settings,
                            d,
                            std::slice::from_ref(state),
                            questions,
                            &opts,
                        )?;
                        match (r.pop(), routes.pop()) {
                            (Some(r), Some(routing)) => Ok((r, routing)),
                            _ => {
                                Err(TournamentError::Internal("a call answered no state".into())
                                    .into())
                            }
                        }
                    },
                )?;
                out.push(StateDecision {
                    result,
                    routing,
                    tournament,
                });
            }
            out
        }
    };
    Ok(gate(states, d))
}

/// The `min_confidence` gate over every state, then Jev's confidence.
fn gate(mut states: Vec<StateDecision>, d: &Decision) -> Decided {
    let mut results: Vec<StateResult> = states.iter().map(|s| s.result.clone()).collect();
    if let Some(min) = &d.min_confidence {
        confidence::apply_gate(&mut results, min);
    }
    confidence::add_jev_confidence(&mut results);
    for (s, r) in states.iter_mut().zip(results) {
        s.result = r;
    }
    Decided { states }
}

/// Routes every state of one router call (errors before any load, as upstream's), and lists
/// the routed checkpoints in order of first appearance.
fn route_states(
    settings: &Settings,
    d: &Decision,
    states: &[Value],
    questions: &Object,
) -> Result<(Vec<Routing>, Vec<Checkpoint>), DecideError> {
    let qids: Vec<&str> = questions.keys().collect();
    let mut routes = Vec::with_capacity(states.len());
    for state in states {
        let r = routing::route(
            state,
            &qids,
            d.pin.as_ref(),
            d.task.as_ref(),
            d.lang.as_deref(),
            d.lang_guess.as_deref(),
            &settings.routing,
        )
        .map_err(DecideError::UnknownTask)?;
        routes.push(r);
    }
    let mut groups: Vec<Checkpoint> = Vec::new();
    for r in &routes {
        if !groups.contains(&r.model) {
            groups.push(r.model.clone());
        }
    }
    Ok((routes, groups))
}

/// One call of upstream's router (`Router.predict`, or `predict_batch` for several states):
/// route every state, then answer `questions` for each routed checkpoint's states.
///
/// Checkpoints are loaded where upstream's router loads them: after routing every state, one
/// group per routed name in order of first appearance, each just before its states are
/// predicted. Question validation runs inside the first group's prediction, so a question
/// error still counts the first group's load, and only it.
fn predict_call<C: Checkpoints>(
    checkpoints: &mut C,
    settings: &Settings,
    d: &Decision,
    states: &[Value],
    questions: &Object,
    opts: &BatchOptions,
) -> Result<(Vec<StateResult>, Vec<Routing>), DecideError> {
    let (routes, groups) = route_states(settings, d, states, questions)?;
    let mut parsed = None;
    let mut answered: Vec<Option<StateResult>> = vec![None; states.len()];
    for name in groups {
        let agent = checkpoints.agent(&name)?;
        let questions = match &parsed {
            Some(q) => q,
            None => parsed.insert(parse_questions(questions)?),
        };
        let members: Vec<usize> = (0..states.len())
            .filter(|&i| routes[i].model == name)
            .collect();
        // References: a state may nest thousands of levels deep, too deep to clone on a
        // thread's stack.
        let group_states: Vec<&Value> = members.iter().map(|&i| &states[i]).collect();
        let results = agent.predict_batch(&group_states, questions, opts)?;
        for (i, r) in members.into_iter().zip(results) {
            answered[i] = Some(r);
        }
    }
    let results = answered
        .into_iter()
        .map(|r| r.ok_or_else(unrouted))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((results, routes))
}

/// [`predict_call`] with `overflow: "windows"`: every state read in overlapping windows
/// (upstream `predict_long`), routed and loaded as one call routes and loads them. Each state's
/// windows are counted before any of its group runs, so a state over `max_windows` costs no
/// forward pass.
fn predict_long_call<C: Checkpoints>(
    checkpoints: &mut C,
    settings: &Settings,
    d: &Decision,
    w: &Windows,
) -> Result<(Vec<StateResult>, Vec<Routing>), DecideError> {
    let (routes, groups) = route_states(settings, d, &d.states, &d.questions)?;
    let opts = LongOptions {
        window: w.window,
        stride: w.stride,
        batch_size: None,
        max_len: d.opts.max_len,
        head_max_len: d.opts.head_max_len,
    };
    let mut parsed = None;
    let mut answered: Vec<Option<StateResult>> = vec![None; d.states.len()];
    for name in groups {
        let agent = checkpoints.agent(&name)?;
        let questions = match &parsed {
            Some(q) => q,
            None => parsed.insert(parse_questions(&d.questions)?),
        };
        let members: Vec<usize> = (0..d.states.len())
            .filter(|&i| routes[i].model == name)
            .collect();
        let mut scans = Vec::with_capacity(members.len());
        for &i in &members {
            let scan = agent.long_scan(&d.states[i], questions, &opts)?;
            if scan.windows.len() > w.max_windows {
                return Err(DecideError::TooManyWindows {
                    needed: scan.windows.len(),
                    size: scan.plan.size,
                    stride: scan.plan.step,
                    max_windows: w.max_windows,
                    cap: w.cap,
                });
            }
            scans.push(scan);
        }
        let row_tokens = agent.row_budget(&d.opts).max_len.max(1) * questions.len().max(1);
        for (i, scan) in members.into_iter().zip(scans) {
            // Upstream's memory cap on the scan, then the engine's pass budget: chunking moves
            // no bits on a batch-invariant engine.
            let engine_cap = (settings.pass_tokens > 0)
                .then(|| (settings.pass_tokens / row_tokens).max(1))
                .filter(|&cap| cap < scan.windows.len());
            let batch = match (scan.batch_cap, engine_cap) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            answered[i] = Some(agent.predict_scan(&d.states[i], questions, &scan, &opts, batch)?);
        }
    }
    let results = answered
        .into_iter()
        .map(|r| r.ok_or_else(unrouted))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((results, routes))
}

fn unrouted() -> DecideError {
    DecideError::Tournament(TournamentError::Internal(
        "a state was routed to no checkpoint".into(),
    ))
}

/// Several requests decided together, in order (the engine worker's queue): each gets
/// exactly what [`decide`] gives it alone, and loads checkpoints and moves the residency
/// order as it would alone. The requests that run plainly (no tournament, every routed
/// checkpoint resident, on an engine whose rows do not depend on their batch mates,
/// [`Forward::batch_invariant`]) share forward passes of up to [`Settings::pass_tokens`]
/// tokens; any other request (a tournament, windows) runs alone, after the shared passes of those before it.
///
/// What needs no checkpoint state (routing, question checks, tokenization and layout) runs
/// for all of them at once on as many threads as the machine has; what touches the
/// checkpoints (the residency order, loads) runs request by request, in order.
///
/// [`Forward::batch_invariant`]: crate::engine::Forward::batch_invariant
pub fn decide_many<C: Checkpoints>(
    checkpoints: &mut C,
    settings: &Settings,
    ds: &[&Decision],
) -> Vec<Result<Decided, DecideError>> {
    let none: Vec<Option<Preparation>> = ds.iter().map(|_| None).collect();
    decide_prepared(checkpoints, settings, ds, none)
}

/// The tokenizers and configs of resident agents whose rows can share passes, by the names
/// routed to them: what lets a request be laid out ([`prepare`]) away from the thread that
/// owns the checkpoints. A snapshot; [`decide_prepared`] checks it is still current.
#[derive(Clone, Default)]
pub struct Layouts {
    keys: Vec<(Checkpoint, u64)>,
    parts: Vec<(u64, Arc<Tokenizer>, AgentConfig)>,
}

impl Layouts {
    /// The layouts of the resident, batch-invariant agents that answer `names`.
    pub fn of<C: Checkpoints>(
        checkpoints: &mut C,
        names: impl IntoIterator<Item = Checkpoint>,
    ) -> Layouts {
        let mut out = Layouts::default();
        for name in names {
            if out.keys.iter().any(|(n, _)| *n == name) {
                continue;
            }
            let Some(key) = checkpoints.agent_key(&name) else {
                continue;
            };
            if !out.parts.iter().any(|(k, _, _)| *k == key) {
                match checkpoints.peek(key) {
                    Some(agent) if agent.forward.batch_invariant() => {
                        out.parts
                            .push((key, agent.tokenizer.clone(), agent.config.clone()));
                    }
                    _ => continue,
                }
            }
            out.keys.push((name, key));
        }
        out
    }

    /// The names this snapshot can lay out.
    pub fn names(&self) -> impl Iterator<Item = &Checkpoint> {
        self.keys.iter().map(|(n, _)| n)
    }

    /// Whether it can lay out anything.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn part(&self, name: &Checkpoint) -> Option<(u64, &Tokenizer, &AgentConfig)> {
        let key = self.keys.iter().find(|(n, _)| n == name)?.1;
        let (_, tokenizer, config) = self.parts.iter().find(|(k, _, _)| *k == key)?;
        Some((key, tokenizer, config))
    }

    /// Every group of a plain request laid out, or `None` when a routed checkpoint has no
    /// layout here (the request then runs alone).
    fn lay(&self, d: &Decision, p: &Planned) -> Option<Vec<LaidGroup>> {
        p.names
            .iter()
            .map(|name| {
                let (key, tokenizer, config) = self.part(name)?;
                let members: Vec<usize> = (0..d.states.len())
                    .filter(|&s| &p.routes[s].model == name)
                    .collect();
                let rows = match &p.questions {
                    Ok(q) if !q.is_empty() => {
                        let states: Vec<&Value> = members.iter().map(|&s| &d.states[s]).collect();
                        crate::agent::layout_rows(tokenizer, config, &states, q, &d.opts)
                    }
                    _ => Ok(vec![Vec::new(); members.len()]),
                };
                Some(LaidGroup {
                    name: name.clone(),
                    key,
                    members,
                    rows,
                })
            })
            .collect()
    }
}

/// What [`prepare`] made of one request: its plan (routing, question checks) and, when it
/// can share passes, its rows.
pub struct Preparation {
    planned: Result<Planned, DecideError>,
    laid: Option<Vec<LaidGroup>>,
}

impl Preparation {
    /// Whether its rows were laid out (it can share passes without more preparation).
    pub fn laid_out(&self) -> bool {
        self.laid.is_some()
    }

    /// What it takes of the shared passes' [`Settings::pass_tokens`], counted as the passes
    /// count it: the tokens of its rows (all of them, whichever checkpoints' passes they go
    /// to, so an upper bound on what it takes of one pass). `None` for a request that runs
    /// alone (a tournament, windows); 0 for one refused before any pass, or not laid out yet
    /// (it is laid out, or runs alone, when its turn comes).
    pub fn tokens(&self) -> Option<usize> {
        match &self.planned {
            Ok(p) if p.alone => None,
            Err(_) => Some(0),
            Ok(_) => Some(
                self.laid
                    .iter()
                    .flatten()
                    .filter_map(|g| g.rows.as_deref().ok())
                    .map(row_tokens)
                    .sum(),
            ),
        }
    }

    /// Whether the request still needs laying out on the checkpoints' thread.
    fn needs_layout(&self) -> bool {
        matches!(&self.planned, Ok(p) if !p.alone) && self.laid.is_none()
    }
}

/// The part of a decision that needs no checkpoint state, run on any thread: the tournament
/// plan, routing, the question checks and, with `layouts`, tokenization and layout. The same
/// work [`decide_many`] does itself, so a request prepared ahead gets the same answer.
pub fn prepare(settings: &Settings, layouts: &Layouts, d: &Decision) -> Preparation {
    let planned = plan_request(settings, d);
    let laid = match &planned {
        Ok(p) if !p.alone => layouts.lay(d, p),
        _ => None,
    };
    Preparation { planned, laid }
}

/// [`decide_many`] with requests that may have been [`prepare`]d ahead: what is `None`, or
/// was laid out on agents that are no longer resident, is prepared here first.
pub fn decide_prepared<C: Checkpoints>(
    checkpoints: &mut C,
    settings: &Settings,
    ds: &[&Decision],
    preps: Vec<Option<Preparation>>,
) -> Vec<Result<Decided, DecideError>> {
    let mut out: Vec<Option<Result<Decided, DecideError>>> = (0..ds.len()).map(|_| None).collect();
    decide_prepared_each(checkpoints, settings, ds, preps, |_, a| {
        out[a.index] = Some(a.result);
    });
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err(unrouted())))
        .collect()
}

/// One request of a [`decide_prepared_each`] call, answered.
#[derive(Debug)]
pub struct Answered {
    /// Its place among the call's requests.
    pub index: usize,
    pub result: Result<Decided, DecideError>,
    /// When the work that answered it began: the moment the last pass or lone request before
    /// it (before its first pass, for a request that shares passes) had handed its answers
    /// over, or the call's start if there was none. A request refused without a pass of its
    /// own counts from the same point before its refusal.
    pub since: Instant,
}

/// [`decide_prepared`] handing each request to `answer` as soon as its own passes are done,
/// with the checkpoints as they are then: requests before one that runs alone do not wait
/// for it, nor those of one shared pass for the passes after theirs. Every request is
/// handed over exactly once, in no fixed order.
pub fn decide_prepared_each<C: Checkpoints>(
    checkpoints: &mut C,
    settings: &Settings,
    ds: &[&Decision],
    mut preps: Vec<Option<Preparation>>,
    answer: impl FnMut(&C, Answered),
) {
    let pass_tokens = settings.pass_tokens;
    let started = Instant::now();
    let mut out = Deliveries {
        answer,
        given: vec![false; ds.len()],
        since: started,
    };
    preps.resize_with(ds.len(), || None);
    // 1. Pure, for what was not prepared ahead: the tournament plan, routing and the
    // question checks of each request.
    let todo: Vec<usize> = (0..ds.len()).filter(|&i| preps[i].is_none()).collect();
    let plans = par_map(&todo, |&i| plan_request(settings, ds[i]));
    for (i, planned) in todo.into_iter().zip(plans) {
        preps[i] = Some(Preparation {
            planned,
            laid: None,
        });
    }
    let mut preps: Vec<Preparation> = preps.into_iter().flatten().collect();
    // 2. The layouts of the resident agents the plain requests without rows go to.
    let todo: Vec<usize> = (0..ds.len()).filter(|&i| preps[i].needs_layout()).collect();
    if !todo.is_empty() {
        let names: Vec<Checkpoint> = todo
            .iter()
            .filter_map(|&i| preps[i].planned.as_ref().ok())
            .flat_map(|p| p.names.iter().cloned())
            .collect();
        let layouts = Layouts::of(checkpoints, names);
        // 3. Pure: their rows.
        let laid = par_map(&todo, |&i| match &preps[i].planned {
            Ok(p) => layouts.lay(ds[i], p),
            Err(_) => None,
        });
        for (i, groups) in todo.into_iter().zip(laid) {
            preps[i].laid = groups;
        }
    }
    let (planned, mut laid): (Vec<_>, Vec<_>) =
        preps.into_iter().map(|p| (p.planned, p.laid)).unzip();
    let prepared_us = started.elapsed().as_micros() as u64;
    // 4. In order: the residency order and loads as each request alone would move them.
    let mut pending: Vec<(usize, Prepared)> = Vec::new();
    let mut shared = 0;
    for (i, (d, p)) in ds.iter().zip(planned).enumerate() {
        let p = match p {
            Ok(p) => p,
            // Refused before any checkpoint is touched, as alone.
            Err(e) => {
                out.give(checkpoints, i, Err(e), None);
                continue;
            }
        };
        // An earlier request may have loaded or evicted since step 2.
        let groups = laid[i].take().filter(|gs| {
            gs.iter()
                .all(|g| checkpoints.agent_key(&g.name) == Some(g.key))
        });
        let Some(groups) = groups else {
            shared += pending.len();
            run_shared(
                checkpoints,
                ds,
                std::mem::take(&mut pending),
                pass_tokens,
                &mut out,
            );
            let result = decide(checkpoints, settings, d);
            out.give(checkpoints, i, result, None);
            out.since = Instant::now();
            continue;
        };
        match admit(checkpoints, p, groups) {
            Ok(prepared) => pending.push((i, prepared)),
            Err(e) => out.give(checkpoints, i, Err(e), None),
        }
    }
    shared += pending.len();
    run_shared(checkpoints, ds, pending, pass_tokens, &mut out);
    tracing::debug!(
        requests = ds.len(),
        shared,
        prepare_us = prepared_us,
        total_us = started.elapsed().as_micros() as u64,
        "decided together"
    );
    for i in 0..ds.len() {
        if !out.given[i] {
            out.give(checkpoints, i, Err(unrouted()), None);
        }
    }
}

/// Where [`decide_prepared_each`] hands its answers, and the clock their times start from.
struct Deliveries<F> {
    answer: F,
    given: Vec<bool>,
    /// When the last pass or lone request had handed its answers over, or the call's start.
    since: Instant,
}

impl<F> Deliveries<F> {
    /// Hands request `index` over, counting its time from `since` (from the end of the last
    /// pass when `None`).
    fn give<C: Checkpoints>(
        &mut self,
        checkpoints: &C,
        index: usize,
        result: Result<Decided, DecideError>,
        since: Option<Instant>,
    ) where
        F: FnMut(&C, Answered),
    {
        debug_assert!(!self.given[index], "request {index} handed over twice");
        self.given[index] = true;
        let since = since.unwrap_or(self.since);
        (self.answer)(
            checkpoints,
            Answered {
                index,
                result,
                since,
            },
        );
    }
}

/// `f` over `items` on up to as many threads as the machine has, results in order.
fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(v) => v,
                // A panic in `f` is the caller's panic, as without threads.
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

/// What [`decide`] works out before it touches a checkpoint.
struct Planned {
    /// A tournament narrows a choice, or the states are read in windows: the request runs
    /// alone.
    alone: bool,
    routes: Vec<Routing>,
    /// The routed checkpoints, in order of first appearance.
    names: Vec<Checkpoint>,
    /// The question checks' outcome (reported where `decide` reports it: after the first
    /// group's checkpoint is taken).
    questions: Result<Vec<crate::question::Question>, QuestionError>,
}

fn plan_request(settings: &Settings, d: &Decision) -> Result<Planned, DecideError> {
    let tournament = settings.tournament_group > 0
        && tournament::plan(&d.questions, settings.tournament_group)?.is_some();
    let (routes, names) = route_states(settings, d, &d.states, &d.questions)?;
    Ok(Planned {
        alone: tournament || matches!(d.overflow, Overflow::Windows(_)),
        routes,
        names,
        questions: parse_questions(&d.questions),
    })
}

/// One routed group of a request, laid out on its agent's tokenizer.
struct LaidGroup {
    name: Checkpoint,
    key: u64,
    members: Vec<usize>,
    rows: Result<Vec<Vec<crate::layout::EncodedRow>>, PredictError>,
}

/// A planned, laid-out request taken into the shared passes: its checkpoints taken in order
/// (moving the residency order), its errors reported where `decide` reports them.
fn admit<C: Checkpoints>(
    checkpoints: &mut C,
    p: Planned,
    laid: Vec<LaidGroup>,
) -> Result<Prepared, DecideError> {
    let mut questions = Some(p.questions);
    let mut parsed = Vec::new();
    let mut groups = Vec::with_capacity(laid.len());
    for g in laid {
        // Resident (checked above), so this moves the residency order and loads nothing.
        checkpoints.agent(&g.name)?;
        if let Some(q) = questions.take() {
            parsed = q?;
        }
        groups.push(Group {
            key: g.key,
            members: g.members,
            rows: g.rows?,
            outputs: None,
        });
    }
    Ok(Prepared {
        routes: p.routes,
        questions: parsed,
        groups,
    })
}

/// The tokens one group's rows (per state, per question) take of a shared pass.
fn row_tokens(rows: &[Vec<crate::layout::EncodedRow>]) -> usize {
    rows.iter().flatten().map(|e| e.row.ids.len()).sum()
}

/// A request laid out for shared passes: its routes, its questions and, per routed
/// checkpoint, its states' rows.
#[derive(Default)]
struct Prepared {
    routes: Vec<Routing>,
    questions: Vec<crate::question::Question>,
    groups: Vec<Group>,
}

struct Group {
    /// [`Checkpoints::agent_key`] of the agent that answers it.
    key: u64,
    /// The request's states routed there, and their rows (one per question).
    members: Vec<usize>,
    rows: Vec<Vec<crate::layout::EncodedRow>>,
    /// The engine's outputs for `rows`, flattened, once run.
    outputs: Option<Result<Vec<crate::engine::RowLogits>, DecideError>>,
}

/// Runs the prepared requests' rows in shared passes, agent by agent, and hands each
/// request over as soon as the last pass holding its rows is done.
fn run_shared<C: Checkpoints, F: FnMut(&C, Answered)>(
    checkpoints: &mut C,
    ds: &[&Decision],
    pending: Vec<(usize, Prepared)>,
    pass_tokens: usize,
    out: &mut Deliveries<F>,
) {
    let mut keys: Vec<u64> = Vec::new();
    for (_, p) in &pending {
        for g in &p.groups {
            if !keys.contains(&g.key) {
                keys.push(g.key);
            }
        }
    }
    let mut run = Run {
        // Decoding needs each agent's config.
        configs: keys
            .iter()
            .filter_map(|&k| Some((k, checkpoints.peek(k)?.config.clone())))
            .collect(),
        waiting: pending.iter().map(|(_, p)| p.groups.len()).collect(),
        begun: vec![None; pending.len()],
        pending,
    };
    for pi in 0..run.pending.len() {
        if run.waiting[pi] == 0 {
            run.hand_over(&*checkpoints, ds, pi, out);
        }
    }
    for key in keys {
        // Every group for this agent, in request order: (request, group) indices.
        let members: Vec<(usize, usize)> = run
            .pending
            .iter()
            .enumerate()
            .flat_map(|(pi, (_, p))| {
                p.groups
                    .iter()
                    .enumerate()
                    .filter(move |(_, g)| g.key == key)
                    .map(move |(gi, _)| (pi, gi))
            })
            .collect();
        // Whole groups per pass, as many as fit `pass_tokens` (a larger one runs alone).
        let mut start = 0;
        while start < members.len() {
            let mut end = start;
            let mut tokens = 0;
            while end < members.len() {
                let (pi, gi) = members[end];
                let t = row_tokens(&run.pending[pi].1.groups[gi].rows);
                if end > start && tokens + t > pass_tokens {
                    break;
                }
                tokens += t;
                end += 1;
            }
            let batch = &members[start..end];
            for &(pi, _) in batch {
                run.begun[pi].get_or_insert(out.since);
            }
            let rows: Vec<crate::engine::Row> = batch
                .iter()
                .flat_map(|&(pi, gi)| run.pending[pi].1.groups[gi].rows.iter().flatten())
                .map(|e| e.row.clone())
                .collect();
            let Some(agent) = checkpoints.peek(key) else {
                let rest = &members[start..];
                for &(pi, gi) in rest {
                    run.pending[pi].1.groups[gi].outputs = Some(Err(unrouted()));
                }
                run.done(checkpoints, ds, rest, out);
                break;
            };
            let pass_started = Instant::now();
            let ran = if rows.is_empty() {
                Ok(Vec::new())
            } else {
                agent.forward.forward(&rows).and_then(|outputs| {
                    crate::agent::check_answered(&outputs, rows.len()).map(|()| outputs)
                })
            };
            // For the served-throughput profile (bench/gpu/cuda.sh `profile`).
            tracing::debug!(
                groups = batch.len(),
                rows = rows.len(),
                tokens,
                forward_us = pass_started.elapsed().as_micros() as u64,
                "shared pass"
            );
            match ran {
                Ok(outputs) => {
                    let mut outputs = outputs.into_iter();
                    for &(pi, gi) in batch {
                        let g = &mut run.pending[pi].1.groups[gi];
                        let n = g.rows.iter().map(Vec::len).sum();
                        g.outputs = Some(Ok(outputs.by_ref().take(n).collect()));
                    }
                }
                Err(e) => {
                    // Each request that shared the pass fails as it would alone.
                    let text = e.to_string();
                    for &(pi, gi) in batch {
                        let failed =
                            crate::engine::EngineError::backend("shared pass", text.clone());
                        run.pending[pi].1.groups[gi].outputs =
                            Some(Err(DecideError::Predict(failed.into())));
                    }
                }
            }
            run.done(checkpoints, ds, batch, out);
            out.since = Instant::now();
            start = end;
        }
    }
}

/// The requests of one shared run, and what each still waits for.
struct Run {
    pending: Vec<(usize, Prepared)>,
    /// Per request: its groups still without outputs.
    waiting: Vec<usize>,
    /// Per request: where its time starts (its first pass's `since`).
    begun: Vec<Option<Instant>>,
    /// Each agent's config, for decoding.
    configs: Vec<(u64, AgentConfig)>,
}

impl Run {
    /// Counts `groups` as run and hands over each request that has no group left to run.
    fn done<C: Checkpoints, F: FnMut(&C, Answered)>(
        &mut self,
        checkpoints: &C,
        ds: &[&Decision],
        groups: &[(usize, usize)],
        out: &mut Deliveries<F>,
    ) {
        for &(pi, _) in groups {
            self.waiting[pi] -= 1;
            if self.waiting[pi] == 0 {
                self.hand_over(checkpoints, ds, pi, out);
            }
        }
    }

    /// Decodes request `pi` and hands it over. Decoding is cheap next to starting threads:
    /// one request after another.
    fn hand_over<C: Checkpoints, F: FnMut(&C, Answered)>(
        &mut self,
        checkpoints: &C,
        ds: &[&Decision],
        pi: usize,
        out: &mut Deliveries<F>,
    ) {
        let (i, p) = (self.pending[pi].0, std::mem::take(&mut self.pending[pi].1));
        out.give(
            checkpoints,
            i,
            finish(&self.configs, ds[i], p),
            self.begun[pi],
        );
    }
}

/// A prepared request's answers from its groups' outputs.
fn finish(
    configs: &[(u64, AgentConfig)],
    d: &Decision,
    p: Prepared,
) -> Result<Decided, DecideError> {
    let mut answered: Vec<Option<StateResult>> = vec![None; d.states.len()];
    for g in p.groups {
        let outputs = g.outputs.unwrap_or_else(|| Err(unrouted()))?;
        let config = configs
            .iter()
            .find(|(k, _)| *k == g.key)
            .map(|(_, c)| c)
            .ok_or_else(unrouted)?;
        let mut at = 0;
        for (&i, items) in g.members.iter().zip(&g.rows) {
            let Some(outs) = outputs.get(at..at + items.len()) else {
                return Err(DecideError::Predict(
                    crate::engine::EngineError::Mismatch {
                        what: "rows",
                        got: outputs.len(),
                        expected: at + items.len(),
                    }
                    .into(),
                ));
            };
            answered[i] = Some(crate::agent::answer_rows(
                config,
                &p.questions,
                items,
                outs,
            )?);
            at += items.len();
        }
    }
    let states = answered
        .into_iter()
        .zip(p.routes)
        .map(|(r, routing)| {
            Ok(StateDecision {
                result: r.ok_or_else(unrouted)?,
                routing,
                tournament: Vec::new(),
            })
        })
        .collect::<Result<Vec<_>, DecideError>>()?;
    Ok(gate(states, d))
}
