//! HTTP against a Hugging Face hub: file metadata (`HEAD`) and resumable downloads (`GET`
//! with `Range`) of `{endpoint}/{repo}/resolve/{revision}/{path}`.
//!
//! Redirects are followed here, not by the HTTP library, because of the token: the hub
//! serves LFS files through a redirect to a CDN on another origin, and the token must reach
//! only the endpoint's own origin. Once a chain of redirects leaves that origin the token is
//! not sent again, even if a later hop comes back. `HEAD` stops at the first cross-origin
//! redirect, because the hub puts the file's metadata (`X-Linked-Etag`, `X-Linked-Size`,
//! `X-Repo-Commit`) on that redirect, as huggingface_hub expects.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use url::Url;

use crate::config::{clean_token, HubConfig};
use crate::error::HubError;
use crate::progress::Progress;
use crate::proxy::ProxyConfig;

const MAX_REDIRECTS: usize = 10;

/// What the hub says about one file.
#[derive(Debug, Clone, Default)]
pub(crate) struct FileMeta {
    /// `X-Repo-Commit`: the commit the revision resolved to.
    pub commit: Option<String>,
    /// `X-Linked-Etag` (LFS: sha256) or `ETag` (git blob id), unquoted.
    pub etag: Option<String>,
    /// `X-Linked-Size`, else `Content-Length` of a non-redirect answer.
    pub size: Option<u64>,
}

/// The token as it will be sent, or why it cannot be.
enum Auth {
    None,
    /// The whole `Authorization` value.
    Bearer(String),
    /// Checked once here, reported at the first request that would carry it, so that work
    /// needing no network (offline resolution, listing) is not refused over it.
    Unsendable {
        position: usize,
        what: &'static str,
    },
}

/// A blocking hub client.
pub(crate) struct Client {
    /// For requests that go to their host directly.
    direct: ureq::Agent,
    /// One agent per distinct proxy value (ureq ties a proxy to an agent); an unusable value
    /// keeps its error for the first request that would use it.
    proxied: Vec<(String, Result<ureq::Agent, String>)>,
    proxy: ProxyConfig,
    endpoint: Url,
    auth: Auth,
    retries: u32,
    retry_delay: Duration,
}

impl Client {
    pub(crate) fn new(config: &HubConfig) -> Result<Client, HubError> {
        let endpoint = parse_endpoint(&config.endpoint)?;
        let builder = || {
            ureq::AgentBuilder::new()
                .redirects(0)
                .timeout_connect(config.connect_timeout)
                .timeout_read(config.read_timeout)
                .try_proxy_from_env(false)
                .user_agent(concat!(
                    "laya-hub/",
                    env!("CARGO_PKG_VERSION"),
                    "; sys1rust"
                ))
        };
        let proxied = config
            .proxy
            .values()
            .into_iter()
            .map(|value| {
                let agent = parse_proxy(value).map(|p| builder().proxy(p).build());
                (value.to_owned(), agent)
            })
            .collect();
        // The config's token may be set directly rather than read by from_env: clean it the
        // same way so both paths send the same thing.
        let auth = match config.token.as_deref().and_then(clean_token) {
            None => Auth::None,
            Some(token) => match unsendable(&token) {
                Some((position, what)) => Auth::Unsendable { position, what },
                None => Auth::Bearer(format!("Bearer {token}")),
            },
        };
        Ok(Client {
            direct: builder().build(),
            proxied,
            proxy: config.proxy.clone(),
            endpoint,
            auth,
            retries: config.retries,
            retry_delay: config.retry_delay,
        })
    }

    /// The agent that reaches `url`: through its scheme's proxy unless `no_proxy` exempts it.
    fn agent_for(&self, url: &Url) -> Result<&ureq::Agent, HubError> {
        let Some((variable, value)) = self.proxy.for_url(url) else {
            return Ok(&self.direct);
        };
        let refused = |reason: &str| HubError::InvalidProxy {
            variable,
            reason: reason.to_owned(),
        };
        match self.proxied.iter().find(|(v, _)| v == value) {
            Some((_, Ok(agent))) => Ok(agent),
            Some((_, Err(reason))) => Err(refused(reason)),
            // values() lists every value for_url can pick; this is only a guard.
            None => Err(refused("not known when the client was built")),
        }
    }

    /// `{endpoint}/{repo}/resolve/{revision}/{path}`, each part percent-encoded as a path
    /// segment (a revision like `refs/pr/1` becomes one segment, as huggingface_hub sends it).
    pub(crate) fn resolve_url(&self, repo: &str, revision: &str, path: &str) -> Url {
        let mut url = self.endpoint.clone();
        if let Ok(mut segs) = url.path_segments_mut() {
            segs.pop_if_empty();
            segs.extend(repo.split('/'));
            segs.push("resolve");
            segs.push(revision);
            segs.extend(path.split('/'));
        }
        url
    }

