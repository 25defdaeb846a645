//! Which proxy (if any) a request goes through, read from the environment the way Python's
//! requests (and so huggingface_hub) reads it: a proxy per scheme (`https_proxy` for https
//! URLs, `http_proxy` for http), `all_proxy` when the scheme has none, and `no_proxy` naming
//! the hosts reached directly.

use std::net::IpAddr;

use url::{Host, Url};

/// Proxy settings; [`crate::HubConfig::from_env`] fills them from the environment.
///
/// Each variable is read lower-case first: a lower-case variable that is set wins over the
/// upper-case one even when empty (an empty value means no proxy), as Python's
/// `urllib.request.getproxies` decides.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ProxyConfig {
    /// Proxy for `http://` URLs (`http_proxy`, else `HTTP_PROXY`).
    pub http: Option<String>,
    /// Proxy for `https://` URLs (`https_proxy`, else `HTTPS_PROXY`).
    pub https: Option<String>,
    /// Proxy for a scheme without its own (`all_proxy`, else `ALL_PROXY`).
    pub all: Option<String>,
    /// Comma-separated hosts reached without a proxy (`no_proxy`, else `NO_PROXY`): `*` for
    /// every host; a domain (with or without a leading `.`) for itself and its subdomains;
    /// an IP address or CIDR block; any of them with `:port` to match that port only.
    pub no_proxy: Option<String>,
}

impl std::fmt::Debug for ProxyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A proxy URL may carry a password: say whether one is set, never what it is.
        let set = |v: &Option<String>| v.as_ref().map(|_| "<set>");
        f.debug_struct("ProxyConfig")
            .field("http", &set(&self.http))
            .field("https", &set(&self.https))
            .field("all", &set(&self.all))
            .field("no_proxy", &self.no_proxy)
            .finish()
    }
}

impl ProxyConfig {
    /// Reads the proxy variables from `var` (the raw environment: set-but-empty matters).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> ProxyConfig {
        let proxy = |lower: &str, upper: &str| {
            var(lower)
                .or_else(|| var(upper))
                .filter(|v| !v.trim().is_empty())
        };
        // requests takes `no_proxy` when non-empty, else `NO_PROXY`.
        let no_proxy = var("no_proxy")
            .filter(|v| !v.trim().is_empty())
            .or_else(|| var("NO_PROXY"))
            .filter(|v| !v.trim().is_empty());
        ProxyConfig {
            http: proxy("http_proxy", "HTTP_PROXY"),
            https: proxy("https_proxy", "HTTPS_PROXY"),
            all: proxy("all_proxy", "ALL_PROXY"),
            no_proxy,
        }
    }

    /// The proxy for `url` and the variable it came from, or `None` to connect directly.
    pub(crate) fn for_url(&self, url: &Url) -> Option<(&'static str, &str)> {
        let own = match url.scheme() {
            "https" => set(&self.https).map(|p| ("HTTPS_PROXY", p)),
            "http" => set(&self.http).map(|p| ("HTTP_PROXY", p)),
            _ => None,
        };
        let chosen = own.or_else(|| set(&self.all).map(|p| ("ALL_PROXY", p)))?;
        match &self.no_proxy {
            Some(list) if bypasses(list, url) => None,
            _ => Some(chosen),
        }
    }

    /// The distinct proxy values configured.
    pub(crate) fn values(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for v in [&self.https, &self.http, &self.all] {
            if let Some(v) = set(v) {
                if !out.contains(&v) {
                    out.push(v);
                }
            }
        }
        out
    }
}

/// A proxy value that is there and not blank.
fn set(v: &Option<String>) -> Option<&str> {
    v.as_deref().filter(|s| !s.trim().is_empty())
}

/// Whether a `no_proxy` list exempts `url`'s host.
pub(crate) fn bypasses(no_proxy: &str, url: &Url) -> bool {
    let Some(host) = url.host() else {
        return false;
    };
    let port = url.port_or_known_default();
    let (ip, name): (Option<IpAddr>, String) = match host {
        Host::Ipv4(a) => (Some(a.into()), String::new()),
        Host::Ipv6(a) => (Some(a.into()), String::new()),
        Host::Domain(d) => (None, d.trim_end_matches('.').to_ascii_lowercase()),
    };
    no_proxy
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .any(|entry| {
            if entry == "*" {
                return true;
            }
            if entry.contains('/') {
                return ip.is_some_and(|ip| in_cidr(entry, ip));
            }
            let Some((entry_host, entry_port)) = split_port(entry) else {
                return false;
            };
            if entry_port.is_some_and(|p| Some(p) != port) {
                return false;
            }
            match (ip, entry_host.parse::<IpAddr>()) {
                (Some(ip), Ok(want)) => ip == want,
                (None, Err(_)) => {
                    // `.example.com` and `*.example.com` are written for the same thing as
                    // `example.com`: the domain and everything under it.
                    let domain = entry_host
                        .trim_start_matches('*')
                        .trim_start_matches('.')
                        .trim_end_matches('.')
                        .to_ascii_lowercase();
                    !domain.is_empty()
                        && (name == domain
                            || name
                                .strip_suffix(&domain)
                                .is_some_and(|rest| rest.ends_with('.')))
                }
                _ => false,
            }
        })
}

