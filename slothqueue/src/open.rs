//! Opening a queue file without knowing its backend: the existing file's
//! header decides, else the name (`.redb`), else SQLite.
//!
//! The header wins over the name because a file renamed or moved between
//! machines keeps its format; asking for a backend explicitly wins over both
//! so that a user can create a redb queue called `jobs.db`.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use slothqueue_core::{Store, StoreError};

/// A storage engine a queue can be in. Every variant exists in every
/// build, so that a build without one can still name what it is missing.
///
/// The workspace's one such type: the binary's `--backend`, the bench's
/// columns, the torture harness's runs and the tests' "on each backend"
/// all name a backend with it (a tidy rule keeps it so).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// SQLite (the default).
    Sqlite,
    /// redb.
    Redb,
    /// PostgreSQL: a queue on a server, named by a `postgres://` URL as
    /// `--db`, shared by runners on several hosts.
    Postgres,
}

impl Backend {
    /// Every backend, compiled in or not.
    pub const ALL: [Backend; 3] = [Backend::Sqlite, Backend::Redb, Backend::Postgres];

    /// The lower-case name, which is also the Cargo feature's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Redb => "redb",
            Backend::Postgres => "postgres",
        }
    }

    /// Whether this build can open files of this backend.
    pub fn is_compiled_in(self) -> bool {
        match self {
            Backend::Sqlite => cfg!(feature = "sqlite"),
            Backend::Redb => cfg!(feature = "redb"),
            Backend::Postgres => cfg!(feature = "postgres"),
        }
    }

    /// The backend whose header `header` (a file's first bytes) carries, if any.
    ///
    /// Both headers are recognised even when a backend is not compiled in,
    /// so that such a build can say which feature the file needs.
    pub fn sniff(header: &[u8]) -> Option<Backend> {
        #[cfg(feature = "sqlite")]
        let sqlite = slothqueue_store_sqlite::sniff(header);
        #[cfg(not(feature = "sqlite"))]
        let sqlite = header.starts_with(SQLITE_MAGIC);
        #[cfg(feature = "redb")]
        let redb = slothqueue_store_redb::sniff(header);
        #[cfg(not(feature = "redb"))]
        let redb = header.starts_with(REDB_MAGIC);
        if sqlite {
            Some(Backend::Sqlite)
        } else if redb {
            Some(Backend::Redb)
        } else {
            None
        }
    }

    /// The backend a new file named `path` gets: `.redb` → redb, else SQLite.
    pub fn for_new_file(path: &Path) -> Backend {
        match path.extension() {
            Some(ext) if ext.eq_ignore_ascii_case("redb") => Backend::Redb,
            _ => Backend::Sqlite,
        }
    }
}

/// Whether `--db` names a queue on a PostgreSQL server
/// (`postgres://…` or `postgresql://…`) rather than a file.
pub fn is_server_url(db: &Path) -> bool {
    db.to_str().is_some_and(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
}

/// Whether a server URL carries a password (`postgres://u:PASSWORD@…` or
/// `?password=`), which a command line shows every local user (`ps`).
pub fn has_password(db: &Path) -> bool {
    if !is_server_url(db) {
        return false;
    }
    let text = db.to_string_lossy();
    let Some((_, rest)) = text.split_once("://") else { return false };
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let in_userinfo = authority
        .rsplit_once('@')
        .and_then(|(user, _)| user.split_once(':'))
        .is_some_and(|(_, password)| !password.is_empty());
    let in_query = rest.split_once('?').is_some_and(|(_, q)| {
        q.split('&').any(|pair| pair.strip_prefix("password=").is_some_and(|v| !v.is_empty()))
    });
    in_userinfo || in_query
}

/// `--db` as messages show it: a server's URL without its password
/// (`postgres://jobs:secret@db/q` → `postgres://jobs@db/q`), a file's path
/// as it is.
pub fn shown(db: &Path) -> String {
    let text = db.to_string_lossy();
    if !is_server_url(db) {
        return text.into_owned();
    }
    let Some((scheme, rest)) = text.split_once("://") else { return text.into_owned() };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(name, _)| name);
            format!("{scheme}://{user}@{host}{path}")
        }
        None => text.into_owned(),
    }
}

/// The first bytes of a SQLite file, for builds without the `sqlite`
/// feature: they still recognise the file and can say what they lack.
#[cfg(not(feature = "sqlite"))]
const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";

