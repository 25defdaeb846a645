//! The sequence layout: upstream `build_head` and `build_sequence` (spec `model.md` 2.4-2.6).
//!
//! `[CLS] <type> question: <instructions> [SEP] [MASK] opt0 [MASK] opt1 ... [SEP] state [SEP]`

use crate::engine::Row;
use crate::question::Question;
use crate::tokenizer::{Tokenizer, TokenizerError};

/// Option texts are cut to this many tokens before their `[MASK]` is prepended.
pub const OPTION_TOKEN_CAP: usize = 48;
/// Below this many tokens left for the instruction, options are cut to a per-option share.
const MIN_INSTRUCTION_BUDGET: usize = 16;

/// Token budgets of one call: the checkpoint's, or a request's overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Total tokens per sequence.
    pub max_len: usize,
    /// Tokens for instruction + options (a budget, not a cap on the head's length).
    pub head_max_len: usize,
}

/// The question half of a sequence, independent of the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub ids: Vec<u32>,
    /// Index of each slot's `[MASK]` in `ids`.
    pub markers: Vec<usize>,
    pub options: OptionStats,
}

/// What the head budget did to a question's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionStats {
    pub options: usize,
    /// Distinct option token spans after the cut; below `options` when options collapsed.
    pub options_distinct: usize,
    /// The per-option cap applied when the options overflowed the budget.
    pub tokens_per_option: Option<usize>,
}

impl OptionStats {
    pub fn collapsed(&self) -> bool {
        self.options_distinct < self.options
    }
}

/// How much of the state a question's row kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateStats {
    pub state_tokens: usize,
    pub state_tokens_used: usize,
    pub state_tokens_dropped: usize,
    pub truncated: bool,
}

/// Upstream's `ValueError` when a question's markers do not fit in `max_len`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "question {qid}: only {fit} of its {total} option markers fit in max_len={max_len} with \
     head_max_len={head_max_len} spent on the question; lower head_max_len, raise max_len, or use fewer options"
)]
pub struct MarkersDoNotFit {
    /// Python `repr` of the question id.
    pub qid: String,
    pub fit: usize,
    pub total: usize,
    pub max_len: usize,
    pub head_max_len: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    MarkersDoNotFit(#[from] MarkersDoNotFit),
}

/// Upstream `build_head`.
pub fn build_head(
    tok: &Tokenizer,
    q: &Question,
    head_max_len: usize,
) -> Result<Head, TokenizerError> {
    let head_text = format!(
        "{} question: {}",
        q.qtype.name(),
        tok.scrub_mask(&q.instructions)
    );
    let mut head_ids = tok.encode(&head_text)?;
    let identity: Vec<usize>;
    let order: &[usize] = match &q.option_order {
        Some(order) => order,
        None => {
            identity = (0..q.options.len()).collect();
            &identity
        }
    };
    let mut opt_ids: Vec<Vec<u32>> = Vec::with_capacity(order.len());
    for &i in order {
        let text = format!(" {}", tok.scrub_mask(&q.options[i]));
        let mut ids = tok.encode(&text)?;
        ids.truncate(OPTION_TOKEN_CAP);
        let mut with_marker = Vec::with_capacity(ids.len() + 1);
        with_marker.push(tok.mask.id);
        with_marker.extend(ids);
        opt_ids.push(with_marker);
    }
    let spent = |opts: &[Vec<u32>]| opts.iter().map(Vec::len).sum::<usize>();
    // Signed: the options may exceed the budget by far (100 options).
    let mut budget = head_max_len as i64 - spent(&opt_ids) as i64;
    let mut tokens_per_option = None;
    if budget < MIN_INSTRUCTION_BUDGET as i64 {
        let per = ((head_max_len as i64 - MIN_INSTRUCTION_BUDGET as i64)
            .div_euclid(opt_ids.len().max(1) as i64))
        .max(4) as usize;
        tokens_per_option = Some(per);
        for o in &mut opt_ids {
            o.truncate(per);
        }
        budget = head_max_len as i64 - spent(&opt_ids) as i64;
    }
    head_ids.truncate(budget.max(8) as usize);

    let mut ids = Vec::with_capacity(3 + head_ids.len() + spent(&opt_ids));
    ids.push(tok.cls.id);
    ids.extend_from_slice(&head_ids);
    ids.push(tok.sep.id);
    let mut markers = Vec::with_capacity(opt_ids.len());
    for o in &opt_ids {
        markers.push(ids.len());
        ids.extend_from_slice(o);
    }
    ids.push(tok.sep.id);
    let mut distinct = opt_ids.clone();
    distinct.sort();
    distinct.dedup();
    Ok(Head {
        ids,
        markers,
        options: OptionStats {
            options: opt_ids.len(),
            options_distinct: distinct.len(),
            tokens_per_option,
        },
    })
}

/// Tokens left for the state after a head: `max(0, max_len - len(head) - 1)` (the -1 keeps a
/// place for the closing `[SEP]`).
pub fn state_room(head: &Head, max_len: usize) -> usize {
    max_len.saturating_sub(head.ids.len() + 1)
}

/// One (state, question) row with what the layout did to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedRow {
    pub row: Row,
    pub state: StateStats,
    pub options: OptionStats,
}

/// Upstream `build_sequence` for one question against an already tokenized state.
///
/// `truncate_left` keeps the end of the state (list states: the newest turns).
pub fn build_sequence(
    tok: &Tokenizer,
    q: &Question,
    head: &Head,
    state_ids: &[u32],
    truncate_left: bool,
    budget: Budget,
) -> Result<EncodedRow, MarkersDoNotFit> {
    let room = state_room(head, budget.max_len);
    let kept = if truncate_left {
        &state_ids[state_ids.len().saturating_sub(room)..]
    } else {
        &state_ids[..room.min(state_ids.len())]
    };
    let mut ids = Vec::with_capacity(head.ids.len() + kept.len() + 1);
    ids.extend_from_slice(&head.ids);
    ids.extend_from_slice(kept);
    ids.push(tok.sep.id);
    ids.truncate(budget.max_len);
    let markers: Vec<usize> = head
        .markers
        .iter()
        .copied()
        .filter(|&m| m < budget.max_len)
        .collect();
    if markers.len() != head.options.options {
        return Err(MarkersDoNotFit {
            qid: pyjson::repr_str(&q.id),
            fit: markers.len(),
            total: head.options.options,
            max_len: budget.max_len,
            head_max_len: budget.head_max_len,
        });
    }
    let used = kept.len();
    Ok(EncodedRow {
        row: Row {
            ids,
            markers,
            qtype: q.qtype,
        },
        state: StateStats {
            state_tokens: state_ids.len(),
            state_tokens_used: used,
            state_tokens_dropped: state_ids.len() - used,
            truncated: used < state_ids.len(),
        },
        options: head.options,
    })
}
