//! Proxies against the mock hub and a forward proxy on 127.0.0.1: the proxy of the URL's
//! scheme (else `all_proxy`), bypassed for hosts `no_proxy` names, per request, so the hub
//! and its CDN (two origins) can take different routes.

use std::fs;

use laya_hub::{Hub, HubConfig, HubError, NoProgress, ProxyConfig};

use crate::support::mock::ForwardProxy;
use crate::support::{assert_checkpoint, Env};

fn pull_via(env: &Env, proxy: ProxyConfig) -> Result<(), HubError> {
    let _ = fs::remove_dir_all(env.cache_dir());
    let mut c = env.config();
    c.proxy = proxy;
    let m = Hub::new(c)?.pull("tiny", None, &NoProgress)?;
    assert_checkpoint(&m.dir, &env.fx.files);
    Ok(())
}

/// The origins (`127.0.0.1:port`) the proxy was asked for, deduplicated, sorted.
fn proxied_origins(proxy: &ForwardProxy, from: usize) -> Vec<String> {
    let mut seen: Vec<String> = proxy.targets()[from..]
        .iter()
        .filter_map(|t| {
            let target = t.split_once(' ')?.1;
            let rest = target.strip_prefix("http://").unwrap_or(target);
            Some(rest.split('/').next()?.to_owned())
        })
        .collect();
    seen.sort();
    seen.dedup();
    seen
}

#[test]
fn proxies_follow_the_scheme_and_no_proxy() {
    let env = Env::new();
    let proxy = ForwardProxy::start();
    let hub = env.mock.hub.addr.to_string();
    let cdn = env.mock.cdn.addr.to_string();
    let mut both = vec![hub.clone(), cdn.clone()];
    both.sort();
    let settings = |pairs: &[(&str, &str)]| {
        let vars: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        HubConfig::from_vars(|k| {
            (k == "HF_HOME")
                .then(|| "/nonexistent".to_owned())
                .or_else(|| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
        })
        .unwrap_or_else(|e| panic!("{e}"))
        .proxy
    };
    let url = proxy.url();
    for (vars, want) in [
        // The http proxy carries http requests to both origins.
        (vec![("http_proxy", url.as_str())], both.clone()),
        // all_proxy when the scheme has none.
        (vec![("ALL_PROXY", url.as_str())], both.clone()),
        // An https proxy is not for http URLs.
        (vec![("HTTPS_PROXY", url.as_str())], vec![]),
        // no_proxy by host:port exempts the CDN only, by host everything.
        (
            vec![("HTTP_PROXY", url.as_str()), ("NO_PROXY", cdn.as_str())],
            vec![hub.clone()],
        ),
        (
            vec![
                ("HTTP_PROXY", url.as_str()),
                ("no_proxy", "example.com, 127.0.0.1"),
            ],
            vec![],
        ),
        (
            vec![("HTTP_PROXY", url.as_str()), ("NO_PROXY", "*")],
            vec![],
        ),
    ] {
        let before = proxy.targets().len();
        pull_via(&env, settings(&vars)).unwrap_or_else(|e| panic!("{vars:?}: {e}"));
        assert_eq!(proxied_origins(&proxy, before), want, "{vars:?}");
    }
}

#[test]
fn an_unusable_proxy_is_named_not_shown() {
    let env = Env::new();
    let proxy = ProxyConfig {
        http: Some("https://user:pw@proxy.invalid:3128".into()),
        ..ProxyConfig::default()
    };
    match pull_via(&env, proxy) {
        Err(e @ HubError::InvalidProxy { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("HTTP_PROXY") && !msg.contains("pw"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    assert!(env.mock.hub.log().is_empty());
}