/// The first bytes of a redb file (`redb`, then a fixed check sequence),
/// for builds without the `redb` feature, as above.
#[cfg(not(feature = "redb"))]
const REDB_MAGIC: &[u8] = b"redb\x1a\x0a\xa9\x0d\x0a";

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sqlite" => Ok(Backend::Sqlite),
            "redb" => Ok(Backend::Redb),
            "postgres" => Ok(Backend::Postgres),
            other => Err(format!("unknown backend `{other}` (expected sqlite, redb or postgres)")),
        }
    }
}

/// How to open a queue.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Use this backend whatever the file looks like; `None` detects it.
    pub backend: Option<Backend>,
    /// Create the file when missing. Read-only callers set this to `false`
    /// so that looking never leaves a file behind.
    pub create: bool,
    /// Also create the file's folder when it is missing. Off by default: a
    /// typo in `--db /typo/dir/q.db` must not leave folders behind; the CLI
    /// sets it for its default data directory only.
    pub create_folder: bool,
    /// Only read: the store refuses every write, and the file is left
    /// byte-for-byte as it was (redb rewrites its header on a writable
    /// open and close even when nothing is written). Implies no `create`.
    /// On SQLite it is a read-only connection, which falls back to an
    /// immutable one where the folder or the disk cannot take SQLite's
    /// shared-memory file (and says so on stderr).
    pub read_only: bool,
    /// The lease a claim through this handle hands out (`run --lease`);
    /// `None` is the policy's default.
    pub lease_ttl: Option<std::time::Duration>,
    /// Check the whole file at opening even when nothing says it changed
    /// (a runner's start). On redb this is its integrity check, which an
    /// ordinary writable open runs only when the file's seal does not
    /// vouch for it; SQLite reads pages with their checks as it goes.
    pub full_check: bool,
}

impl OpenOptions {
    /// The options of a command that only looks: no file created, nothing
    /// written, whatever the file is.
    pub fn read_only(backend: Option<Backend>) -> Self {
        OpenOptions {
            backend,
            create: false,
            create_folder: false,
            read_only: true,
            lease_ttl: None,
            full_check: false,
        }
    }
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            backend: None,
            create: true,
            create_folder: false,
            read_only: false,
            lease_ttl: None,
            full_check: false,
        }
    }
}

/// Why a queue could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The file does not exist and the caller asked not to create it.
    #[error("no queue at {}", .0.display())]
    Missing(PathBuf),
    /// The file is in a backend this build was compiled without.
    #[error(
        "this queue is a {backend} file but slothqueue was built without the \"{backend}\" feature"
    )]
    FileNeedsFeature {
        /// The backend the file is in.
        backend: Backend,
    },
    /// The caller asked for a backend this build was compiled without.
    #[error("the {backend} backend needs slothqueue built with the \"{backend}\" feature")]
    BackendNotBuilt {
        /// The backend asked for.
        backend: Backend,
    },
    /// The file exists but is neither a SQLite nor a redb file.
    #[error(
        "{}: not a slothqueue queue (neither a SQLite nor a redb file); point --db elsewhere",
        .0.display()
    )]
    Foreign(PathBuf),
    /// `--backend postgres` with a file path: the server's queue is named
    /// by its URL.
    #[error(
        "{}: the postgres backend takes the server's URL as --db (postgres://user@host/database)",
        .0.display()
    )]
    NotAUrl(PathBuf),
    /// The new file's folder does not exist (and is not created).
    #[error(
        "cannot create {}: the folder {} does not exist (create it first, or check --db for a typo)",
        .path.display(),
        .folder.display()
    )]
    NoFolder {
        /// The queue file asked for.
        path: PathBuf,
        /// Its missing folder.
        folder: PathBuf,
    },
    /// The path exists but is not a regular file (or a symlink to one):
    /// a FIFO would hang every open, a directory or a device is no queue.
    #[error("{}: is {what}, not a queue file; point --db at a regular file", .path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is instead (`a FIFO`, `a directory`, …).
        what: &'static str,
    },
    /// The file (or its SQLite `-wal`/`-shm` sibling) could be changed by
    /// someone else: whoever can write it can run commands as this user.
    #[error("{}: {detail}", .path.display())]
    Unsafe {
        /// The file at fault.
        path: PathBuf,
        /// What is wrong and how to fix it.
        detail: String,
    },
    /// Reading the header or creating the folder failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The backend refused the file.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Which backend `path` is (or will be) in, without opening it: the header