    /// `HEAD` of a file: which commit the revision is, the file's hash and size.
    pub(crate) fn head(
        &self,
        repo: &str,
        revision: &str,
        path: &str,
    ) -> Result<FileMeta, HubError> {
        let url = self.resolve_url(repo, revision, path);
        let resp = self.with_retries(path, None, || self.send("HEAD", url.clone(), None, false))?;
        let header = |name: &str| resp.header(name).map(str::to_owned);
        let redirected = (300..400).contains(&resp.status());
        Ok(FileMeta {
            commit: header("X-Repo-Commit"),
            etag: header("X-Linked-Etag")
                .or_else(|| header("ETag"))
                .map(|e| normalize_etag(&e)),
            size: header("X-Linked-Size")
                .or_else(|| {
                    if redirected {
                        None
                    } else {
                        header("Content-Length")
                    }
                })
                .and_then(|s| s.trim().parse().ok()),
        })
    }

    /// Downloads `path` of `repo` at `commit` into `incomplete`, resuming from the bytes
    /// already there. Returns when `incomplete` holds `size` bytes (or the whole body when
    /// `size` is unknown); hashing is the caller's job. Interrupted transfers are retried
    /// (resuming) up to the configured number of times.
    pub(crate) fn download(
        &self,
        repo: &str,
        commit: &str,
        path: &str,
        incomplete: &Path,
        size: Option<u64>,
        progress: &dyn Progress,
    ) -> Result<(), HubError> {
        let url = self.resolve_url(repo, commit, path);
        self.with_retries(path, Some(progress), || {
            self.download_once(repo, path, &url, incomplete, size, progress)
        })
    }

    fn with_retries<T>(
        &self,
        path: &str,
        progress: Option<&dyn Progress>,
        mut f: impl FnMut() -> Result<T, HubError>,
    ) -> Result<T, HubError> {
        let mut attempt = 0;
        loop {
            match f() {
                Err(e) if attempt < self.retries && is_transient(&e) => {
                    attempt += 1;
                    // Said once: on the progress display when there is one, else in the log.
                    match progress {
                        Some(p) => {
                            p.message(&format!("{e}; retrying ({attempt}/{})", self.retries))
                        }
                        None => tracing::warn!(path, attempt, error = %e, "retrying"),
                    }
                    std::thread::sleep(self.retry_delay * attempt);
                }
                other => return other,
            }
        }
    }

