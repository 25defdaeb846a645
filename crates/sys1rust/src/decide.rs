//! `sys1rust decide`: one request body in, upstream's result JSON out, no server.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use laya_core::engine_api::BatchOptions;
use laya_core::pyjson::{self, Value};
use laya_core::question::parse_questions;
use laya_core::render;

use crate::ModelArgs;

#[derive(Args)]
pub struct DecideArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The request body (`{"state": ..., "questions": {...}}`); `-` or nothing reads stdin.
    pub request: Option<PathBuf>,
}

/// A decision request reduced to what the engine needs.
pub struct Request {
    pub state: Value,
    pub questions: pyjson::Object,
    pub opts: BatchOptions,
}

impl Request {
    /// Reads the fields the engine uses; the HTTP server applies upstream's full validation.
    pub fn parse(bytes: &[u8]) -> anyhow::Result<Request> {
        let parsed = pyjson::loads(bytes)
            .map_err(|e| anyhow::anyhow!("request body must be valid JSON: {e:?}"))?;
        let Value::Object(body) = parsed.value else {
            bail!("request body must be a JSON object")
        };
        let state = match body.get("state") {
            None | Some(Value::Null) => bail!("'state' is required"),
            Some(s) => s.clone(),
        };
        let Some(Value::Object(questions)) = body.get("questions").cloned() else {
            bail!("'questions' must be an object")
        };
        let int = |key: &str| -> anyhow::Result<Option<usize>> {
            match body.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Int(i)) => match i.as_i64() {
                    Some(v) if v > 0 => Ok(Some(v as usize)),
                    _ => bail!("{key} must be a positive integer"),
                },
                Some(_) => bail!("{key} must be an integer"),
            }
        };
        let opts = BatchOptions {
            max_len: int("max_len")?,
            head_max_len: int("head_max_len")?,
            batch_size: None,
        };
        Ok(Request {
            state,
            questions,
            opts,
        })
    }
}

pub fn run(args: &DecideArgs) -> anyhow::Result<()> {
    let mut bytes = Vec::new();
    match &args.request {
        Some(p) if p.as_os_str() != "-" => {
            bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
        }
        _ => {
            std::io::stdin()
                .read_to_end(&mut bytes)
                .context("reading stdin")?;
        }
    }
    let request = Request::parse(&bytes)?;
    let questions = parse_questions(&request.questions)?;
    let mut engine = args.model.load()?;
    let results = engine.predict_batch(
        std::slice::from_ref(&request.state),
        &questions,
        &request.opts,
    )?;
    let text = render::result_json(&results[0])?;
    println!("{text}");
    Ok(())
}
