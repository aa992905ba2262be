//! The password when `--db` carries none, found where libpq finds it, so
//! it need not sit on a command line that `ps` shows every local user:
//! `PGPASSWORD`, else the password file (`?passfile=` in the URL, else
//! `PGPASSFILE`, else `~/.pgpass`), in libpq's format
//! (`host:port:database:user:password`, `*` for any, `\:` and `\\`
//! escaped, `#` comments; the first line that matches wins) and under its
//! rule: a file group or others can read is not used. libpq skips such a
//! file with a warning; here a store has no warning channel, so a loose
//! file that holds the matching line refuses the open with the fix, and
//! one that does not match is left alone as libpq would.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use slothqueue_core::StoreError;
use tokio_postgres::config::Host;

/// What the lookup reads from the environment, injected for tests.
#[derive(Clone, Debug, Default)]
pub(crate) struct PassEnv {
    /// `PGPASSWORD`.
    pub password: Option<String>,
    /// `PGPASSFILE`.
    pub passfile: Option<PathBuf>,
    /// `HOME`, for `~/.pgpass`.
    pub home: Option<PathBuf>,
}

impl PassEnv {
    /// This process's.
    pub(crate) fn from_process() -> PassEnv {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        PassEnv {
            password: var("PGPASSWORD").and_then(|v| v.into_string().ok()),
            passfile: var("PGPASSFILE").map(PathBuf::from),
            home: var("HOME").map(PathBuf::from),
        }
    }
}

/// Sets `config`'s password from the environment or the password file when
/// the URL gave none; `passfile` is the URL's `?passfile=`.
pub(crate) fn fill_password(
    config: &mut tokio_postgres::Config,
    passfile: Option<&str>,
    env: &PassEnv,
) -> Result<(), StoreError> {
    if config.get_password().is_some() {
        return Ok(());
    }
    if let Some(password) = &env.password {
        config.password(password.as_str());
        return Ok(());
    }
    let path = match (passfile, &env.passfile, &env.home) {
        (Some(p), _, _) => PathBuf::from(p),
        (None, Some(p), _) => p.clone(),
        (None, None, Some(home)) => home.join(".pgpass"),
        (None, None, None) => return Ok(()),
    };
    let Ok(meta) = std::fs::metadata(&path) else { return Ok(()) };
    if !meta.is_file() {
        return Ok(());
    }
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(()) };
    let Some(password) = lookup(&text, config) else { return Ok(()) };
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(loose(&path));
    }
    config.password(password);
    Ok(())
}

fn loose(path: &Path) -> StoreError {
    let p = path.display();
    StoreError::InvalidInput(format!(
        "the password file {p} can be read or written by group or others, so it is not used \
         (as libpq would not): chmod 600 {p}"
    ))
}

/// The password of the first line matching any of `config`'s servers, its
/// database and its user.
fn lookup(text: &str, config: &tokio_postgres::Config) -> Option<String> {
    let user = config.get_user().unwrap_or("");
    let db = config.get_dbname().unwrap_or(user);
    let ports = config.get_ports();
    let servers: Vec<(String, String)> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432).to_string();
            let host = match h {
                Host::Tcp(name) => name.clone(),
                // libpq matches a socket in the default directory as
                // `localhost`, and any other by the directory's name.
                Host::Unix(dir) if is_default_socket_dir(dir) => "localhost".to_owned(),
                Host::Unix(dir) => dir.display().to_string(),
            };
            (host, port)
        })
        .collect();
    text.lines().filter(|l| !l.trim_start().starts_with('#')).find_map(|line| {
        let fields = split_fields(line)?;
        let [host, port, database, name, password] = fields;
        let fits = |pattern: &str, value: &str| pattern == "*" || pattern == value;
        let server_fits = servers.iter().any(|(h, p)| fits(&host, h) && fits(&port, p));
        (server_fits && fits(&database, db) && fits(&name, user)).then_some(password)
    })
}

fn is_default_socket_dir(dir: &Path) -> bool {
    dir == Path::new("/run/postgresql")
        || dir == Path::new("/var/run/postgresql")
        || dir == Path::new("/tmp")
}

