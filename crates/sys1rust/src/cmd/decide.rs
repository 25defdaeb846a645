//! `sys1rust decide`: one `POST /v1/systemone` body in, the server's answer out, no server.
//! The body goes through the same validation and decision as the server's (default limits,
//! the served model under every name).

use std::io::Read;

use anyhow::Context;
use laya_core::decide::{self, Decision};
use laya_core::render::{self, Output};
use laya_core::request::{self, Limits};
use laya_core::routing::RoutingConfig;

use crate::cli::DecideArgs;
use crate::http::ApiError;

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
    let resolved = args.model.resolve()?;
    let settings = decide::Settings {
        routing: RoutingConfig::single_source(&super::repo_label(&resolved)),
        tournament_group: 0,
        pass_tokens: 0,
    };
    // The server's `detail` (or the failure behind its 500), as the error.
    let refused = |e: ApiError| anyhow::anyhow!("{e}");
    let decision: Decision = request::parse_decision(&bytes, &Limits::default(), &settings.routing)
        .map_err(|e| refused(e.into()))?
        .into();
    let (mut checkpoints, _) = super::load_single(&args.model, &resolved, false)?;
    let decided =
        decide::decide(&mut checkpoints, &settings, &decision).map_err(|e| refused(e.into()))?;
    let body = render::single_body(&decided, Output::Full).map_err(|e| refused(e.into()))?;
    println!("{body}");
    Ok(())
}