/// `host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 address → (host, port); `None`
/// for an entry that cannot be a host.
fn split_port(entry: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = entry.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?.parse().ok()?))),
        };
    }
    match entry.matches(':').count() {
        0 => Some((entry, None)),
        1 => {
            let (host, port) = entry.split_once(':')?;
            Some((host, Some(port.parse().ok()?)))
        }
        // More than one colon without brackets: an IPv6 address, no port.
        _ => Some((entry, None)),
    }
}

/// Whether `ip` is in the block `addr/prefix` (same address family only).
fn in_cidr(entry: &str, ip: IpAddr) -> bool {
    let Some((addr, prefix)) = entry.split_once('/') else {
        return false;
    };
    let addr = addr.trim_start_matches('[').trim_end_matches(']');
    let (Ok(net), Ok(prefix)) = (addr.parse::<IpAddr>(), prefix.parse::<u32>()) else {
        return false;
    };
    match (net, ip) {
        (IpAddr::V4(net), IpAddr::V4(ip)) if prefix <= 32 => {
            let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
            u32::from(net) & mask == u32::from(ip) & mask
        }
        (IpAddr::V6(net), IpAddr::V6(ip)) if prefix <= 128 => {
            let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
            u128::from(net) & mask == u128::from(ip) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn from(pairs: &[(&str, &str)]) -> ProxyConfig {
        let map: HashMap<&str, &str> = pairs.iter().copied().collect();
        ProxyConfig::from_vars(|k| map.get(k).map(|v| (*v).to_owned()))
    }

    #[test]
    fn no_proxy_entries() {
        let hf = url("https://huggingface.co/x");
        let cdn = url("https://cdn-lfs.huggingface.co/x");
        let local = url("http://127.0.0.1:8080/x");
        let v6 = url("http://[fd00::1]:8080/x");
        for (list, u, want) in [
            ("*", &hf, true),
            ("huggingface.co", &hf, true),
            ("huggingface.co", &cdn, true),
            (".huggingface.co", &cdn, true),
            (".huggingface.co", &hf, true),
            ("*.huggingface.co", &cdn, true),
            ("HuggingFace.CO", &hf, true),
            ("face.co", &hf, false),
            ("cdn-lfs.huggingface.co", &hf, false),
            ("example.com, huggingface.co", &cdn, true),
            ("huggingface.co:443", &hf, true),
            ("huggingface.co:8443", &hf, false),
            ("127.0.0.1", &local, true),
            ("127.0.0.1:8080", &local, true),
            ("127.0.0.1:80", &local, false),
            ("127.0.0.0/8", &local, true),
            ("10.0.0.0/8", &local, false),
            ("127.0.0.2", &local, false),
            ("fd00::1", &v6, true),
            ("[fd00::1]:8080", &v6, true),
            ("fd00::/8", &v6, true),
            ("127.0.0.0/8", &v6, false),
            ("", &hf, false),
            (" , ", &hf, false),
        ] {
            assert_eq!(bypasses(list, u), want, "{list:?} for {u}");
        }
    }

    #[test]
    fn proxy_per_scheme_with_all_as_fallback() {
        let c = from(&[
            ("HTTPS_PROXY", "http://s:1"),
            ("HTTP_PROXY", "http://p:2"),
            ("ALL_PROXY", "http://a:3"),
            ("NO_PROXY", "internal.example"),
        ]);
        assert_eq!(
            c.for_url(&url("https://huggingface.co/")),
            Some(("HTTPS_PROXY", "http://s:1"))
        );
        assert_eq!(
            c.for_url(&url("http://mirror.example/")),
            Some(("HTTP_PROXY", "http://p:2"))
        );
        assert_eq!(c.for_url(&url("https://hub.internal.example/")), None);
        let only_all = from(&[("ALL_PROXY", "http://a:3")]);
        assert_eq!(
            only_all.for_url(&url("http://x/")),
            Some(("ALL_PROXY", "http://a:3"))
        );
        // A proxy for https only leaves http direct (and the other way round).
        let https_only = from(&[("HTTPS_PROXY", "http://s:1")]);
        assert_eq!(https_only.for_url(&url("http://x/")), None);
        assert!(!format!("{c:?}").contains("s:1"));
    }

    #[test]
    fn lower_case_variables_win() {
        let c = from(&[
            ("https_proxy", "http://lower:1"),
            ("HTTPS_PROXY", "http://upper:1"),
            // Set but empty: no http proxy, whatever HTTP_PROXY says.
            ("http_proxy", ""),
            ("HTTP_PROXY", "http://upper:2"),
            ("no_proxy", ""),
            ("NO_PROXY", "a.example"),
        ]);
        assert_eq!(c.https.as_deref(), Some("http://lower:1"));
        assert_eq!(c.http, None);
        assert_eq!(c.no_proxy.as_deref(), Some("a.example"));
    }
}
