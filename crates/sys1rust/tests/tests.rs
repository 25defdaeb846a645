//! sys1rust integration tests, linked as one binary, one module per area:
//!
//! * `conformance`: the §13 cases of spec api.md and what sys1rust adds, against the app in
//!   process (and the real binary where the environment is the point);
//! * `replay`: every recorded request of upstream's references, byte for byte, on the
//!   recorded-logits engine and on MLX (f32 and f16);
//! * `router`: upstream's router over the three fixture checkpoints, every configuration of
//!   its references, by the real binary;
//! * `transport`: real sockets: admission under slow uploads, idle connections, SIGTERM;
//! * `jev`: strict Jev mode against jevcompat and Jev's Python client, and its own rules;
//! * `windows`: long states read in windows (`overflow`), against upstream's `predict_long`;
//! * `dispatch`: several engine workers (`--gpus`) with mock engines: least-loaded dispatch;
//! * `batching`: queued requests sharing forward passes, answers unchanged;
//! * `reliability`: clients that never read, early errors, abandoned and overdue requests;
//! * `serving`: what operators see: request logs and ids, readiness, drain, `--version`;
//! * `readme_example`, `hub` (downloads from a mock hub by the real binary), `install`
//!   (installer and service files).

mod batching;
mod conformance;
mod dispatch;
mod hub;
mod install;
mod jev;
mod readme_example;
mod reliability;
mod replay;
mod router;
mod serving;
#[allow(dead_code)]
mod support;
mod transport;
mod windows;