    fn download_once(
        &self,
        repo: &str,
        path: &str,
        url: &Url,
        incomplete: &Path,
        size: Option<u64>,
        progress: &dyn Progress,
    ) -> Result<(), HubError> {
        let existing = fs::metadata(incomplete).ok().map(|m| m.len());
        let mut have = existing.unwrap_or(0);
        if let Some(size) = size {
            if have > size {
                // Longer than the file can be: not a prefix of it.
                remove(incomplete)?;
                have = 0;
            } else if existing == Some(size) {
                // Only a file that is there counts as complete: an empty file has no bytes
                // to resume from but still has to exist to be hashed and renamed.
                return Ok(());
            }
        }
        let resp = match self.send("GET", url.clone(), (have > 0).then_some(have), true) {
            // The partial file no longer matches what the server has: start over.
            Err(HubError::Http { status: 416, .. }) => {
                remove(incomplete)?;
                have = 0;
                self.send("GET", url.clone(), None, true)?
            }
            other => other?,
        };
        let mut file = match resp.status() {
            206 => {
                let start = resp.header("Content-Range").and_then(content_range_start);
                if start != Some(have) {
                    return Err(HubError::BadResponse {
                        url: shown(url),
                        reason: format!(
                            "asked for bytes from {have}, got Content-Range {:?}",
                            resp.header("Content-Range")
                        ),
                    });
                }
                OpenOptions::new()
                    .append(true)
                    .open(incomplete)
                    .map_err(HubError::io("open", incomplete))?
            }
            200 => {
                // No Range asked, or the server ignored it: (re)write from the first byte.
                have = 0;
                File::create(incomplete).map_err(HubError::io("create", incomplete))?
            }
            other => {
                return Err(HubError::BadResponse {
                    url: shown(url),
                    reason: format!("status {other} for a download"),
                })
            }
        };
        let body_len = resp
            .header("Content-Length")
            .and_then(|s| s.trim().parse::<u64>().ok());
        let total = size.or_else(|| body_len.map(|n| n + have));
        tracing::debug!(url = %shown(url), resume_from = have, ?total, "downloading");
        progress.download_started(path, total, have);

        let mut reader = resp.into_reader();
        let mut buf = vec![0u8; 256 * 1024];
        let mut done = have;
        let interrupted = |done: u64, reason: String| HubError::Interrupted {
            repo: repo.to_owned(),
            path: path.to_owned(),
            received: done,
            expected: total.map(|t| t.to_string()).unwrap_or_else(|| "?".into()),
            reason,
        };
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Keep what arrived: flushed to disk it is the resume point.
                    file.flush().map_err(HubError::io("write", incomplete))?;
                    return Err(interrupted(done, e.to_string()));
                }
            };
            file.write_all(&buf[..n])
                .map_err(HubError::io("write", incomplete))?;
            done += n as u64;
            progress.download_progress(path, done);
            if total.is_some_and(|t| done > t) {
                break;
            }
        }
        file.sync_all().map_err(HubError::io("sync", incomplete))?;
        match total {
            Some(t) if done < t => Err(interrupted(done, "connection closed early".into())),
            _ => Ok(()),
        }
    }

    /// One request, following redirects by hand: the token goes only to the endpoint's
    /// origin and only until the chain first leaves it; https never downgrades to http.
    /// `follow_cross_origin = false` returns the first redirect to another origin as is.
    fn send(
        &self,
        method: &str,
        start: Url,
        range_from: Option<u64>,
        follow_cross_origin: bool,
    ) -> Result<ureq::Response, HubError> {
        let mut url = start;
        let mut on_endpoint = true;
        for _ in 0..=MAX_REDIRECTS {
            on_endpoint = on_endpoint && same_origin(&url, &self.endpoint);
            let mut req = self
                .agent_for(&url)?
                .request_url(method, &url)
                .set("Accept-Encoding", "identity");
            let token_sent = on_endpoint && !matches!(self.auth, Auth::None);
            if on_endpoint {
                match &self.auth {
                    Auth::None => {}
                    Auth::Bearer(value) => req = req.set("Authorization", value),
                    Auth::Unsendable { position, what } => {
                        return Err(HubError::InvalidToken {
                            position: *position,
                            what,
                        })
                    }
                }
            }
            if let Some(from) = range_from {
                req = req.set("Range", &format!("bytes={from}-"));
            }
            tracing::trace!(method, url = %shown(&url), token_sent, ?range_from, "request");
            let resp = match req.call() {
                Ok(r) => r,
                Err(ureq::Error::Status(status, r)) => {
                    let sent = TokenUse {
                        sent: token_sent,
                        configured: !matches!(self.auth, Auth::None),
                        left_endpoint: !on_endpoint,
                        endpoint: &self.endpoint,
                    };
                    return Err(status_error(status, &r, &url, sent));
                }
                Err(ureq::Error::Transport(t)) => return Err(transport_error(&url, &t)),
            };
            if !(300..400).contains(&resp.status()) || resp.status() == 304 {
                return Ok(resp);
            }
            let bad = |reason: String| HubError::BadResponse {
                url: shown(&url),
                reason,
            };
            let location = resp
                .header("Location")
                .ok_or_else(|| bad("redirect without Location".into()))?;
            let next = url.join(location).map_err(|e| {
                bad(format!(
                    "bad redirect Location `{}`: {e}",
                    without_query(location)
                ))
            })?;
            if !matches!(next.scheme(), "http" | "https")
                || (url.scheme() == "https" && next.scheme() == "http")
            {
                return Err(bad(format!("refusing redirect to {}", shown(&next))));
            }
            if !follow_cross_origin && !same_origin(&next, &url) {
                return Ok(resp);
            }
            tracing::debug!(from = %shown(&url), to = %shown(&next), "redirect");
            url = next;
        }
        Err(HubError::BadResponse {
            url: shown(&url),
            reason: format!("more than {MAX_REDIRECTS} redirects"),
        })
    }
}

/// Where the token stood for the request that failed.
struct TokenUse<'a> {
    sent: bool,
    configured: bool,
    /// The redirect chain had left the endpoint's origin (the token is not sent from then on).
    left_endpoint: bool,
    endpoint: &'a Url,
}

/// The first character of `token` that cannot go into a bearer header, 1-based, with its
/// kind. Only visible ASCII is accepted: ureq would refuse the rest (and echo the whole
/// header line in its error), and whitespace would split the credential.
fn unsendable(token: &str) -> Option<(usize, &'static str)> {
    token.chars().enumerate().find_map(|(i, c)| {
        let what = match c {
            '!'..='~' => return None,
            c if c.is_whitespace() => "whitespace",
            c if c.is_control() => "a control character",
            _ => "a non-ASCII character",
        };
        Some((i + 1, what))
    })
}

