//! What a Hugging Face repo id may look like (`org/name`), checked before it reaches a URL
//! or a cache path. Shared by the model table and `--model` parsing.

/// `org/name` with the characters the hub allows (letters, digits, `-`, `_`, `.`), neither
/// part starting with `-` or `.`, no `--` or `..` (the cache folder name uses `--` as the
/// separator, so a `--` inside a name would make it ambiguous).
pub(crate) fn is_repo_id(s: &str) -> bool {
    let Some((org, name)) = s.split_once('/') else {
        return false;
    };
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.len() <= 96
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && !p.starts_with(['-', '.'])
            && !p.ends_with(['-', '.'])
            && !p.contains("--")
            && !p.contains("..")
    };
    part_ok(org) && part_ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids() {
        for ok in [
            "a/b",
            "org-1/name_2.x",
            "convaiinnovations/laya-typed-decisions",
        ] {
            assert!(is_repo_id(ok), "{ok}");
        }
        for bad in [
            "a", "a/b/c", "/a", "a/", "a--b/c", "a/..", "-a/b", "a/b c", "a/b.", "",
        ] {
            assert!(!is_repo_id(bad), "{bad}");
        }
    }
}
