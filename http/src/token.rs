//! The bearer token: read from a file, or generated into a 0600 file beside
//! the queue, and compared in constant time.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::HttpError;

/// Where the server's bearer token comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    /// Read the token from this file (surrounding whitespace is ignored).
    File(PathBuf),
    /// Use `<queue>.token` beside the queue file: reuse it if it exists (it
    /// must be mode 0600), else create it with 32 random bytes as hex.
    Generate {
        /// The queue file the token file sits beside.
        beside_queue: PathBuf,
    },
}

/// Fewer characters than this is too easy to guess to guard a queue that
/// runs shell commands.
const MIN_TOKEN_LEN: usize = 16;

/// The token file that [`Token::Generate`] uses for `queue`: the queue's file
/// name with `.token` appended (`queue.db` → `queue.db.token`).
pub fn token_path_beside(queue: &Path) -> PathBuf {
    let mut name = queue.as_os_str().to_owned();
    name.push(".token");
    PathBuf::from(name)
}

impl Token {
    /// The token and the file it lives in.
    ///
    /// A generated file is created with `create_new` and mode 0600 in the
    /// same call, so there is no moment at which another user could read it
    /// (a `chmod` afterwards would leave one). An existing token file (given
    /// or generated) that others can read or write, or that belongs to
    /// another user, is refused rather than trusted.
    pub fn load(&self) -> Result<(String, PathBuf), HttpError> {
        match self {
            Token::File(path) => {
                // As ssh treats a private key: a token others can read is
                // no secret, one others can write is not the owner's.
                check_private(path)?;
                Ok((read_token(path)?, path.clone()))
            }
            Token::Generate { beside_queue } => {
                let path = token_path_beside(beside_queue);
                match create_token_file(&path) {
                    Ok(token) => Ok((token, path)),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        check_private(&path)?;
                        Ok((read_token(&path)?, path))
                    }
                    Err(source) => Err(HttpError::TokenIo { path, source }),
                }
            }
        }
    }
}

fn read_token(path: &Path) -> Result<String, HttpError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| HttpError::TokenIo { path: path.to_owned(), source })?;
    let token = text.trim();
    if token.len() < MIN_TOKEN_LEN {
        return Err(HttpError::TokenUnusable {
            path: path.to_owned(),
            detail: format!("the token must be at least {MIN_TOKEN_LEN} characters"),
        });
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(HttpError::TokenUnusable {
            path: path.to_owned(),
            detail: "the token must be one line without spaces".to_owned(),
        });
    }
    Ok(token.to_owned())
}

fn check_private(path: &Path) -> Result<(), HttpError> {
    let meta = std::fs::metadata(path)
        .map_err(|source| HttpError::TokenIo { path: path.to_owned(), source })?;
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(HttpError::TokenUnusable {
            path: path.to_owned(),
            detail: format!(
                "mode {mode:04o} lets other users read it; remove it to have a new one generated, or chmod 600 it"
            ),
        });
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(HttpError::TokenUnusable {
            path: path.to_owned(),
            detail: format!("owned by uid {}, not by you (uid {me})", meta.uid()),
        });
    }
    Ok(())
}

fn create_token_file(path: &Path) -> std::io::Result<String> {
    let token = random_hex(32)?;
    let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    let written = file.write_all(format!("{token}\n").as_bytes()).and_then(|()| file.sync_all());
    if let Err(e) = written {
        // A half-written token file would be reused next time: remove it.
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(token)
}

/// `n` bytes from the kernel's CSPRNG, as lower-case hex.
pub(crate) fn random_hex(n: usize) -> std::io::Result<String> {
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `presented` equals `expected`, taking the same time wherever the
/// first difference is, so a client cannot find the token byte by byte by
/// timing the 401s. (The length of the expected token is not secret: it is
/// always 64 for a generated one.)
pub(crate) fn constant_time_eq(presented: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(presented.len() != expected.len());
    for (i, e) in expected.iter().enumerate() {
        let p = presented.get(i).copied().unwrap_or(0);
        diff |= std::hint::black_box(p ^ e);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abd", b"abc"));
        assert!(!constant_time_eq(b"ab", b"abc"));
        assert!(!constant_time_eq(b"abcd", b"abc"));
        assert!(!constant_time_eq(b"", b"abc"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn generated_token_is_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let queue = dir.path().join("queue.db");
        let spec = Token::Generate { beside_queue: queue.clone() };
        let (first, path) = spec.load().unwrap();
        assert_eq!(path, dir.path().join("queue.db.token"));
        assert_eq!(first.len(), 64);
        assert!(first.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let (second, _) = spec.load().unwrap();
        assert_eq!(first, second);
        assert_eq!(Token::File(path).load().unwrap().0, first);
    }

    #[test]
    fn a_readable_token_file_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let queue = dir.path().join("q.redb");
        let path = token_path_beside(&queue);
        std::fs::write(&path, "0123456789abcdef0123456789abcdef\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Token::Generate { beside_queue: queue }.load().unwrap_err();
        assert!(err.to_string().contains("mode 0644"), "{err}");
    }

    #[test]
    fn a_readable_given_token_file_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "0123456789abcdef0123456789abcdef\n").unwrap();
        for mode in [0o644, 0o604, 0o640] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = Token::File(path.clone()).load().unwrap_err();
            assert!(err.to_string().contains(&format!("mode {mode:04o}")), "{err}");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Token::File(path).load().is_ok());
    }

    #[test]
    fn short_or_missing_token_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        assert!(matches!(Token::File(path.clone()).load(), Err(HttpError::TokenIo { .. })));
        std::fs::write(&path, "short").unwrap();
        assert!(matches!(Token::File(path).load(), Err(HttpError::TokenUnusable { .. })));
    }
}