/// A proxy value as ureq takes it. ureq speaks plain-http proxies only (no TLS to the
/// proxy, and SOCKS is not built in), so anything else is refused here rather than failing
/// obscurely on connect.
fn parse_proxy(value: &str) -> Result<ureq::Proxy, String> {
    let value = value.trim();
    let value = match value.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => format!("http://{rest}"),
        Some((scheme, _)) => {
            return Err(format!(
                "{scheme}:// proxies are not supported; use an http:// proxy"
            ))
        }
        None => value.to_owned(),
    };
    ureq::Proxy::new(&value).map_err(|_| "expected http://[user:password@]host[:port]".into())
}

fn parse_endpoint(endpoint: &str) -> Result<Url, HubError> {
    let bad = |reason: &str| HubError::InvalidEndpoint {
        endpoint: endpoint.to_owned(),
        reason: reason.to_owned(),
    };
    let url = Url::parse(endpoint.trim_end_matches('/')).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(bad(
            "expected an http(s) URL such as https://huggingface.co",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("no query or fragment allowed"));
    }
    Ok(url)
}

/// Scheme, host and port equal (RFC 6454 origin; default ports made explicit).
fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

/// `W/"abc"` or `"abc"` → `abc` (huggingface_hub's `_normalize_etag`).
fn normalize_etag(etag: &str) -> String {
    etag.trim()
        .trim_start_matches("W/")
        .trim_matches('"')
        .to_owned()
}

/// `bytes 100-199/200` → 100.
fn content_range_start(value: &str) -> Option<u64> {
    let rest = value.trim().strip_prefix("bytes")?.trim_start();
    rest.split('-').next()?.trim().parse().ok()
}

fn remove(path: &Path) -> Result<(), HubError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(HubError::io("remove", path)(e)),
        _ => Ok(()),
    }
}

/// `url` for messages and logs: without its query and fragment (a redirect target's query
/// carries signatures) and without credentials.
pub(crate) fn shown(url: &Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.set_fragment(None);
    let _ = u.set_password(None);
    let _ = u.set_username("");
    u.to_string()
}

/// A raw URL string (that did not parse) cut before its query or fragment.
fn without_query(raw: &str) -> &str {
    raw.split(['?', '#']).next().unwrap_or("")
}

/// A ureq transport error as ours. ureq's own text is not used for a refused header: it
/// quotes the whole header line, which for `Authorization` is the token.
fn transport_error(url: &Url, t: &ureq::Transport) -> HubError {
    use ureq::ErrorKind as K;
    let refused = |reason: &str| HubError::RequestRefused {
        url: shown(url),
        reason: reason.to_owned(),
    };
    match t.kind() {
        K::BadHeader => refused("a request header holds a character HTTP does not allow"),
        K::InvalidUrl | K::UnknownScheme | K::InvalidProxyUrl => refused(&t.kind().to_string()),
        kind => HubError::Network {
            url: shown(url),
            reason: transport_reason(t),
            name_resolution: kind == K::Dns,
        },
    }
}

/// ureq's transport error without the URL its `Display` starts with (the message names it).
fn transport_reason(t: &ureq::Transport) -> String {
    let mut reason = t.kind().to_string();
    if let Some(m) = t.message() {
        reason.push_str(": ");
        reason.push_str(m);
    }
    if let Some(source) = std::error::Error::source(t) {
        reason.push_str(": ");
        reason.push_str(&source.to_string());
    }
    reason
}

fn is_transient(e: &HubError) -> bool {
    match e {
        // A name that does not resolve now will not resolve in a second either: no network,
        // or a wrong HF_ENDPOINT.
        HubError::Network {
            name_resolution: true,
            ..
        } => false,
        HubError::Interrupted { .. } | HubError::Network { .. } => true,
        HubError::Http { status, .. } => *status == 429 || *status >= 500,
        _ => false,
    }
}

