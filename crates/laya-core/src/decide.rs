//! One decision, from a validated request to a finished answer: what upstream laya-serve does
//! once a request holds the inference gate (spec api.md §5.1 steps 15-17, §7, §12.3).
//!
//! [`decide`] routes every state ([`crate::routing`]), loads the routed checkpoints through
//! [`Checkpoints`] in upstream's order, validates the questions (step 16), plays a tournament
//! when one is configured and needed ([`crate::tournament`]), runs the forward passes through
//! each checkpoint's [`Agent`], then applies the `min_confidence` gate and adds Jev's
//! confidence. The caller renders the [`Decided`] with [`crate::render`].
//!
//! Nothing here knows threads, time or HTTP: the server's engine worker calls [`decide`] and
//! measures it; the CLI calls it directly.

use pyjson::{Object, Value};

use crate::agent::{BatchOptions, PredictError, StateResult};
pub use crate::checkpoints::Checkpoints;
use crate::confidence::{self, MinConfidence};
use crate::question::{parse_questions, QuestionError};
use crate::request::{BatchRequest, DecisionRequest};
use crate::routing::{self, Checkpoint, Routing, RoutingConfig};
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
        }
    }
}

/// Server-wide settings of the decision (fixed at start).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    pub routing: RoutingConfig,
    /// `LAYA_TOURNAMENT_GROUP`: narrow choices over this many options by elimination; 0 is off.
    pub tournament_group: usize,
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
    #[error("loading checkpoint {name}: {reason}")]
    Load { name: Checkpoint, reason: String },
}

impl DecideError {
    /// Whether upstream raises this as a `ValueError`, which it returns to the client with its
    /// text (422); every other failure is its 500 `inference failed`.
    pub fn is_caller_error(&self) -> bool {
        match self {
            DecideError::UnknownTask(_) | DecideError::Question(_) => true,
            DecideError::Tournament(t) => t.is_caller_error(),
            DecideError::Predict(p) => p.is_caller_error(),
            DecideError::Load { .. } => false,
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
    let mut states = match plan {
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
    let mut results: Vec<StateResult> = states.iter().map(|s| s.result.clone()).collect();
    if let Some(min) = &d.min_confidence {
        confidence::apply_gate(&mut results, min);
    }
    confidence::add_jev_confidence(&mut results);
    for (s, r) in states.iter_mut().zip(results) {
        s.result = r;
    }
    Ok(Decided { states })
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
        .map(|r| {
            r.ok_or_else(|| {
                DecideError::Tournament(TournamentError::Internal(
                    "a state was routed to no checkpoint".into(),
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((results, routes))
}
