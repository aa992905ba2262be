//! **Whoever can change it can run commands as you**: the one rule for
//! every file and folder whose contents decide what runs as this user —
//! the queue file (`slothqueue::open`), the log folder (`logfile`) and a
//! handler with the folders above it ([`crate::HandlerDirExecutor`]).
//! Each caller words the refusal its own way; the rule is here once.

use std::fmt;
use std::os::unix::fs::MetadataExt;

/// Why a file or folder is not this user's alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotPrivate {
    /// It belongs to another user (`uid`); this process runs as `me`.
    Owner {
        /// Its owner.
        uid: u32,
        /// This process's effective uid.
        me: u32,
    },
    /// Its group or others may write it (`mode`, the permission bits).
    Writable {
        /// Its permission bits (`0o777` at most).
        mode: u32,
    },
}

impl fmt::Display for NotPrivate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotPrivate::Owner { uid, me } => {
                write!(f, "is owned by uid {uid}, not by this user (uid {me})")
            }
            NotPrivate::Writable { mode } => {
                write!(f, "is writable by other users (mode {mode:04o})")
            }
        }
    }
}

/// Who besides this user may own a file that passes [`check_private`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlsoOwnedBy {
    /// Nobody: a queue file or log folder is this user's own.
    Nobody,
    /// Root too: root can change anything of this user's anyway, so a
    /// program root installed (`/usr/local/lib/...`) gives it no more power.
    Root,
}

/// `Ok` when `meta` (of a file or folder, symlinks followed) is owned by
/// this process's effective user (or by root, when `also` says so) and
/// neither its group nor others may write it.
pub fn check_private(meta: &std::fs::Metadata, also: AlsoOwnedBy) -> Result<(), NotPrivate> {
    let me = rustix::process::geteuid().as_raw();
    let uid = meta.uid();
    if uid != me && !(also == AlsoOwnedBy::Root && uid == 0) {
        return Err(NotPrivate::Owner { uid, me });
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(NotPrivate::Writable { mode });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn group_or_world_write_is_refused_and_a_private_file_passes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "").unwrap();
        for (mode, ok) in [(0o600, true), (0o755, true), (0o620, false), (0o666, false)] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let meta = std::fs::metadata(&path).unwrap();
            assert_eq!(check_private(&meta, AlsoOwnedBy::Nobody).is_ok(), ok, "{mode:o}");
        }
    }
}