/// of an existing, non-empty file (it always wins: `--backend sqlite` on a
/// healthy redb queue opens it as the redb queue it is, as `--help` says),
/// else the explicit choice, else the extension. A header neither backend
/// knows is a foreign file.
pub fn detect(path: &Path, backend: Option<Backend>) -> Result<Backend, OpenError> {
    if is_server_url(path) {
        return Ok(Backend::Postgres);
    }
    let new_file = || backend.unwrap_or_else(|| new_file_backend(path));
    match read_header(path)? {
        None => Ok(new_file()),
        Some(header) if header.is_empty() => Ok(new_file()),
        Some(header) => Backend::sniff(&header).ok_or_else(|| OpenError::Foreign(path.into())),
    }
}

/// The backend a new file gets: the name's choice when this build has it,
/// else the one backend it has (a redb-only build still creates the
/// default `queue.db`, as redb).
fn new_file_backend(path: &Path) -> Backend {
    let by_name = Backend::for_new_file(path);
    if by_name.is_compiled_in() {
        return by_name;
    }
    Backend::ALL.into_iter().find(|b| b.is_compiled_in()).unwrap_or(by_name)
}

/// Opens (or creates) the queue at `path` with the backend [`detect`] picks.
///
/// With `options.create == false` a missing file is [`OpenError::Missing`]
/// and nothing is created. A build without the file's backend fails with a
/// message naming the Cargo feature it needs.
pub fn open(path: &Path, options: OpenOptions) -> Result<Arc<dyn Store>, OpenError> {
    if is_server_url(path) {
        if !Backend::Postgres.is_compiled_in() {
            return Err(OpenError::BackendNotBuilt { backend: Backend::Postgres });
        }
        return open_backend(path, Backend::Postgres, &options);
    }
    if options.backend == Some(Backend::Postgres) {
        return Err(OpenError::NotAUrl(path.into()));
    }
    // Looked at before anything opens it: opening a FIFO blocks forever.
    let exists = vet(path)?;
    if !exists && (!options.create || options.read_only) {
        return Err(OpenError::Missing(path.into()));
    }
    let backend = detect(path, options.backend)?;
    if !backend.is_compiled_in() {
        return Err(match options.backend {
            Some(_) => OpenError::BackendNotBuilt { backend },
            None if exists => OpenError::FileNeedsFeature { backend },
            None => OpenError::BackendNotBuilt { backend },
        });
    }
    if !exists {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            prepare_folder(path, dir, options.create_folder)?;
        }
    }
    open_backend(path, backend, &options)
}

/// Whether `path` exists as a file this user alone can change: `Ok(false)`
/// when there is nothing there, an error when it is not a regular file (a
/// symlink to one is fine), belongs to someone else, or is writable by
/// group or others; the same for the SQLite `-wal` and `-shm` siblings
/// that are present. Whoever can write a queue can run commands as the
/// user who runs it, so a queue in a shared folder must not be trusted.
fn vet(path: &Path) -> Result<bool, OpenError> {
    let Some(meta) = file_metadata(path)? else {
        return Ok(false);
    };
    check_owner(path, &meta)?;
    for suffix in ["-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let sibling = PathBuf::from(name);
        if let Some(meta) = file_metadata(&sibling)? {
            check_owner(&sibling, &meta)?;
        }
    }
    Ok(true)
}

/// The metadata of the regular file at `path` (following symlinks), `None`
/// when nothing is there.
fn file_metadata(path: &Path) -> Result<Option<std::fs::Metadata>, OpenError> {
    use std::os::unix::fs::FileTypeExt;
    let look =
        |source| OpenError::Io { context: format!("cannot look at {}", path.display()), source };
    // Another process may be creating (or SQLite removing) the file between
    // two looks: only a symlink seen as one is dangling.
    let mut tries = 0;
    let meta = loop {
        match std::fs::metadata(path) {
            Ok(m) => break m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match std::fs::symlink_metadata(path) {
                    Ok(m) if m.file_type().is_symlink() => {
                        return Err(OpenError::NotAFile {
                            path: path.into(),
                            what: "a dangling symlink",
                        });
                    }
                    Ok(_) if tries < 3 => tries += 1,
                    Ok(_) => return Err(look(e)),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(look(e)),
                }
            }
            Err(e) => return Err(look(e)),
        }
    };
    let ft = meta.file_type();
    let what = if ft.is_file() {
        return Ok(Some(meta));
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(OpenError::NotAFile { path: path.into(), what })
}

