//! The model table: names users type, the repo each name stands for, and the revision and
//! files (size + hash) each is pinned to. The built-in table is `spec/model.md` §1.1–1.2;
//! tests and other deployments inject their own through [`ModelTable::new`].

use crate::error::HubError;

/// The model served when the user names none (issue 4: `sys1rust serve` with no flags).
pub const DEFAULT_MODEL: &str = "typed-decisions";

/// The files a checkpoint directory needs (model.md §1.2). `laya.Agent` itself can fall back
/// to the Hub for `encoder/` and `tokenizer/`, but a loader that must not touch the network
/// (ours) needs all five.
pub const CHECKPOINT_FILES: [&str; 5] = [
    "rl_agent_config.json",
    "model.safetensors",
    "encoder/config.json",
    "tokenizer/tokenizer.json",
    "tokenizer/tokenizer_config.json",
];

/// How a file's content is identified. Both forms are also the name the Hugging Face cache
/// gives the blob (its ETag): LFS files by sha256, plain git files by git blob id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Digest {
    /// Lowercase hex sha256 of the bytes (LFS files).
    Sha256(String),
    /// Lowercase hex git blob id: sha1 of `"blob <len>\0"` followed by the bytes.
    GitBlobSha1(String),
}

impl Digest {
    /// Reads a 64-hex (sha256) or 40-hex (git blob sha1) value; anything else is refused, so
    /// a value from the network can safely become a file name.
    pub fn parse(hex: &str) -> Option<Digest> {
        let lower = hex.to_ascii_lowercase();
        if !lower.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        match lower.len() {
            64 => Some(Digest::Sha256(lower)),
            40 => Some(Digest::GitBlobSha1(lower)),
            _ => None,
        }
    }

    /// The lowercase hex value, which is also the blob's file name in the cache.
    pub fn hex(&self) -> &str {
        match self {
            Digest::Sha256(h) | Digest::GitBlobSha1(h) => h,
        }
    }

    /// `"sha256"` or `"git blob sha1"`, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Digest::Sha256(_) => "sha256",
            Digest::GitBlobSha1(_) => "git blob sha1",
        }
    }
}

/// One file of a pinned checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedFile {
    /// Path inside the repo, `/`-separated (e.g. `tokenizer/tokenizer.json`).
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Expected content hash.
    pub digest: Digest,
}

/// A model users can name: a repo pinned to one commit and file list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownModel {
    /// The name users type (`typed-decisions`).
    pub name: String,
    /// Other accepted names (model.md §1.1 router aliases).
    pub aliases: Vec<String>,
    /// Hugging Face repo id, `org/name`.
    pub repo: String,
    /// Pinned commit, 40 lowercase hex.
    pub revision: String,
    /// Every file the checkpoint needs, with size and hash at `revision`.
    pub files: Vec<PinnedFile>,
}

impl KnownModel {
    /// The 7-character prefix shown to users; `--revision <prefix>` means the pin.
    pub fn short_revision(&self) -> &str {
        short(&self.revision)
    }

    /// Whether `name` is this model's name or one of its aliases (ASCII case-insensitive).
    pub fn answers_to(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
            || self.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    }
}

/// The first 7 characters of a revision (all of it when shorter).
pub(crate) fn short(revision: &str) -> &str {
    revision.get(..7).unwrap_or(revision)
}

/// The models a [`crate::Hub`] knows by name, plus which one is the default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelTable {
    models: Vec<KnownModel>,
    default: String,
}

