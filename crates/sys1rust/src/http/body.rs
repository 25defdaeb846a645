//! Reading a request body the way upstream does, plus compressed bodies: a size cap checked on
//! `Content-Length` first and while streaming, and one deadline for the whole body.

use std::io::Read;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap};
use http_body_util::BodyExt;

use laya_core::request::RequestError;

use super::error::ApiError;

/// A broken upload or a corrupt compressed stream is as unreadable as invalid JSON.
fn unreadable() -> ApiError {
    ApiError::Request(RequestError::InvalidJson)
}

/// Reads the whole body within `deadline`, refusing more than `limit` bytes. A body in
/// `Content-Encoding: gzip` or `zstd` is decompressed with the same limit on the output, so a
/// small compressed body cannot expand past what an uncompressed one may be.
pub async fn read(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    deadline: Duration,
) -> Result<Vec<u8>, ApiError> {
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
    {
        if len.trim().parse::<u64>().is_ok_and(|n| n > limit as u64) {
            return Err(ApiError::BodyTooLarge);
        }
    }
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok());
    let raw = tokio::time::timeout(deadline, collect(body, limit))
        .await
        .map_err(|_| ApiError::BodyTimeout)??;
    decode(encoding, raw, limit)
}

/// The body `raw` sent with `Content-Encoding: encoding`, decompressed to at most `limit`
/// bytes (`BodyTooLarge` past it); a corrupt stream is unreadable JSON.
pub fn decode(encoding: Option<&str>, raw: Vec<u8>, limit: usize) -> Result<Vec<u8>, ApiError> {
    let encoding = encoding.map(|v| v.trim().to_ascii_lowercase());
    match encoding.as_deref() {
        Some("gzip") | Some("x-gzip") => {
            decompress(flate2::read::MultiGzDecoder::new(&raw[..]), limit)
        }
        Some("zstd") => match zstd::stream::read::Decoder::new(&raw[..]) {
            Ok(d) => decompress(d, limit),
            Err(_) => Err(unreadable()),
        },
        // Upstream ignores Content-Encoding and parses the raw bytes; so do we for any other.
        _ => Ok(raw),
    }
}

async fn collect(mut body: Body, limit: usize) -> Result<Vec<u8>, ApiError> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        // A broken upload (reset connection) leaves nothing to answer; report it as unreadable.
        let frame = frame.map_err(|_| unreadable())?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                return Err(ApiError::BodyTooLarge);
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

fn decompress(reader: impl Read, limit: usize) -> Result<Vec<u8>, ApiError> {
    let mut out = Vec::new();
    // One byte past the limit tells "exactly the limit" from "too large".
    match reader.take(limit as u64 + 1).read_to_end(&mut out) {
        Ok(_) if out.len() > limit => Err(ApiError::BodyTooLarge),
        Ok(_) => Ok(out),
        Err(_) => Err(unreadable()),
    }
}
