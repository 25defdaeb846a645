//! `sys1rust health`: a probe for container health checks, where an image has no curl. It
//! speaks just enough HTTP/1.1 to ask one plain-http URL and read the status line.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::cli::HealthArgs;

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

pub fn run(args: &HealthArgs) -> anyhow::Result<()> {
    let (host, port, path) = split_url(&args.url)?;
    let timeout = Duration::from_secs_f64(if args.timeout.is_finite() && args.timeout > 0.0 {
        args.timeout
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
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\nUser-Agent: sys1rust-health\r\n\r\n"
    )
    .context("sending the request")?;
    // The answers probed are small; a cap keeps a wrong URL from streaming forever.
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
            Err(e) => return Err(e).with_context(|| format!("reading the answer of {}", args.url)),
        }
    }
    let text = String::from_utf8_lossy(&answer);
    let status_line = text.lines().next().unwrap_or_default();
    let status = status_line.split_whitespace().nth(1).unwrap_or_default();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    if status != "200" {
        bail!("{} answered {status_line:?}: {body}", args.url);
    }
    println!("{body}");
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
