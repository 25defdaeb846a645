//! [`Agent`]: one checkpoint's tokenizer and configs plus a [`Forward`] implementation, answering
//! decisions the way upstream `Agent.predict_batch` and `Agent.predict_long` do.

use std::borrow::Borrow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::{AgentConfig, CheckpointConfig, ConfigError, EncoderConfig};
use crate::decode::{self, Answer, WindowRef};
use crate::engine::{EngineError, Forward, Row, RowLogits};
use crate::layout::{self, Budget, EncodedRow, Head, LayoutError, MarkersDoNotFit};
use crate::question::Question;
use crate::tokenizer::{Tokenizer, TokenizerError};
use pyjson::Value;

/// One state's result: upstream's `{"model", "answers", "usage"}`.
#[derive(Debug, Clone, PartialEq)]
pub struct StateResult {
    /// `(question id, answer)` in request order.
    pub answers: Vec<(String, Answer)>,
    pub usage: Usage,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    pub input_tokens: usize,
    pub output_tokens: usize,
    /// Absent when the request had no questions (upstream then reports only the two counts).
    pub state: Option<StateUsage>,
    /// `predict_long` only: how many windows the model scored.
    pub windows: Option<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StateUsage {
    pub state_tokens: usize,
    pub state_tokens_dropped: usize,
    pub truncated: Truncated,
    pub truncated_questions: Vec<String>,
    /// Questions whose options collapsed under the head budget.
    pub options: Vec<CollapsedOptions>,
}

/// `truncated` is a flag for one state; `predict_long` sums it over windows into a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truncated {
    Flag(bool),
    Windows(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollapsedOptions {
    pub qid: String,
    pub total: usize,
    pub distinct: usize,
    pub tokens_per_option: Option<usize>,
}

/// Why `predict_batch` / `predict_long` failed.
#[derive(Debug, thiserror::Error)]
pub enum PredictError {
    /// A caller error (upstream's `ValueError`, whose text the server returns).
    #[error(transparent)]
    MarkersDoNotFit(#[from] MarkersDoNotFit),
    /// A caller error of `predict_long`'s window plan (upstream's `ValueError`).
    #[error(transparent)]
    Windows(#[from] WindowError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl PredictError {
    /// Whether upstream raises this as a `ValueError`: the caller's mistake, whose text it
    /// returns (422), rather than a failure of the server (500 `inference failed`).
    pub fn is_caller_error(&self) -> bool {
        matches!(
            self,
            PredictError::MarkersDoNotFit(_) | PredictError::Windows(_)
        )
    }
}

/// `predict_long` cannot lay out windows for these questions (upstream `window_budget`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("predict_long: the questions' options fill the whole sequence (max_len={max_len}, head_max_len={head_max_len}), leaving no room for the state; no window can carry any of it. A label set this large is what laya.shortlist.predict_shortlist is for")]
    NoRoom { max_len: usize, head_max_len: usize },
    #[error("predict_long: stride={stride} steps past the {size}-token window{}, so {} tokens between every pair of windows would be read by no window at all; pass stride <= {size}", if *.capped { " these questions leave room for" } else { "" }, .stride - .size)]
    StrideTooLong {
        stride: usize,
        size: usize,
        /// The questions shrank the window below the one asked for.
        capped: bool,
    },
}

impl From<LayoutError> for PredictError {
    fn from(e: LayoutError) -> Self {
        match e {
            LayoutError::Tokenizer(t) => PredictError::Tokenizer(t),
            LayoutError::MarkersDoNotFit(m) => PredictError::MarkersDoNotFit(m),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The tokenizer gives an id the encoder has no embedding for: every request would fail.
    #[error("{tokenizer}: {what} has id {id}, outside the encoder's vocabulary ({config} says vocab_size {vocab_size})")]
    Vocabulary {
        /// The tokenizer's directory.
        tokenizer: PathBuf,
        /// `encoder/config.json`.
        config: PathBuf,
        /// Which token: a special token's role and text, or the largest id.
        what: String,
        id: u32,
        vocab_size: usize,
    },
}

/// Per-call options of `predict_batch`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchOptions {
    pub max_len: Option<usize>,
    pub head_max_len: Option<usize>,
    /// States per forward pass; `None` puts them all in one pass.
    pub batch_size: Option<usize>,
}

/// Per-call options of `predict_long`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LongOptions {
    pub window: Option<usize>,
    pub stride: Option<usize>,
    pub batch_size: Option<usize>,
    /// The row budget the windows are laid out in (the checkpoint's when `None`). Upstream's
    /// `predict_long` always uses the checkpoint's; the server lets a request set it, as
    /// `max_len` / `head_max_len` do for one pass.
    pub max_len: Option<usize>,
    pub head_max_len: Option<usize>,
}

impl LongOptions {
    /// The budget options of the passes over the windows.
    fn batch(&self, batch_size: Option<usize>) -> BatchOptions {
        BatchOptions {
            max_len: self.max_len,
            head_max_len: self.head_max_len,
            batch_size,
        }
    }
}

/// A loaded checkpoint with its forward pass.
pub struct Agent<F> {
    /// Shared with threads that lay out rows while the engine runs ([`layout_rows`]).
    pub tokenizer: Arc<Tokenizer>,
    pub config: AgentConfig,
    pub encoder: EncoderConfig,
    pub forward: F,
}

/// Serialized state text with the mask token scrubbed (upstream `serialize_state` + replace).
pub fn state_text(tok: &Tokenizer, state: &Value) -> String {
    match state {
        Value::Str(s) => tok.scrub_mask(s),
        other => tok.scrub_mask(&pyjson::dumps_spaced(other)),
    }
}

/// Whether every id `tok` can give has a row of the encoder's embeddings: the special tokens
/// (named, as the clearest cause), then the largest id. The engines refuse a row holding an
/// id past `vocab_size`, so a checkpoint that fails this would load, report ready and fail
/// every request.
fn check_vocabulary(tok: &Tokenizer, enc: &EncoderConfig) -> Result<(), (String, u32)> {
    let specials = [
        ("cls", &tok.cls),
        ("sep", &tok.sep),
        ("mask", &tok.mask),
        ("pad", &tok.pad),
    ];
    let outside = |id: u32| usize::try_from(id).map_or(true, |id| id >= enc.vocab_size);
    if let Some((role, s)) = specials.into_iter().find(|(_, s)| outside(s.id)) {
        return Err((format!("the {role} token {:?}", s.text), s.id));
    }
    if outside(tok.max_id()) {
        return Err(("the largest token id".into(), tok.max_id()));
    }
    Ok(())
}

impl<F: Forward> Agent<F> {
    /// Reads the tokenizer and configs of a checkpoint directory; the caller brings the
    /// forward pass (built from the same directory).
    pub fn load(dir: &Path, forward: F) -> Result<Self, LoadError> {
        let cfg = CheckpointConfig::load(dir)?;
        let tokenizer_dir = dir.join("tokenizer");
        let tokenizer = Tokenizer::load(&tokenizer_dir)?;
        check_vocabulary(&tokenizer, &cfg.encoder).map_err(|(what, id)| LoadError::Vocabulary {
            tokenizer: tokenizer_dir,
            config: dir.join("encoder").join("config.json"),
            what,
            id,
            vocab_size: cfg.encoder.vocab_size,
        })?;
        Ok(Agent {
            tokenizer: Arc::new(tokenizer),
            config: cfg.agent,
            encoder: cfg.encoder,
            forward,
        })
    }

    fn budget(&self, opts: &BatchOptions) -> Budget {
        budget_of(&self.config, opts)
    }

    /// Lays out the rows of every state without running the model (for parity tests and
    /// for callers that batch across requests).
    pub fn layout<S: Borrow<Value>>(
        &self,
        states: &[S],
        questions: &[Question],
        opts: &BatchOptions,
    ) -> Result<Vec<Vec<EncodedRow>>, PredictError> {
        layout_rows(&self.tokenizer, &self.config, states, questions, opts)
    }

    /// Upstream `predict_batch`: the same questions over every state, `batch_size` states per
    /// forward pass. An empty question set answers without tokenizing or running the model.
    pub fn predict_batch<S: Borrow<Value>>(
        &mut self,
        states: &[S],
        questions: &[Question],
        opts: &BatchOptions,
    ) -> Result<Vec<StateResult>, PredictError> {
        if questions.is_empty() {
            return Ok(states.iter().map(|_| unasked()).collect());
        }
        let chunk = opts
            .batch_size
            .filter(|&b| b > 0)
            .unwrap_or(states.len())
            .max(1);
        let encoded = self.layout(states, questions, opts)?;
        let mut results = Vec::with_capacity(states.len());
        for group in encoded.chunks(chunk) {
            let rows: Vec<Row> = group.iter().flatten().map(|e| e.row.clone()).collect();
            let outputs = self.forward.forward(&rows)?;
            check_answered(&outputs, rows.len())?;
            let mut at = 0;
            for items in group {
                results.push(self.answer(questions, items, &outputs[at..at + items.len()])?);
                at += items.len();
            }
        }
        Ok(results)
    }

    /// One state's result from the engine's `outputs` for its rows `items` (one per
    /// question, as [`Agent::layout`] made them).
    pub fn answer(
        &self,
        questions: &[Question],
        items: &[EncodedRow],
        outputs: &[RowLogits],
    ) -> Result<StateResult, PredictError> {
        answer_rows(&self.config, questions, items, outputs)
    }

    /// The windows `predict_long` would score (upstream `window_budget` and the window split),
    /// without running the model. `None` when the state fits one pass.
    pub fn long_scan(
        &self,
        state: &Value,
        questions: &[Question],
        opts: &LongOptions,
    ) -> Result<LongScan, PredictError> {
        let budget = self.budget(&opts.batch(None));
        let heads = questions
            .iter()
            .map(|q| layout::build_head(&self.tokenizer, q, budget.head_max_len))
            .collect::<Result<Vec<_>, _>>()?;
        let plan = plan_windows(&heads, budget, opts)?;
        let state_ids = self.tokenizer.encode(&state_text(&self.tokenizer, state))?;
        let explicit = opts.window.is_some_and(|w| w > 0);
        let fits = if explicit { plan.size } else { plan.room };
        let mut scan = LongScan {
            state_tokens: state_ids.len(),
            windows: Vec::new(),
            starts: Vec::new(),
            plan,
            batch_cap: None,
        };
        if state_ids.len() <= fits {
            return Ok(scan);
        }
        let n = state_ids.len();
        let mut i = 0;
        while i < n {
            let end = (i + plan.size).min(n);
            scan.windows
                .push(self.tokenizer.decode(&state_ids[i..end])?);
            scan.starts.push(i);
            if i + plan.size >= n {
                break;
            }
            i += plan.step;
        }
        scan.batch_cap = window_batch_cap(
            scan.windows.len(),
            plan.size,
            default_window(budget),
            opts.batch_size,
        );
        Ok(scan)
    }

    /// Upstream `predict_long`: scans a state longer than one sequence in overlapping token
    /// windows and keeps, per question, the deciding window's answer (spec `model.md` 2.10).
    pub fn predict_long(
        &mut self,
        state: &Value,
        questions: &[Question],
        opts: &LongOptions,
    ) -> Result<StateResult, PredictError> {
        let scan = self.long_scan(state, questions, opts)?;
        self.predict_scan(state, questions, &scan, opts, scan.batch_cap)
    }

    /// [`Agent::predict_long`] over a scan already made, `batch_size` windows per forward
    /// pass (`None`: all in one).
    pub fn predict_scan(
        &mut self,
        state: &Value,
        questions: &[Question],
        scan: &LongScan,
        opts: &LongOptions,
        batch_size: Option<usize>,
    ) -> Result<StateResult, PredictError> {
        if scan.windows.is_empty() {
            let mut single = self
                .predict_batch(std::slice::from_ref(state), questions, &opts.batch(None))?
                .remove(0);
            single.usage.windows = Some(1);
            return Ok(single);
        }
        let states: Vec<Value> = scan.windows.iter().map(|w| Value::Str(w.clone())).collect();
        let results = self.predict_batch(&states, questions, &opts.batch(batch_size))?;
        let mut answers = Vec::with_capacity(questions.len());
        for (qi, q) in questions.iter().enumerate() {
            let per: Vec<&Answer> = results.iter().map(|r| &r.answers[qi].1).collect();
            let key = |a: &Answer| match &a.body {
                decode::AnswerBody::Noul { noul, .. } => *noul,
                _ => a.answer_confidence,
            };
            // Python's max() keeps the first of equal keys: ties go to the earliest window.
            let mut best = 0;
            for (j, a) in per.iter().enumerate() {
                if key(a) > key(per[best]) {
                    best = j;
                }
            }
            let mut ans = per[best].clone();
            ans.window = Some(WindowRef {
                index: best,
                token_start: scan.starts[best],
                token_end: (scan.starts[best] + scan.plan.size).min(scan.state_tokens),
                count: results.len(),
            });
            answers.push((q.id.clone(), ans));
        }
        let usage = merge_usage(&results);
        Ok(StateResult { answers, usage })
    }

    /// The row budget `opts` lays rows out in.
    pub fn row_budget(&self, opts: &BatchOptions) -> Budget {
        self.budget(opts)
    }
}

fn budget_of(config: &AgentConfig, opts: &BatchOptions) -> Budget {
    Budget {
        max_len: opts.max_len.unwrap_or(config.max_len),
        head_max_len: opts.head_max_len.unwrap_or(config.head_max_len),
    }
}

/// [`Agent::layout`] from the two parts of a checkpoint it needs, which (unlike the engine)
/// can be shared between threads: every (state, question) row of every state.
///
/// All on the calling thread: with ASCII text on the byte-level fast path, ten questions' heads
/// tokenize in less time than a thread takes to start.
pub fn layout_rows<S: Borrow<Value>>(
    tokenizer: &Tokenizer,
    config: &AgentConfig,
    states: &[S],
    questions: &[Question],
    opts: &BatchOptions,
) -> Result<Vec<Vec<EncodedRow>>, PredictError> {
    let budget = budget_of(config, opts);
    let heads = questions
        .iter()
        .map(|q| layout::build_head(tokenizer, q, budget.head_max_len))
        .collect::<Result<Vec<_>, _>>()?;
    states
        .iter()
        .map(|s| encode_state(tokenizer, s.borrow(), questions, &heads, budget))
        .collect()
}

/// Lays out every (state, question) row of one state (upstream `_encode_state`).
fn encode_state(
    tokenizer: &Tokenizer,
    state: &Value,
    questions: &[Question],
    heads: &[Head],
    budget: Budget,
) -> Result<Vec<EncodedRow>, PredictError> {
    let state_ids = tokenizer.encode(&state_text(tokenizer, state))?;
    let truncate_left = matches!(state, Value::Array(_));
    questions
        .iter()
        .zip(heads)
        .map(|(q, head)| {
            layout::build_sequence(tokenizer, q, head, &state_ids, truncate_left, budget)
                .map_err(PredictError::from)
        })
        .collect()
}

/// [`Agent::answer`] from the checkpoint's config alone (shareable between threads).
pub fn answer_rows(
    config: &AgentConfig,
    questions: &[Question],
    items: &[EncodedRow],
    outputs: &[RowLogits],
) -> Result<StateResult, PredictError> {
    if questions.is_empty() {
        return Ok(unasked());
    }
    check_answered(outputs, items.len())?;
    let mut answers = Vec::with_capacity(questions.len());
    for ((q, item), out) in questions.iter().zip(items).zip(outputs) {
        if out.logits.len() != item.row.markers.len() {
            return Err(EngineError::Mismatch {
                what: "logits",
                got: out.logits.len(),
                expected: item.row.markers.len(),
            }
            .into());
        }
        answers.push((q.id.clone(), decode::decode(q, out, config)));
    }
    Ok(StateResult {
        answers,
        usage: usage_of(questions, items),
    })
}

/// The result of a state asked no questions: upstream answers it without the model.
fn unasked() -> StateResult {
    StateResult {
        answers: Vec::new(),
        usage: Usage {
            input_tokens: 0,
            output_tokens: 0,
            state: None,
            windows: None,
        },
    }
}

/// An engine must answer every row it was given.
pub fn check_answered(outputs: &[RowLogits], expected: usize) -> Result<(), EngineError> {
    if outputs.len() == expected {
        Ok(())
    } else {
        Err(EngineError::Mismatch {
            what: "rows",
            got: outputs.len(),
            expected,
        })
    }
}

/// The scan `predict_long` makes of one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LongScan {
    /// Tokens of the whole serialized state.
    pub state_tokens: usize,
    /// Decoded window texts, scored as ordinary string states; empty when one pass suffices.
    pub windows: Vec<String>,
    /// Token offset of each window.
    pub starts: Vec<usize>,
    pub plan: WindowPlan,
    /// States per forward pass over the windows.
    pub batch_cap: Option<usize>,
}

fn usage_of(questions: &[Question], items: &[EncodedRow]) -> Usage {
    let input_tokens = items.iter().map(|e| e.row.ids.len()).sum();
    let dropped = items
        .iter()
        .map(|e| e.state.state_tokens_dropped)
        .max()
        .unwrap_or(0);
    let options = questions
        .iter()
        .zip(items)
        .filter(|(_, e)| e.options.collapsed())
        .map(|(q, e)| CollapsedOptions {
            qid: q.id.clone(),
            total: e.options.options,
            distinct: e.options.options_distinct,
            tokens_per_option: e.options.tokens_per_option,
        })
        .collect();
    Usage {
        input_tokens,
        output_tokens: 0,
        state: Some(StateUsage {
            state_tokens: items.first().map(|e| e.state.state_tokens).unwrap_or(0),
            state_tokens_dropped: dropped,
            truncated: Truncated::Flag(dropped > 0),
            truncated_questions: questions
                .iter()
                .zip(items)
                .filter(|(_, e)| e.state.truncated)
                .map(|(q, _)| q.id.clone())
                .collect(),
            options,
        }),
        windows: None,
    }
}

/// Upstream's usage merge over windows: numbers summed (`truncated` becomes a count), dicts
/// merged, lists from the last window; `output_tokens` 0 and `windows` appended.
fn merge_usage(results: &[StateResult]) -> Usage {
    let mut input_tokens = 0;
    let mut state: Option<StateUsage> = None;
    for r in results {
        input_tokens += r.usage.input_tokens;
        if let Some(s) = &r.usage.state {
            let truncated_now = match s.truncated {
                Truncated::Flag(b) => b as usize,
                Truncated::Windows(n) => n,
            };
            state = Some(match state.take() {
                None => StateUsage {
                    truncated: Truncated::Windows(truncated_now),
                    ..s.clone()
                },
                Some(prev) => {
                    let mut options = prev.options;
                    for o in &s.options {
                        match options.iter_mut().find(|p| p.qid == o.qid) {
                            Some(p) => *p = o.clone(),
                            None => options.push(o.clone()),
                        }
                    }
                    let prev_truncated = match prev.truncated {
                        Truncated::Flag(b) => b as usize,
                        Truncated::Windows(n) => n,
                    };
                    StateUsage {
                        state_tokens: prev.state_tokens + s.state_tokens,
                        state_tokens_dropped: prev.state_tokens_dropped + s.state_tokens_dropped,
                        truncated: Truncated::Windows(prev_truncated + truncated_now),
                        truncated_questions: s.truncated_questions.clone(),
                        options,
                    }
                }
            });
        }
    }
    Usage {
        input_tokens,
        output_tokens: 0,
        state,
        windows: Some(results.len()),
    }
}

/// The window size, step and room of a `predict_long` scan (upstream `window_budget`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowPlan {
    pub size: usize,
    pub step: usize,
    pub room: usize,
}

/// `max(64, max_len - head_max_len - 8)`: the state budget the config leaves.
fn default_window(budget: Budget) -> usize {
    (budget.max_len as i64 - budget.head_max_len as i64 - 8).max(64) as usize
}

/// Upstream `window_budget` (warnings aside).
pub fn plan_windows(
    heads: &[Head],
    budget: Budget,
    opts: &LongOptions,
) -> Result<WindowPlan, WindowError> {
    let window = opts.window.filter(|&w| w > 0);
    let stride = opts.stride.filter(|&s| s > 0);
    let requested = window.unwrap_or_else(|| default_window(budget));
    let room = heads
        .iter()
        .map(|h| layout::state_room(h, budget.max_len))
        .min()
        .unwrap_or(requested);
    if room == 0 {
        return Err(WindowError::NoRoom {
            max_len: budget.max_len,
            head_max_len: budget.head_max_len,
        });
    }
    let size = requested.min(room);
    let mut step = stride.unwrap_or((size / 2).max(1));
    if step > size {
        if size < requested && stride.is_some_and(|s| s <= requested) {
            step = (size / 2).max(1);
        } else {
            return Err(WindowError::StrideTooLong {
                stride: step,
                size,
                capped: size < requested,
            });
        }
    }
    Ok(WindowPlan { size, step, room })
}

/// Upstream `window_batch_cap`: with no explicit batch size, chunk the scan only when capping
/// the window multiplied the window count by more than 2.
fn window_batch_cap(
    n_windows: usize,
    window: usize,
    config_budget: usize,
    batch_size: Option<usize>,
) -> Option<usize> {
    if batch_size.is_some() {
        return batch_size;
    }
    if window >= config_budget {
        return None;
    }
    let half = (window / 2).max(1);
    let config_half = (config_budget / 2).max(1);
    let unclamped = (n_windows * half).div_ceil(config_half).max(1);
    if n_windows > 2 * unclamped {
        Some(unclamped)
    } else {
        None
    }
}
