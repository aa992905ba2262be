//! The seal: what the queue file looked like (device, inode, size,
//! modification and change times) when a slothqueue writer last left it,
//! kept in `Q.seal` beside it, so that a writable open can tell a file
//! only slothqueue has written since its last check from one changed
//! otherwise.
//!
//! A plain redb open trusts the file, and on one damaged outside redb it
//! can panic twice and abort the process (torture S16). redb's integrity
//! check prevents that but reads the whole file: run on every open, it
//! made `add` on a queue of 100,000 jobs 30 times slower than on a small
//! one. So a writable open checks in full only when the seal does not
//! hold: the file is new to this machine's slothqueue (copied in,
//! restored), was written by anything else (any write changes its
//! modification or change time), or a writer died before it could renew
//! the seal. A runner (`RedbOptions::full_check`) checks in full at every
//! start regardless, for what no timestamp shows: bits gone bad on the
//! disk under an unchanged inode.
//!
//! The seal is renewed after every commit of a writable handle and after
//! it closes, with one `pwrite` of a fixed-length record (a reader that
//! sees it half-written finds no match and checks in full). Any failure
//! to read or write it only means a full check next time. A seal file
//! that is not this user's, or that others may write, is not believed.
//!
//! What it cannot see: a change that keeps the file's size and lands in
//! the same clock tick as the seal's renewal (kernels before 6.13 stamp
//! files with a coarse clock, a few milliseconds), and damage that keeps
//! every timestamp (a disk's own bit rot). The runner's full check at its
//! start finds both.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The record's length: every record is padded to it, so a shorter one
/// overwrites a longer one whole.
const RECORD_LEN: usize = 128;

/// What a record starts with: a seal of another layout is not believed.
const TAG: &str = "slothqueue-seal 1";

/// The seal file of the queue at `queue`: `Q.seal` beside it.
pub(crate) fn path_of(queue: &Path) -> PathBuf {
    let mut name = queue.as_os_str().to_owned();
    name.push(".seal");
    PathBuf::from(name)
}

/// A writable handle's seal: the queue file as this handle opened it (its
/// metadata is read from this descriptor, not the path) and the seal file.
#[derive(Debug)]
pub(crate) struct Seal {
    queue: File,
    file: File,
}

impl Seal {
    /// The seal of the queue at `queue`, created (mode 0600) when missing;
    /// `None` when either cannot be opened (a read-only folder): then
    /// every open checks in full, as it did before seals.
    pub(crate) fn open(queue: &Path) -> Option<Seal> {
        let queue_file = File::open(queue).ok()?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(path_of(queue))
            .ok()?;
        trusted(&file).then_some(Seal { queue: queue_file, file })
    }

    /// Records the queue file as it is now. Called after a commit and
    /// after the close: the file as this writer left it.
    pub(crate) fn renew(&self) {
        if let Ok(meta) = self.queue.metadata() {
            // A seal that cannot be written is only a full check next time.
            let _ = self.file.write_all_at(&record(&meta), 0);
        }
    }
}

/// Whether the queue file at `queue` is as a slothqueue writer last left
/// it: its seal is ours and names the file exactly as it is now.
pub(crate) fn holds(queue: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(queue) else { return false };
    let Ok(file) = File::open(path_of(queue)) else { return false };
    if !trusted(&file) {
        return false;
    }
    let mut seen = [0u8; RECORD_LEN];
    matches!(file.read_at(&mut seen, 0), Ok(RECORD_LEN)) && seen == record(&meta)
}

/// A seal file is believed only when it is a regular file of this user
/// that nobody else may write: whoever could write it could make a
/// damaged queue look checked.
fn trusted(file: &File) -> bool {
    file.metadata().is_ok_and(|m| {
        m.is_file()
            && m.uid() == rustix::process::geteuid().as_raw()
            && m.permissions().mode() & 0o022 == 0
    })
}

/// The fixed-length record of a queue file's metadata.
fn record(meta: &std::fs::Metadata) -> [u8; RECORD_LEN] {
    let text = format!(
        "{TAG} {} {} {} {}.{:09} {}.{:09}",
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec()
    );
    let mut out = [b' '; RECORD_LEN];
    let n = text.len().min(RECORD_LEN - 1);
    out[..n].copy_from_slice(&text.as_bytes()[..n]);
    out[RECORD_LEN - 1] = b'\n';
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_holds_until_the_file_changes_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let queue = dir.path().join("q.redb");
        std::fs::write(&queue, b"first").unwrap();
        assert!(!holds(&queue), "no seal yet");
        let seal = Seal::open(&queue).unwrap();
        seal.renew();
        assert!(holds(&queue));
        assert_eq!(std::fs::metadata(path_of(&queue)).unwrap().permissions().mode() & 0o777, 0o600);

        // Any other write changes the file's times (and here its size).
        std::fs::write(&queue, b"second!").unwrap();
        assert!(!holds(&queue), "a write outside the seal");
        seal.renew();
        assert!(holds(&queue));

        // Same size, another modification time (as a write a clock tick
        // later gives).
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        File::options().write(true).open(&queue).unwrap().set_modified(old).unwrap();
        assert!(!holds(&queue), "the same size, another time");
    }

    #[test]
    fn a_seal_others_may_write_is_not_believed() {
        let dir = tempfile::tempdir().unwrap();
        let queue = dir.path().join("q.redb");
        std::fs::write(&queue, b"q").unwrap();
        Seal::open(&queue).unwrap().renew();
        assert!(holds(&queue));
        let seal = path_of(&queue);
        std::fs::set_permissions(&seal, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(!holds(&queue));
        assert!(Seal::open(&queue).is_none());
    }

    #[test]
    fn a_damaged_or_foreign_record_does_not_hold() {
        let dir = tempfile::tempdir().unwrap();
        let queue = dir.path().join("q.redb");
        std::fs::write(&queue, b"q").unwrap();
        Seal::open(&queue).unwrap().renew();
        let seal = path_of(&queue);
        let mut bytes = std::fs::read(&seal).unwrap();
        bytes[20] ^= 1;
        std::fs::write(&seal, &bytes).unwrap();
        assert!(!holds(&queue));
        std::fs::write(&seal, b"short").unwrap();
        assert!(!holds(&queue));
    }
}