impl ModelTable {
    /// Checks and builds a table. Names and aliases must be unique, revisions full 40-hex
    /// commits, file paths relative without `..`, and `default` one of the names.
    pub fn new(models: Vec<KnownModel>, default: &str) -> Result<ModelTable, HubError> {
        let bad = |msg: String| Err(HubError::InvalidModelTable(msg));
        let mut names: Vec<String> = Vec::new();
        for m in &models {
            for n in std::iter::once(&m.name).chain(&m.aliases) {
                let lower = n.to_ascii_lowercase();
                if n.is_empty() || n.contains('/') || names.contains(&lower) {
                    return bad(format!(
                        "model name `{n}` is empty, contains `/` or is used twice"
                    ));
                }
                names.push(lower);
            }
            if !crate::repo_id::is_repo_id(&m.repo) {
                return bad(format!("`{}` is not a repo id (org/name)", m.repo));
            }
            if m.revision.len() != 40
                || !m
                    .revision
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            {
                return bad(format!(
                    "{}: revision `{}` is not a 40-hex commit",
                    m.name, m.revision
                ));
            }
            if m.files.is_empty() {
                return bad(format!("{}: no files", m.name));
            }
            for f in &m.files {
                if !is_safe_relative_path(&f.path) {
                    return bad(format!("{}: unsafe file path `{}`", m.name, f.path));
                }
                if Digest::parse(f.digest.hex()).as_ref() != Some(&f.digest) {
                    return bad(format!(
                        "{}: {}: malformed digest `{}`",
                        m.name,
                        f.path,
                        f.digest.hex()
                    ));
                }
            }
        }
        if !models.iter().any(|m| m.name == default) {
            return bad(format!("default model `{default}` is not in the table"));
        }
        Ok(ModelTable {
            models,
            default: default.to_owned(),
        })
    }

    /// The three published Laya checkpoints of model.md §1.1–1.2.
    pub fn builtin() -> ModelTable {
        let models = BUILTIN
            .iter()
            .map(|b| KnownModel {
                name: b.name.to_owned(),
                aliases: b.aliases.iter().map(|a| (*a).to_owned()).collect(),
                repo: b.repo.to_owned(),
                revision: b.revision.to_owned(),
                files: b
                    .files
                    .iter()
                    .map(|&(path, size, hex)| PinnedFile {
                        path: path.to_owned(),
                        size,
                        digest: Digest::parse(hex)
                            .expect("built-in digest is 40 or 64 hex: this is a bug"),
                    })
                    .collect(),
            })
            .collect();
        ModelTable::new(models, DEFAULT_MODEL)
            .expect("built-in model table is valid: this is a bug")
    }

    /// All models, in table order.
    pub fn models(&self) -> &[KnownModel] {
        &self.models
    }

    /// The model named `name` (or one of its aliases).
    pub fn find(&self, name: &str) -> Option<&KnownModel> {
        self.models.iter().find(|m| m.answers_to(name))
    }

    /// The model pinned for `repo`, so `--model org/name` of a known repo gets the pin too.
    pub fn by_repo(&self, repo: &str) -> Option<&KnownModel> {
        self.models
            .iter()
            .find(|m| m.repo.eq_ignore_ascii_case(repo))
    }

    /// The model served when none is named.
    pub fn default_model(&self) -> &KnownModel {
        self.find(&self.default)
            .expect("default model checked in ModelTable::new: this is a bug")
    }
}

/// `a/b.json`: relative, `/`-separated, no empty, `.` or `..` segment, no backslash. File
/// paths become paths under the snapshot directory, so this keeps them inside it.
pub(crate) fn is_safe_relative_path(path: &str) -> bool {
    !path.is_empty()
        && !path.contains('\\')
        && !path.contains('\0')
        && path
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

struct Builtin {
    name: &'static str,
    aliases: &'static [&'static str],
    repo: &'static str,
    revision: &'static str,
    files: &'static [(&'static str, u64, &'static str)],
}

