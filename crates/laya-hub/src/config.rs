//! Where the cache is, which hub to ask, with what token, and whether to ask at all. Read
//! once from the environment with huggingface_hub's variable names and precedence, so both
//! tools agree on the same files.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::HubError;
use crate::models::ModelTable;

/// The hub used when `HF_ENDPOINT` is unset.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Everything a [`crate::Hub`] needs; build with [`HubConfig::from_env`] or
/// [`HubConfig::new`] and adjust fields.
#[derive(Clone)]
pub struct HubConfig {
    /// The hub cache directory (`$HF_HUB_CACHE`, else `$HF_HOME/hub`), holding `models--*/`.
    pub cache_dir: PathBuf,
    /// Base URL of the hub; files are `{endpoint}/{repo}/resolve/{revision}/{path}`.
    pub endpoint: String,
    /// Bearer token, sent to the endpoint's origin only.
    pub token: Option<String>,
    /// Never touch the network: a model missing from the cache is an error.
    pub offline: bool,
    /// The models known by name.
    pub models: ModelTable,
    /// Limit for establishing a connection.
    pub connect_timeout: Duration,
    /// Limit for any single read of an answer; a stalled download fails after this (and
    /// resumes on the next attempt).
    pub read_timeout: Duration,
    /// Extra attempts after an interrupted or failed transfer (each resumes where the last
    /// stopped); 0 = fail at the first interruption.
    pub retries: u32,
    /// Pause before retry `n` is `n × retry_delay`.
    pub retry_delay: Duration,
    /// Use `ALL_PROXY`/`HTTPS_PROXY`/`HTTP_PROXY` (ureq does not read `NO_PROXY`).
    pub proxy_from_env: bool,
}

impl std::fmt::Debug for HubConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a secret: say whether there is one, never what it is.
        f.debug_struct("HubConfig")
            .field("cache_dir", &self.cache_dir)
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("offline", &self.offline)
            .field(
                "models",
                &self
                    .models
                    .models()
                    .iter()
                    .map(|m| &m.name)
                    .collect::<Vec<_>>(),
            )
            .field("connect_timeout", &self.connect_timeout)
            .field("read_timeout", &self.read_timeout)
            .field("retries", &self.retries)
            .field("proxy_from_env", &self.proxy_from_env)
            .finish()
    }
}

impl HubConfig {
    /// Defaults: huggingface.co, no token, online, the built-in models, 10 s to connect,
    /// 30 s per read, 3 retries, no proxy.
    pub fn new(cache_dir: PathBuf) -> HubConfig {
        HubConfig {
            cache_dir,
            endpoint: DEFAULT_ENDPOINT.to_owned(),
            token: None,
            offline: false,
            models: ModelTable::builtin(),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            retries: 3,
            retry_delay: Duration::from_secs(1),
            proxy_from_env: false,
        }
    }

    /// Reads the process environment:
    ///
    /// * cache: `HF_HUB_CACHE`, else `HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`, where
    ///   `HF_HOME` defaults to `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`;
    /// * `HF_ENDPOINT` (default [`DEFAULT_ENDPOINT`]);
    /// * token: `HF_TOKEN`, else `HUGGING_FACE_HUB_TOKEN`, else the file `HF_TOKEN_PATH`
    ///   or `$HF_HOME/token` (what `hf auth login` writes);
    /// * `HF_HUB_OFFLINE`: 1, ON, YES or TRUE in any case turns downloads off;
    /// * proxies from `HTTPS_PROXY` and friends.
    pub fn from_env() -> Result<HubConfig, HubError> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// [`HubConfig::from_env`] over any variable source (tests pass a map).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<HubConfig, HubError> {
        let var = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        let hf_home = match var("HF_HOME") {
            Some(h) => PathBuf::from(h),
            None => match var("XDG_CACHE_HOME") {
                Some(x) => PathBuf::from(x).join("huggingface"),
                None => home_dir(&var)
                    .ok_or(HubError::NoCacheDir)?
                    .join(".cache")
                    .join("huggingface"),
            },
        };
        let cache_dir = var("HF_HUB_CACHE")
            .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("hub"));
        let token = var("HF_TOKEN")
            .or_else(|| var("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| {
                let path = var("HF_TOKEN_PATH")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| hf_home.join("token"));
                std::fs::read_to_string(path).ok()
            });
        let mut config = HubConfig::new(cache_dir);
        config.endpoint = var("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        config.token = token.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
        config.offline = var("HF_HUB_OFFLINE").is_some_and(|v| env_flag(&v));
        config.proxy_from_env = true;
        Ok(config)
    }
}

/// huggingface_hub's truth values for flags like `HF_HUB_OFFLINE`: 1, ON, YES, TRUE in any case.
pub fn env_flag(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_uppercase().as_str(),
        "1" | "ON" | "YES" | "TRUE"
    )
}

fn home_dir(var: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    var("HOME")
        .or_else(|| var("USERPROFILE"))
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(pairs: &[(&str, &str)]) -> HubConfig {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        HubConfig::from_vars(|k| map.get(k).cloned()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn cache_dir_precedence() {
        assert_eq!(
            from(&[("HOME", "/h")]).cache_dir,
            PathBuf::from("/h/.cache/huggingface/hub")
        );
        assert_eq!(
            from(&[("HOME", "/h"), ("XDG_CACHE_HOME", "/x")]).cache_dir,
            PathBuf::from("/x/huggingface/hub")
        );
        assert_eq!(
            from(&[("HOME", "/h"), ("HF_HOME", "/hf")]).cache_dir,
            PathBuf::from("/hf/hub")
        );
        assert_eq!(
            from(&[("HF_HOME", "/hf"), ("HF_HUB_CACHE", "/c")]).cache_dir,
            PathBuf::from("/c")
        );
        assert!(HubConfig::from_vars(|_| None).is_err());
    }

    #[test]
    fn endpoint_token_offline() {
        let c = from(&[
            ("HF_HOME", "/nonexistent"),
            ("HF_ENDPOINT", "http://m"),
            ("HF_TOKEN", " t \n"),
        ]);
        assert_eq!(c.endpoint, "http://m");
        assert_eq!(c.token.as_deref(), Some("t"));
        assert!(!format!("{c:?}").contains("\"t\""));
        assert!(!c.offline);
        for on in ["1", "on", "Yes", "TRUE"] {
            assert!(
                from(&[("HF_HOME", "/n"), ("HF_HUB_OFFLINE", on)]).offline,
                "{on}"
            );
        }
        for off in ["0", "false", "no", "2"] {
            assert!(
                !from(&[("HF_HOME", "/n"), ("HF_HUB_OFFLINE", off)]).offline,
                "{off}"
            );
        }
    }
}