/// The queue file's rule, shared with the log folder and handlers
/// ([`slothqueue_runner::private`]), worded for a queue.
fn check_owner(path: &Path, meta: &std::fs::Metadata) -> Result<(), OpenError> {
    use slothqueue_runner::private::{AlsoOwnedBy, NotPrivate, check_private};
    let detail = match check_private(meta, AlsoOwnedBy::Nobody) {
        Ok(()) => return Ok(()),
        Err(NotPrivate::Owner { uid, me }) => format!(
            "owned by uid {uid}, not by you (uid {me}): its owner could make you run any command; use a queue of your own"
        ),
        Err(NotPrivate::Writable { mode }) => format!(
            "mode {mode:04o} lets other users change it (and so run commands as you); chmod 600 it"
        ),
    };
    Err(OpenError::Unsafe { path: path.into(), detail })
}

/// A new file's folder: created (private) when allowed, else it must exist.
fn prepare_folder(path: &Path, dir: &Path, create: bool) -> Result<(), OpenError> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(OpenError::NoFolder { path: path.into(), folder: dir.into() }),
        Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|source| {
                OpenError::Io {
                    context: format!("cannot create the folder {}", dir.display()),
                    source,
                }
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(OpenError::NoFolder { path: path.into(), folder: dir.into() })
        }
        Err(source) => Err(OpenError::Io {
            context: format!("cannot look at the folder {}", dir.display()),
            source,
        }),
    }
}

fn open_backend(
    path: &Path,
    backend: Backend,
    options: &OpenOptions,
) -> Result<Arc<dyn Store>, OpenError> {
    let mut policy = slothqueue_core::Policy::default();
    if let Some(ttl) = options.lease_ttl {
        policy.lease_ttl = ttl;
    }
    match backend {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => {
            use slothqueue_store_sqlite::{SqliteOptions, SqliteStore};
            let sqlite = SqliteOptions { policy, ..SqliteOptions::default() };
            // A look opens as usual where it can (the last connection to
            // close removes SQLite's -wal/-shm, so the folder is left as it
            // was); only where the folder, the file or the disk cannot be
            // written does it fall back to a read-only connection.
            let usual = if options.read_only {
                match SqliteStore::open(path, sqlite.clone()) {
                    Ok(store) => Some(store),
                    Err(e) if cannot_write(&e) => None,
                    Err(e) => return Err(e.into()),
                }
            } else {
                None
            };
            if let Some(store) = usual {
                Ok(Arc::new(store))
            } else if options.read_only {
                let store = SqliteStore::open_read_only(path, sqlite)?;
                if let Some(note) = store.read_only_note() {
                    #[expect(clippy::print_stderr, reason = "the one note a look must not hide")]
                    {
                        eprintln!("note: {}: {note}", path.display());
                    }
                }
                Ok(Arc::new(store))
            } else {
                Ok(Arc::new(SqliteStore::open(path, sqlite)?))
            }
        }
        #[cfg(feature = "redb")]
        Backend::Redb => {
            use slothqueue_store_redb::{RedbOptions, RedbStore};
            let redb =
                RedbOptions { policy, full_check: options.full_check, ..RedbOptions::default() };
            Ok(Arc::new(if options.read_only {
                RedbStore::open_read_only(path, redb)?
            } else {
                RedbStore::open(path, redb)?
            }))
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            use slothqueue_store_postgres::{PgOptions, PgStore};
            let url = path.to_str().ok_or_else(|| OpenError::NotAUrl(shown(path).into()))?;
            let pg = PgOptions { policy, ..PgOptions::default() };
            // A schema nobody made yet is a missing queue: looking, or a
            // command that does not create, leaves the server as it was.
            let missing = |e: StoreError| match e {
                StoreError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                    OpenError::Missing(shown(path).into())
                }
                e => e.into(),
            };
            let store = if options.read_only {
                PgStore::open_read_only(url, pg).map_err(missing)?
            } else if options.create {
                PgStore::open(url, pg)?
            } else {
                drop(PgStore::open_read_only(url, pg.clone()).map_err(missing)?);
                PgStore::open(url, pg)?
            };
            Ok(Arc::new(store))
        }
        #[allow(unreachable_patterns, reason = "reached only in builds without a backend")]
        other => {
            // A build with no backend at all (`default-features = false`,
            // as the bench and the harnesses take it for `Backend`) uses
            // neither.
            let _ = (path, policy);
            Err(OpenError::BackendNotBuilt { backend: other })
        }
    }
}

/// Whether a store error may mean the queue can be read but not written
/// (a read-only folder or filesystem, a file only readable by this user,
/// a full disk): SQLite says "unable to open database file", an I/O error
/// of no particular kind, when it cannot make its -wal/-shm beside the
/// file. The read-only open that follows gives the real reason if not.
#[cfg(feature = "sqlite")]
fn cannot_write(e: &StoreError) -> bool {
    matches!(e, StoreError::DiskFull(_) | StoreError::Io { .. } | StoreError::Backend(_))
}

