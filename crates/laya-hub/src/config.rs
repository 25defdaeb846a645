//! Where the cache is, which hub to ask, with what token, and whether to ask at all. Read
//! once from the environment with huggingface_hub's variable names and precedence, so both
//! tools agree on the same files.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::HubError;
use crate::models::ModelTable;
use crate::proxy::ProxyConfig;

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
    /// Proxies per scheme and the hosts exempt from them (none by default; see
    /// [`ProxyConfig::from_vars`]).
    pub proxy: ProxyConfig,
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
            .field("proxy", &self.proxy)
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
            proxy: ProxyConfig::default(),
        }
    }

    /// Reads the process environment:
    ///
    /// * cache: `HF_HUB_CACHE`, else `HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`, where
    ///   `HF_HOME` defaults to `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`;
    ///   `~` and `$VAR`/`${VAR}` in these paths (and in `HF_TOKEN_PATH`) are expanded as
    ///   huggingface_hub expands them (`os.path.expanduser`, then `os.path.expandvars`:
    ///   an unknown variable stays as written);
    /// * `HF_ENDPOINT` (default [`DEFAULT_ENDPOINT`]);
    /// * token: `HF_TOKEN`, else `HUGGING_FACE_HUB_TOKEN`, else the file `HF_TOKEN_PATH`
    ///   or `$HF_HOME/token` (what `hf auth login` writes), cleaned as huggingface_hub
    ///   cleans it: line breaks anywhere and surrounding whitespace removed, nothing left
    ///   meaning no token;
    /// * `HF_HUB_OFFLINE`, else `TRANSFORMERS_OFFLINE`: 1, ON, YES or TRUE in any case turns
    ///   downloads off;
    /// * proxies: see [`ProxyConfig::from_vars`].
    pub fn from_env() -> Result<HubConfig, HubError> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// [`HubConfig::from_env`] over any variable source (tests pass a map).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<HubConfig, HubError> {
        let raw = |k: &str| var(k);
        let set = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        let expand = |p: String| PathBuf::from(expand_path(&p, &raw));
        let hf_home = match set("HF_HOME") {
            Some(h) => expand(h),
            None => {
                let cache = match set("XDG_CACHE_HOME") {
                    Some(x) => x,
                    None => home_dir(&set)
                        .ok_or(HubError::NoCacheDir)?
                        .join(".cache")
                        .to_string_lossy()
                        .into_owned(),
                };
                expand(join(&cache, "huggingface"))
            }
        };
        let cache_dir = expand(
            set("HF_HUB_CACHE")
                .or_else(|| set("HUGGINGFACE_HUB_CACHE"))
                .unwrap_or_else(|| hf_home.join("hub").to_string_lossy().into_owned()),
        );
        // huggingface_hub takes the first non-empty variable, then cleans it; a value that
        // cleans to nothing falls through to the token file.
        let token = raw("HF_TOKEN")
            .filter(|v| !v.is_empty())
            .or_else(|| raw("HUGGING_FACE_HUB_TOKEN"))
            .and_then(|t| clean_token(&t))
            .or_else(|| {
                let path = set("HF_TOKEN_PATH")
                    .map(expand)
                    .unwrap_or_else(|| hf_home.join("token"));
                std::fs::read_to_string(path)
                    .ok()
                    .and_then(|t| clean_token(&t))
            });
        let mut config = HubConfig::new(cache_dir);
        config.endpoint = set("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        config.token = token;
        config.offline = raw("HF_HUB_OFFLINE")
            .filter(|v| !v.is_empty())
            .or_else(|| raw("TRANSFORMERS_OFFLINE"))
            .is_some_and(|v| env_flag(&v));
        config.proxy = ProxyConfig::from_vars(raw);
        Ok(config)
    }
}

/// A token as huggingface_hub cleans one: every `\r` and `\n` removed (a token pasted or
/// saved with a line break), then surrounding whitespace; nothing left means no token.
pub(crate) fn clean_token(raw: &str) -> Option<String> {
    let joined: String = raw.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
    // Python's str.strip() also strips the separators U+001C..U+001F, which Rust's
    // whitespace does not include.
    let t = joined.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c));
    (!t.is_empty()).then(|| t.to_owned())
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

