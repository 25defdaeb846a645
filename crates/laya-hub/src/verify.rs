//! Content hashes: sha256 for LFS files, git blob sha1 (`sha1("blob <len>\0" + bytes)`, what
//! `git hash-object` prints) for plain git files. Files are hashed from disk after the
//! download, so the bytes checked are exactly the bytes that are renamed into the cache.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use sha1::Sha1;
use sha2::{Digest as _, Sha256};

use crate::error::HubError;
use crate::models::Digest;

/// Hashes the file at `path` the way `expected` is expressed and returns the lowercase hex.
/// `on_bytes` is called with the running byte count (for a "verifying" progress line).
pub(crate) fn hash_file(
    path: &Path,
    expected: &Digest,
    on_bytes: &mut dyn FnMut(u64),
) -> Result<String, HubError> {
    let mut file = File::open(path).map_err(HubError::io("open", path))?;
    let len = file.metadata().map_err(HubError::io("stat", path))?.len();
    match expected {
        Digest::Sha256(_) => {
            let mut h = Sha256::new();
            feed(&mut file, path, on_bytes, |b| h.update(b))?;
            Ok(hex(&h.finalize()))
        }
        Digest::GitBlobSha1(_) => {
            let mut h = Sha1::new();
            h.update(format!("blob {len}\0").as_bytes());
            let n = feed(&mut file, path, on_bytes, |b| h.update(b))?;
            if n != len {
                // The header promised `len` bytes; a file that changed under us is not this blob.
                return Err(HubError::io("read", path)(std::io::Error::other(
                    "file changed while hashing",
                )));
            }
            Ok(hex(&h.finalize()))
        }
    }
}

fn feed(
    file: &mut File,
    path: &Path,
    on_bytes: &mut dyn FnMut(u64),
    mut sink: impl FnMut(&[u8]),
) -> Result<u64, HubError> {
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(HubError::io("read", path)(e)),
        };
        sink(&buf[..n]);
        total += n as u64;
        on_bytes(total);
    }
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_blob_id_matches_git() {
        // `printf 'hello\n' | git hash-object --stdin` = ce013625030ba8dba906f756967f9e9ca394464a
        let dir = std::env::temp_dir().join(format!("laya-hub-verify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let p = dir.join("hello");
        std::fs::write(&p, b"hello\n").expect("write");
        let want = Digest::GitBlobSha1("ce013625030ba8dba906f756967f9e9ca394464a".into());
        assert_eq!(
            hash_file(&p, &want, &mut |_| {}).ok().as_deref(),
            Some(want.hex())
        );
        let sha = Digest::Sha256(String::new());
        assert_eq!(
            hash_file(&p, &sha, &mut |_| {}).ok().as_deref(),
            Some("5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