fn status_error(status: u16, resp: &ureq::Response, url: &Url, token: TokenUse<'_>) -> HubError {
    let url = shown(url);
    let code = resp.header("X-Error-Code").map(str::to_owned);
    let message = resp
        .header("X-Error-Message")
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    match status {
        401 | 403 => {
            let hint = if token.sent {
                "; the token in HF_TOKEN was sent but does not give access: the repo is private or \
                 gated (accept its terms on the hub) or does not exist"
                    .to_owned()
            } else if token.left_endpoint {
                // The hub only redirects to a download link after it has checked access, so a
                // refusal there is about the link (signed, short-lived), not about a token.
                let origin = token.endpoint.origin().ascii_serialization();
                let token_note = if token.configured {
                    format!(
                        " HF_TOKEN is set, but it is sent only to {origin}, never to a host the \
                         hub redirects to."
                    )
                } else {
                    String::new()
                };
                format!(
                    "; the hub redirected to this download link and the link was refused, most \
                     likely because it expired.{token_note} Run the command again: it asks the \
                     hub for a fresh link"
                )
            } else {
                "; the repo is private, gated or does not exist: set HF_TOKEN to a token with read \
                 access"
                    .to_owned()
            };
            HubError::Unauthorized { url, status, hint }
        }
        404 => {
            let hint = match code.as_deref() {
                Some("RepoNotFound") => "; check the repo id (a private repo also needs HF_TOKEN)",
                Some("RevisionNotFound") => "; check --revision",
                Some("EntryNotFound") => "; the repo lacks a file a checkpoint needs",
                _ => "",
            };
            HubError::NotFound {
                url,
                code: code.unwrap_or_else(|| "HTTP 404".into()),
                hint: hint.into(),
            }
        }
        _ => HubError::Http {
            url,
            status,
            detail: message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_urls() {
        let a = Url::parse("https://huggingface.co/x").unwrap_or_else(|e| panic!("{e}"));
        let b = Url::parse("https://huggingface.co:443/y").unwrap_or_else(|e| panic!("{e}"));
        let c = Url::parse("https://cdn-lfs.huggingface.co/y").unwrap_or_else(|e| panic!("{e}"));
        assert!(same_origin(&a, &b));
        assert!(!same_origin(&a, &c));
        assert_eq!(normalize_etag("W/\"abc\""), "abc");
        assert_eq!(content_range_start("bytes 100-199/200"), Some(100));
        assert!(parse_endpoint("ftp://x").is_err());
        assert!(parse_endpoint("https://hf-mirror.com/").is_ok());
    }

    #[test]
    fn resolve_url_encodes_segments() {
        let mut cfg = HubConfig::new("/tmp/none".into());
        cfg.endpoint = "https://mirror.example/hf/".into();
        let c = Client::new(&cfg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            c.resolve_url("org/name", "refs/pr/1", "tokenizer/tokenizer.json")
                .as_str(),
            "https://mirror.example/hf/org/name/resolve/refs%2Fpr%2F1/tokenizer/tokenizer.json"
        );
    }

    #[test]
    fn a_refused_header_is_never_echoed_nor_retried() {
        // ureq checks headers before connecting: nothing listens on port 9 and nothing needs to.
        let url =
            Url::parse("http://127.0.0.1:9/x?sig=SIGNATURE").unwrap_or_else(|e| panic!("{e}"));
        let sent = ureq::AgentBuilder::new()
            .build()
            .request_url("GET", &url)
            .set("Authorization", "Bearer hf_SECRET\nx")
            .call();
        let Err(ureq::Error::Transport(t)) = sent else {
            panic!("expected a transport error, got {sent:?}");
        };
        assert_eq!(t.kind(), ureq::ErrorKind::BadHeader);
        let e = transport_error(&url, &t);
        let text = format!("{e} {e:?}");
        assert!(
            !text.contains("SECRET") && !text.contains("SIGNATURE"),
            "{text}"
        );
        assert!(matches!(e, HubError::RequestRefused { .. }), "{e:?}");
        assert!(!is_transient(&e));
    }

    #[test]
    fn tokens_that_cannot_be_a_header_value() {
        assert_eq!(unsendable("hf_abcXYZ019-._~+/="), None);
        assert_eq!(unsendable("hf_a b"), Some((5, "whitespace")));
        assert_eq!(unsendable("hf\u{7f}"), Some((3, "a control character")));
        assert_eq!(unsendable("hf_\u{e9}"), Some((4, "a non-ASCII character")));
        let mut cfg = HubConfig::new("/tmp/none".into());
        cfg.token = Some(" hf_ok\r\n".into());
        let c = Client::new(&cfg).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(&c.auth, Auth::Bearer(v) if v == "Bearer hf_ok"));
    }

    #[test]
    fn urls_are_shown_without_query_or_credentials() {
        let u = Url::parse("https://user:pw@cdn.example/lfs/abc?X-Amz-Signature=s&e=1#f")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(shown(&u), "https://cdn.example/lfs/abc");
        assert_eq!(without_query("/x?sig=1"), "/x");
    }
}