/// A line's five fields, `\:` and `\\` unescaped; `None` for fewer.
fn split_fields(line: &str) -> Option<[String; 5]> {
    let mut fields: Vec<String> = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    fields.last_mut()?.push(next);
                }
            }
            // The password, the last field, keeps any further `:`.
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut()?.push(c),
        }
    }
    fields.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr as _;

    fn config(url: &str) -> tokio_postgres::Config {
        tokio_postgres::Config::from_str(url).unwrap()
    }

    fn write(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    fn password_of(url: &str, passfile: Option<&str>, env: &PassEnv) -> Option<Vec<u8>> {
        let mut c = config(url);
        fill_password(&mut c, passfile, env).unwrap();
        c.get_password().map(<[u8]>::to_vec)
    }

    const LINES: &str = "# a comment\n\
        other:5432:*:jobs:wrong\n\
        db.lan:5432:jobs:jobs:s3cr\\:et\n\
        *:*:*:admin:any:colon\n";

    #[test]
    fn the_first_matching_line_of_a_private_password_file_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "pass", LINES, 0o600);
        let env = PassEnv { passfile: Some(file), ..PassEnv::default() };
        let pw = |url| password_of(url, None, &env);
        assert_eq!(pw("postgres://jobs@db.lan/jobs"), Some(b"s3cr:et".to_vec()));
        assert_eq!(pw("postgres://admin@anywhere:6000/x"), Some(b"any:colon".to_vec()));
        assert_eq!(pw("postgres://jobs@db.lan:5433/jobs"), None, "another port");
        assert_eq!(pw("postgres://jobs@db.lan/other"), None, "another database");
        // The URL's own password, and PGPASSWORD, come first.
        assert_eq!(pw("postgres://jobs:mine@db.lan/jobs"), Some(b"mine".to_vec()));
        let env = PassEnv { password: Some("fromenv".into()), ..env };
        assert_eq!(
            password_of("postgres://jobs@db.lan/jobs", None, &env),
            Some(b"fromenv".to_vec())
        );
    }

    #[test]
    fn the_urls_passfile_then_pgpassfile_then_home() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), ".pgpass", "*:*:*:*:home\n", 0o600);
        let named = write(dir.path(), "named", "*:*:*:*:named\n", 0o600);
        let env_file = write(dir.path(), "env", "*:*:*:*:env\n", 0o600);
        let home = PassEnv { home: Some(dir.path().to_owned()), ..PassEnv::default() };
        let url = "postgres://u@h/d";
        assert_eq!(password_of(url, None, &home), Some(b"home".to_vec()));
        let env = PassEnv { passfile: Some(env_file), ..home.clone() };
        assert_eq!(password_of(url, None, &env), Some(b"env".to_vec()));
        assert_eq!(password_of(url, named.to_str(), &env), Some(b"named".to_vec()));
        let missing = PassEnv { home: Some(dir.path().join("nowhere")), ..PassEnv::default() };
        assert_eq!(password_of(url, None, &missing), None);
    }

    #[test]
    fn a_password_file_others_can_read_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "pass", LINES, 0o640);
        let env = PassEnv { passfile: Some(file.clone()), ..PassEnv::default() };
        let mut c = config("postgres://jobs@db.lan/jobs");
        let e = fill_password(&mut c, None, &env).unwrap_err().to_string();
        assert!(e.contains("can be read or written by group or others"), "{e}");
        assert!(e.contains(&format!("chmod 600 {}", file.display())), "{e}");
        assert!(c.get_password().is_none());
        // One that holds no line for this server is left alone.
        assert_eq!(password_of("postgres://nobody@elsewhere/x", None, &env), None);
    }

    #[test]
    fn a_socket_in_the_default_directory_matches_localhost() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "pass", "localhost:5432:*:u:sock\n", 0o600);
        let env = PassEnv { passfile: Some(file), ..PassEnv::default() };
        assert_eq!(
            password_of("postgres://u@%2Frun%2Fpostgresql/d", None, &env),
            Some(b"sock".to_vec())
        );
    }
}