// model.md §1.1 (repos, pins, router aliases) and §1.2 (sizes; 64-hex = LFS sha256, 40-hex =
// git blob sha1). Order: the default first, as `sys1rust models` lists it.
const BUILTIN: [Builtin; 3] = [
    Builtin {
        name: "typed-decisions",
        aliases: &[
            "typed",
            "typed_decisions",
            "laya-typed-decisions",
            "decisions",
        ],
        repo: "convaiinnovations/laya-typed-decisions",
        revision: "1a793eb568e6718f15941d08f85432581df534e3",
        files: &[
            (
                "rl_agent_config.json",
                847,
                "5f0e1d5f2366fe8ba2ff330dffaeed53b469e97e",
            ),
            (
                "model.safetensors",
                842_609_220,
                "4fa56de72383a9d3efa9cfa78955733c81b9fc8067a587ca4beb82c78107a24e",
            ),
            (
                "encoder/config.json",
                2_084,
                "d4be4829750fb04c0aa8b9897c3ea827f76c0109",
            ),
            (
                "tokenizer/tokenizer.json",
                3_583_228,
                "2f4d8583e507b7466d2490e2d6c045647a822698",
            ),
            (
                "tokenizer/tokenizer_config.json",
                337,
                "ed1ffabc2ce11120754705709569e365e46da71a",
            ),
        ],
    },
    Builtin {
        name: "multilingual",
        aliases: &["multi", "ml", "laya-multilingual"],
        repo: "convaiinnovations/laya-multilingual",
        revision: "e4e9ddf21a7b1903b7acffd8814ad4307bf63a67",
        files: &[
            (
                "rl_agent_config.json",
                472,
                "00e35f88bb731bb9126a914666ab1cdac8a204c8",
            ),
            (
                "model.safetensors",
                643_835_514,
                "9d628fd971b700382ac6f65920a86f149777b2e748e0c955fb3b19695aa8f204",
            ),
            (
                "encoder/config.json",
                1_938,
                "0de0e2d30638873790cf962def52e2acf4db3eef",
            ),
            (
                "tokenizer/tokenizer.json",
                34_363_188,
                "609d8f4c067cd3950f88594c5a802616cea245823836ef5848ee4fc40aab5b6f",
            ),
            (
                "tokenizer/tokenizer_config.json",
                502,
                "eea1ed61121530d74c1722dc2aab6ec917a75909",
            ),
        ],
    },
    Builtin {
        name: "english",
        aliases: &["en", "laya", "default"],
        repo: "convaiinnovations/laya",
        revision: "55cf4c4ebb4ebe31b2550e8bdf3bd21b99753851",
        files: &[
            (
                "rl_agent_config.json",
                745,
                "3e4fcbf12cf36164ce18a1398aa9f35f58375ae0",
            ),
            (
                "model.safetensors",
                842_609_210,
                "891102d372688fc2a094dac56a384bc537b87c63f21f9f3dac0be2b7cbc8d86c",
            ),
            (
                "encoder/config.json",
                2_083,
                "5881ba831f2db5ce0f606bbaa1f2668e1e6cb706",
            ),
            (
                "tokenizer/tokenizer.json",
                3_583_228,
                "2f4d8583e507b7466d2490e2d6c045647a822698",
            ),
            (
                "tokenizer/tokenizer_config.json",
                308,
                "9fd800115c5c92353220aa66addfce67a9135f32",
            ),
        ],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_table_is_valid_and_complete() {
        let t = ModelTable::builtin();
        assert_eq!(t.default_model().name, "typed-decisions");
        for m in t.models() {
            let paths: Vec<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
            assert_eq!(paths, CHECKPOINT_FILES, "{}", m.name);
        }
        for (alias, name) in [
            ("en", "english"),
            ("LAYA", "english"),
            ("default", "english"),
            ("multi", "multilingual"),
            ("ml", "multilingual"),
            ("laya-multilingual", "multilingual"),
            ("typed", "typed-decisions"),
            ("typed_decisions", "typed-decisions"),
            ("laya-typed-decisions", "typed-decisions"),
            ("decisions", "typed-decisions"),
        ] {
            assert_eq!(
                t.find(alias).map(|m| m.name.as_str()),
                Some(name),
                "{alias}"
            );
        }
        assert_eq!(
            t.by_repo("convaiinnovations/laya").map(|m| m.name.as_str()),
            Some("english")
        );
    }

    #[test]
    fn table_rejects_bad_entries() {
        let mut m = ModelTable::builtin().models()[0].clone();
        m.files[0].path = "../escape".into();
        assert!(ModelTable::new(vec![m.clone()], "typed-decisions").is_err());
        m.files[0].path = "ok".into();
        m.revision = "1a793eb".into();
        assert!(ModelTable::new(vec![m.clone()], "typed-decisions").is_err());
        m.revision = "1a793eb568e6718f15941d08f85432581df534e3".into();
        assert!(ModelTable::new(vec![m.clone()], "typed-decisions").is_ok());
        assert!(ModelTable::new(vec![m.clone(), m], "typed-decisions").is_err());
    }

    #[test]
    fn digest_parse() {
        assert!(
            matches!(Digest::parse(&"A".repeat(64)), Some(Digest::Sha256(h)) if h == "a".repeat(64))
        );
        assert!(matches!(
            Digest::parse(&"0".repeat(40)),
            Some(Digest::GitBlobSha1(_))
        ));
        assert_eq!(Digest::parse("../../etc"), None);
        assert_eq!(Digest::parse(&"g".repeat(40)), None);
    }
}