/// The first bytes of `path`, or `None` when there is no such file.
fn read_header(path: &Path) -> Result<Option<Vec<u8>>, OpenError> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(OpenError::Io {
                context: format!("cannot read {}", path.display()),
                source,
            });
        }
    };
    let mut header = Vec::with_capacity(64);
    file.by_ref().take(64).read_to_end(&mut header).map_err(|source| OpenError::Io {
        context: format!("cannot read {}", path.display()),
        source,
    })?;
    Ok(Some(header))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_url_is_shown_without_its_password() {
        let shown_as = |s: &str| shown(Path::new(s));
        assert_eq!(
            shown_as("postgres://jobs:secret@db/q?schema=a"),
            "postgres://jobs@db/q?schema=a"
        );
        assert_eq!(shown_as("postgresql://jobs@db/q"), "postgresql://jobs@db/q");
        let pw = |s: &str| has_password(Path::new(s));
        assert!(pw("postgres://jobs:secret@db/q?schema=a"));
        assert!(pw("postgres://db/q?user=jobs&password=secret"));
        assert!(!pw("postgres://jobs@db/q?schema=a"));
        assert!(!pw("postgres://jobs:@db/q"));
        assert!(!pw("postgres://db/q?passfile=/home/u/.pgpass"));
        assert!(!pw("/tmp/a:b@c.db"));
        assert_eq!(shown_as("postgres://db/q?host=/run/pg"), "postgres://db/q?host=/run/pg");
        assert_eq!(shown_as("/home/u/q:secret@x.db"), "/home/u/q:secret@x.db");
        assert!(is_server_url(Path::new("postgres://db/q")));
        assert!(!is_server_url(Path::new("./postgres://db")));
        assert_eq!(detect(Path::new("postgres://db/q"), None).unwrap(), Backend::Postgres);
    }

    #[test]
    fn the_postgres_backend_wants_a_url() {
        let options = OpenOptions { backend: Some(Backend::Postgres), ..OpenOptions::default() };
        let err = open(Path::new("/tmp/q.db"), options).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "/tmp/q.db: the postgres backend takes the server's URL as --db (postgres://user@host/database)"
            )
        );
    }

    #[test]
    fn the_name_decides_for_new_files() {
        assert_eq!(Backend::for_new_file(Path::new("q.redb")), Backend::Redb);
        assert_eq!(Backend::for_new_file(Path::new("q.REDB")), Backend::Redb);
        assert_eq!(Backend::for_new_file(Path::new("q.db")), Backend::Sqlite);
        assert_eq!(Backend::for_new_file(Path::new("queue")), Backend::Sqlite);
    }

    #[test]
    fn the_header_decides_for_existing_files() {
        assert_eq!(Backend::sniff(b"SQLite format 3\0rest"), Some(Backend::Sqlite));
        assert_eq!(Backend::sniff(b"redb\x1a\x0a\xa9\x0d\x0a"), Some(Backend::Redb));
        assert_eq!(Backend::sniff(b"#!/bin/sh\n"), None);
    }

    #[test]
    fn a_missing_file_is_not_created_when_asked_not_to() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/queue.db");
        let options = OpenOptions { create: false, ..OpenOptions::default() };
        let err = open(&path, options).err().unwrap();
        assert!(matches!(err, OpenError::Missing(_)), "{err}");
        assert!(!dir.path().join("sub").exists());
    }

    #[test]
    fn a_foreign_file_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notes.db");
        std::fs::write(&path, "just some notes\n").unwrap();
        let err = open(&path, OpenOptions::default()).err().unwrap();
        assert!(matches!(err, OpenError::Foreign(_)), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"just some notes\n");
    }

    #[cfg(not(feature = "redb"))]
    #[test]
    fn a_build_without_redb_names_the_feature() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        std::fs::write(&path, b"redb\x1a\x0a\xa9\x0d\x0a").unwrap();
        let err = open(&path, OpenOptions::default()).err().unwrap();
        assert_eq!(
            err.to_string(),
            "this queue is a redb file but slothqueue was built without the \"redb\" feature"
        );
    }

    #[cfg(not(feature = "sqlite"))]
    #[test]
    fn a_build_without_sqlite_names_the_feature() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        std::fs::write(&path, b"SQLite format 3\0").unwrap();
        let err = open(&path, OpenOptions::default()).err().unwrap();
        assert_eq!(
            err.to_string(),
            "this queue is a sqlite file but slothqueue was built without the \"sqlite\" feature"
        );
    }
}
