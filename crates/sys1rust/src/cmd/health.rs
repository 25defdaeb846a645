//! `sys1rust health`, a probe for container health checks where an image has no curl, and
//! `sys1rust ps`, what a running server has loaded. Both speak just enough HTTP/1.1 to ask one
//! plain-http URL.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::cli::{HealthArgs, PsArgs};

/// The parts of an `http://host[:port][/path]` URL.
fn split_url(url: &str) -> anyhow::Result<(String, u16, String)> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url:?} is not a plain http:// URL"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let port_of = |p: &str| {
        p.parse::<u16>()
            .with_context(|| format!("{p:?} is not a port"))
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .with_context(|| format!("{url:?} has an unclosed ["))?;
        match after.strip_prefix(':') {
            Some(p) => (host, port_of(p)?),
            None => (host, 80),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, p)) => (host, port_of(p)?),
            None => (authority, 80),
        }
    };
    if host.is_empty() {
        bail!("{url:?} names no host");
    }
    Ok((host.to_owned(), port, path.to_owned()))
}

/// `GET url` with `headers`: the status line and the body.
fn get(url: &str, headers: &str, timeout: f64) -> anyhow::Result<(String, String)> {
    let (host, port, path) = split_url(url)?;
    let timeout = crate::config::wait_of(if timeout.is_finite() && timeout > 0.0 {
        timeout
    } else {
        5.0
    });
    let deadline = Instant::now() + timeout;
    let addr = (host.as_str(), port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {host}"))?
        .next()
        .with_context(|| format!("{host} has no address"))?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    stream.set_write_timeout(Some(left()))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\nUser-Agent: sys1rust\r\n{headers}\r\n"
    )
    .context("sending the request")?;
    // The answers asked for are small; a cap keeps a wrong URL from streaming forever.
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        stream.set_read_timeout(Some(left()))?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                if answer.len() > 1 << 20 {
                    break;
                }
            }
            Err(e) => return Err(e).with_context(|| format!("reading the answer of {url}")),
        }
    }
    let text = String::from_utf8_lossy(&answer);
    let status_line = text.lines().next().unwrap_or_default().to_owned();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default()
        .to_owned();
    Ok((status_line, body))
}

fn status_of(line: &str) -> &str {
    line.split_whitespace().nth(1).unwrap_or_default()
}

pub fn run(args: &HealthArgs) -> anyhow::Result<()> {
    let url = match &args.url {
        Some(url) => url.clone(),
        // A container's health check then follows the port its server was given.
        None => {
            let port = laya_core::request::laya_port(args.laya_port.as_deref())
                .map_err(anyhow::Error::msg)?;
            format!("http://127.0.0.1:{port}/health")
        }
    };
    let (status_line, body) = get(&url, "", args.timeout)?;
    if status_of(&status_line) != "200" {
        bail!("{url} answered {status_line:?}: {body}");
    }
    println!("{body}");
    Ok(())
}

/// `ps`: the resident checkpoints of the server at `--url`, least recently used first, with
/// their revisions and devices, from its `/health`.
pub fn ps(args: &PsArgs) -> anyhow::Result<()> {
    let url = format!("{}/health", args.url.trim_end_matches('/'));
    let auth = args
        .api_key
        .as_deref()
        .filter(|k| !k.is_empty())
        .map(|k| format!("Authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    let (status_line, body) = get(&url, &auth, args.timeout)?;
    if status_of(&status_line) != "200" {
        bail!("{url} answered {status_line:?}: {body}");
    }
    let health: serde_json::Value =
        serde_json::from_str(&body).with_context(|| format!("{url} answered {body:?}"))?;
    let Some(loaded) = health.get("loaded").and_then(|l| l.as_array()) else {
        bail!("{url} lists nothing without the server's API key: pass --api-key (or LAYA_API_KEY)");
    };
    let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).unwrap_or("-").to_owned();
    let rows: Vec<[String; 3]> = loaded
        .iter()
        .map(|name| {
            let name = text(Some(name));
            let revision = text(health.get("revisions").and_then(|r| r.get(&name)));
            let device = text(health.get("checkpoint_devices").and_then(|d| d.get(&name)));
            [name, revision, device]
        })
        .collect();
    let header = ["NAME", "REVISION", "DEVICE"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 3]| {
        format!(
            "{:<a$}  {:<b$}  {}",
            cells[0],
            cells[1],
            cells[2],
            a = widths[0],
            b = widths[1]
        )
        .trim_end()
        .to_owned()
    };
    println!("{}", line(header));
    for row in &rows {
        println!("{}", line([&row[0], &row[1], &row[2]]));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::split_url;

    #[test]
    fn urls() {
        let got = split_url("http://127.0.0.1:8000/health").unwrap();
        assert_eq!(got, ("127.0.0.1".into(), 8000, "/health".into()));
        let got = split_url("http://localhost").unwrap();
        assert_eq!(got, ("localhost".into(), 80, "/".into()));
        let got = split_url("http://[::1]:9/ready").unwrap();
        assert_eq!(got, ("::1".into(), 9, "/ready".into()));
        assert!(split_url("https://x/").is_err());
        assert!(split_url("http://:80/").is_err());
        assert!(split_url("http://x:notaport/").is_err());
        assert_eq!(split_url("http://[::1]").unwrap().1, 80);
    }
}