/// `os.path.join(base, name)` for a relative `name`: one separator between them.
fn join(base: &str, name: &str) -> String {
    PathBuf::from(base)
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// `os.path.expandvars(os.path.expanduser(path))`, the expansion huggingface_hub applies
/// to `HF_HOME`, `HF_HUB_CACHE` and `HF_TOKEN_PATH`.
fn expand_path(path: &str, var: &dyn Fn(&str) -> Option<String>) -> String {
    expand_vars(&expand_user(path, var), var)
}

/// A leading `~` (alone or before a separator) becomes the home directory. `~user` is left
/// as written: resolving another user's home needs the user database, and a cache path
/// naming another user's home is not worth that.
fn expand_user(path: &str, var: &dyn Fn(&str) -> Option<String>) -> String {
    let Some(rest) = path.strip_prefix('~') else {
        return path.to_owned();
    };
    let cut = rest.find(std::path::is_separator).unwrap_or(rest.len());
    let (user, tail) = rest.split_at(cut);
    if !user.is_empty() {
        return path.to_owned();
    }
    // Python reads HOME even when it is empty; USERPROFILE is where Windows keeps it.
    let Some(home) = var("HOME").or_else(|| var("USERPROFILE")) else {
        return path.to_owned();
    };
    let joined = format!("{}{tail}", home.trim_end_matches('/'));
    if joined.is_empty() {
        "/".to_owned()
    } else {
        joined
    }
}

/// `$name` (name = ASCII letters, digits, `_`) and `${anything but a brace}` become the
/// variable's value; an unknown variable, a lone `$` and an unclosed `${` stay as written.
/// Values are not expanded again.
fn expand_vars(path: &str, var: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(path.len());
    let mut copied = 0;
    let mut at = 0;
    while let Some(off) = path[at..].find('$') {
        let dollar = at + off;
        let after = &path[dollar + 1..];
        let (name, len) = match after.strip_prefix('{') {
            Some(inner) => match inner.find('}') {
                Some(close) => (&inner[..close], close + 2),
                None => {
                    at = dollar + 1;
                    continue;
                }
            },
            None => {
                let n = after
                    .bytes()
                    .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                    .count();
                if n == 0 {
                    at = dollar + 1;
                    continue;
                }
                (&after[..n], n)
            }
        };
        let end = dollar + 1 + len;
        if let Some(value) = var(name) {
            out.push_str(&path[copied..dollar]);
            out.push_str(&value);
            copied = end;
        }
        at = end;
    }
    out.push_str(&path[copied..]);
    out
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

    #[test]
    fn transformers_offline_counts_unless_hf_hub_offline_is_set() {
        assert!(from(&[("HF_HOME", "/n"), ("TRANSFORMERS_OFFLINE", "1")]).offline);
        assert!(
            from(&[
                ("HF_HOME", "/n"),
                ("HF_HUB_OFFLINE", ""),
                ("TRANSFORMERS_OFFLINE", "yes")
            ])
            .offline
        );
        // huggingface_hub reads `HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE`: a non-empty
        // HF_HUB_OFFLINE decides alone.
        assert!(
            !from(&[
                ("HF_HOME", "/n"),
                ("HF_HUB_OFFLINE", "0"),
                ("TRANSFORMERS_OFFLINE", "1")
            ])
            .offline
        );
    }

    #[test]
    fn tokens_are_cleaned_like_huggingface_hub() {
        // A line break inside is dropped (not an end of the token), as `_clean_token` does.
        let c = from(&[("HF_HOME", "/n"), ("HF_TOKEN", "hf_SECRET\nx")]);
        assert_eq!(c.token.as_deref(), Some("hf_SECRETx"));
        let c = from(&[("HF_HOME", "/n"), ("HF_TOKEN", "\r\n hf_a\r\n\u{1f}")]);
        assert_eq!(c.token.as_deref(), Some("hf_a"));
        // Blank HF_TOKEN is still the variable read; it cleans to nothing, so the file counts.
        let dir = std::env::temp_dir().join(format!("laya-hub-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let file = dir.join("token");
        std::fs::write(&file, "hf_fromfile\n").unwrap_or_else(|e| panic!("{e}"));
        let path = file.to_string_lossy().into_owned();
        let c = from(&[
            ("HF_HOME", "/n"),
            ("HF_TOKEN", " \n"),
            ("HUGGING_FACE_HUB_TOKEN", "hf_legacy"),
            ("HF_TOKEN_PATH", &path),
        ]);
        assert_eq!(c.token.as_deref(), Some("hf_fromfile"));
        let c = from(&[
            ("HF_HOME", "/n"),
            ("HF_TOKEN", ""),
            ("HUGGING_FACE_HUB_TOKEN", "hf_legacy"),
        ]);
        assert_eq!(c.token.as_deref(), Some("hf_legacy"));
        std::fs::write(&file, "\n\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            from(&[("HF_HOME", "/n"), ("HF_TOKEN_PATH", &path)]).token,
            None
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn paths_expand_home_and_variables() {
        let c = from(&[("HOME", "/h/"), ("HF_HOME", "~/hf")]);
        assert_eq!(c.cache_dir, PathBuf::from("/h/hf/hub"));
        let c = from(&[("HOME", "/h"), ("BASE", "/data"), ("HF_HOME", "$BASE/hf")]);
        assert_eq!(c.cache_dir, PathBuf::from("/data/hf/hub"));
        let c = from(&[("HOME", "/h"), ("HF_HUB_CACHE", "${HOME}/c")]);
        assert_eq!(c.cache_dir, PathBuf::from("/h/c"));
        let c = from(&[("HOME", "/h"), ("HUGGINGFACE_HUB_CACHE", "~/legacy")]);
        assert_eq!(c.cache_dir, PathBuf::from("/h/legacy"));
        let c = from(&[("HOME", "/h"), ("XDG_CACHE_HOME", "~/xdg")]);
        assert_eq!(c.cache_dir, PathBuf::from("/h/xdg/huggingface/hub"));
        // Unknown variables stay as written.
        let c = from(&[("HOME", "/h"), ("HF_HUB_CACHE", "/x/$NOPE/${NOPE}/y")]);
        assert_eq!(c.cache_dir, PathBuf::from("/x/$NOPE/${NOPE}/y"));

        let dir = std::env::temp_dir().join(format!("laya-hub-tokpath-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("tok"), "hf_expanded").unwrap_or_else(|e| panic!("{e}"));
        let home = dir.to_string_lossy().into_owned();
        let c = from(&[("HOME", &home), ("HF_TOKEN_PATH", "~/tok")]);
        assert_eq!(c.token.as_deref(), Some("hf_expanded"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn expansion_follows_python() {
        let vars: HashMap<&str, &str> = [("HOME", "/home/u"), ("A", "x"), ("E", ""), ("D", "$A")]
            .into_iter()
            .collect();
        let var = |k: &str| vars.get(k).map(|v| (*v).to_owned());
        for (input, want) in [
            ("~", "/home/u"),
            ("~/a", "/home/u/a"),
            ("~other/a", "~other/a"),
            ("a/~", "a/~"),
            ("$A/b", "x/b"),
            ("${A}b", "xb"),
            ("$Ab", "$Ab"),
            ("$E|", "|"),
            ("$", "$"),
            ("$$A", "$x"),
            ("${A", "${A"),
            ("${}", "${}"),
            ("$-", "$-"),
            ("$D", "$A"),
            ("~/$A", "/home/u/x"),
        ] {
            assert_eq!(expand_path(input, &var), want, "{input:?}");
        }
        let root = |k: &str| (k == "HOME").then(|| "/".to_owned());
        assert_eq!(expand_user("~", &root), "/");
        assert_eq!(expand_user("~", &|_| None), "~");
    }
}
