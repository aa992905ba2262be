//! How the store talks to PostgreSQL: the options, the URL (and its
//! `schema` parameter), the store's private runtime and its small pool of
//! connections, the synchronous face the operations use ([`Db`]), the one
//! transaction runner every call goes through ([`Db::transaction`]), and
//! how all of that does without session state through a pooler in
//! transaction mode ([`Session`]). The clock offset to the server is
//! `clock.rs`.
//!
//! The operations are written as plain synchronous code (the core's
//! dependency rule reads through a synchronous `Graph`), run on the
//! runtime's blocking threads, each statement a `block_on` of a
//! tokio-postgres future whose connection task runs on the same runtime.
//! So the store can be opened without a runtime and awaited from any.

use std::cell::RefCell;
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use slothqueue_core::{Policy, StoreError, Timestamp};
use tokio::runtime::Handle;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::config::Host;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls, Row, Statement};

use crate::error::Error;

/// The host's wall clock, as [`PgOptions::host_clock`] takes it.
pub type HostClock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// How to open a queue on a PostgreSQL server.
#[derive(Clone)]
pub struct PgOptions {
    /// Lease, backoff and attempt settings for every transition.
    pub policy: Policy,
    /// How many connections one store keeps at most (each call holds one
    /// for its transaction). Small: many stores may share one server.
    pub pool_size: usize,
    /// How long a call waits for a lock (the queue's advisory lock, a
    /// job's row) before giving up with `StoreError::Busy`: PostgreSQL's
    /// `lock_timeout` on every connection.
    pub busy_timeout: Duration,
    /// How long connecting may take before `StoreError::Unreachable`
    /// (unless the URL sets `connect_timeout`).
    pub connect_timeout: Duration,
    /// How long one round trip (a statement, a `COPY`, connecting and
    /// logging in) may wait for the server's answer before the connection
    /// is taken for cut off: the call fails with `StoreError::Unreachable`
    /// and the connection is dropped, so the next call opens a new one. A
    /// link that went silent without a reset (a partition, a frozen
    /// proxy) is otherwise waited on forever: TCP keepalives are answered
    /// by whatever still holds the socket, and `statement_timeout` is the
    /// server's, which is not there. Long enough for the slowest statement
    /// the store sends (a bulk `COPY`, a purge), with `busy_timeout`
    /// bounding its lock waits (default 30 s).
    pub call_timeout: Duration,
    /// How long the server lets one of this store's sessions sit inside a
    /// transaction waiting for its next statement before it ends the
    /// session (PostgreSQL's `idle_in_transaction_session_timeout`). A
    /// client cut off mid-transaction (a partition, a frozen proxy, a
    /// stopped process) otherwise keeps its locks, the queue's lock among
    /// them, until the server's TCP keepalive gives up, hours later, and
    /// every writer of the queue waits on it meanwhile (S26 caught it).
    /// This store's transactions never wait on anything but the server
    /// between statements, so seconds are generous (default 10 s).
    pub idle_in_transaction_timeout: Duration,
    /// This host's wall clock, which the `now` given to every call is read
    /// from; `None` for the system clock. Tests inject a wrong one (see
    /// the crate docs, "One clock").
    pub host_clock: Option<HostClock>,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            policy: Policy::default(),
            pool_size: 4,
            busy_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            idle_in_transaction_timeout: Duration::from_secs(10),
            host_clock: None,
        }
    }
}

impl std::fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgOptions")
            .field("policy", &self.policy)
            .field("pool_size", &self.pool_size)
            .field("busy_timeout", &self.busy_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("call_timeout", &self.call_timeout)
            .field("idle_in_transaction_timeout", &self.idle_in_transaction_timeout)
            .field("host_clock", &self.host_clock.as_ref().map(|_| "injected"))
            .finish()
    }
}

/// [`PgOptions::call_timeout`]'s default.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The schema a URL without `?schema=` names.
pub const DEFAULT_SCHEMA: &str = "slothqueue";

/// Where a queue lives: the connection settings for tokio-postgres, the
/// schema, and how errors name it.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub config: tokio_postgres::Config,
    pub schema: String,
    /// `postgres://user@host/db?schema=NAME`, without a password.
    pub name: String,
    /// The server(s) alone: `host:port` or the socket directory.
    pub server: String,
    /// Reached through a pooler in transaction mode (`?pooler=transaction`):
    /// no session state (see [`Session`]).
    pub pooler: bool,
}

/// Whether `name` may name a queue's schema: a plain lowercase identifier
/// (letters, digits, `_`, not starting with a digit, at most 63 bytes),
/// so it never needs quoting and is the same name in every tool.
pub fn valid_schema_name(name: &str) -> bool {
    let mut chars = name.chars();
    let Some(first) = chars.next() else { return false };
    name.len() <= 63
        && (first.is_ascii_lowercase() || first == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !name.starts_with("pg_")
}

/// Parses a `postgres://` (or `postgresql://`) URL: its `schema` query
/// parameter is the queue's schema (default [`DEFAULT_SCHEMA`]) and is
/// removed before the rest goes to tokio-postgres, which refuses
/// parameters it does not know; a query `host` or `port` is read as libpq
/// reads it ([`crate::url`]).
pub(crate) fn parse_url(url: &str) -> Result<Target, StoreError> {
    let invalid = |m: String| StoreError::InvalidInput(m);
    let url = crate::url::fold_host_and_port(url).map_err(|m| {
        invalid(format!("not a PostgreSQL URL ({m}): postgres://USER@HOST/DB?schema=NAME"))
    })?;
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url.as_str(), None),
    };
    let mut schema = DEFAULT_SCHEMA.to_owned();
    let mut passfile = None;
    let mut pooler = false;
    let mut kept: Vec<&str> = Vec::new();
    for pair in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("schema", v)) => schema = v.to_owned(),
            // Ours: how the server is reached (see `Session`).
            Some(("pooler", "transaction")) => pooler = true,
            Some(("pooler", "none" | "session")) => pooler = false,
            Some(("pooler", other)) => {
                return Err(invalid(format!(
                    "`pooler={other}`: give `pooler=transaction` for a pooler in transaction \
                     mode (PgBouncer's `pool_mode = transaction`), or leave it out"
                )));
            }
            // libpq's, which tokio-postgres does not know.
            Some(("passfile", v)) => passfile = Some(v),
            _ => kept.push(pair),
        }
    }
    if !valid_schema_name(&schema) {
        return Err(invalid(format!(
            "`{schema}` cannot name a queue's schema: use lowercase letters, digits and `_` \
             (at most 63, not starting with a digit or pg_)"
        )));
    }
    let rest = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    let mut config = tokio_postgres::Config::from_str(&rest).map_err(|e| {
        invalid(format!("not a PostgreSQL URL ({e}): postgres://USER@HOST/DB?schema=NAME"))
    })?;
    crate::passfile::fill_password(
        &mut config,
        passfile,
        &crate::passfile::PassEnv::from_process(),
    )?;
    // What tokio-postgres would refuse only at connect, as a bare "invalid
    // configuration": said here, with the fix.
    let ports = config.get_ports();
    let (host_count, addr_count) = (config.get_hosts().len(), config.get_hostaddrs().len());
    let servers = host_count.max(addr_count);
    let shape = "postgres://USER@HOST:PORT/DB?schema=NAME";
    if servers == 0 {
        return Err(invalid(format!(
            "not a PostgreSQL URL (it names no server: give HOST, or `?host=/run/postgresql` for \
             the local socket): {shape}"
        )));
    }
    if host_count > 0 && addr_count > 0 && host_count != addr_count {
        return Err(invalid(format!(
            "not a PostgreSQL URL ({host_count} hosts but {addr_count} `hostaddr`s: give one \
             per host): {shape}"
        )));
    }
    if ports.len() > 1 && ports.len() != servers {
        return Err(invalid(format!(
            "not a PostgreSQL URL ({} ports for {servers} hosts: give one port, or one per \
             host): {shape}",
            ports.len()
        )));
    }
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match h {
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(dir) => format!("{}/.s.PGSQL.{port}", dir.display()),
            }
        })
        .collect();
    let server = if hosts.is_empty() { "localhost:5432".to_owned() } else { hosts.join(",") };
    let user = config.get_user().unwrap_or("");
    let db = config.get_dbname().unwrap_or(user);
    // The schema last: `PgStore::schema` reads it from the end.
    let pooled = if pooler { "pooler=transaction&" } else { "" };
    let name = format!("postgres://{user}@{server}/{db}?{pooled}schema={schema}");
    Ok(Target { config, schema, name, server, pooler })
}

/// A 64-bit FNV-1a hash: the advisory lock keys and test schema names,
/// stable across builds and machines (std's hasher is not).
pub(crate) fn fnv64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The names derived from the schema: the keys of its two advisory locks
/// and its notification channel.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    /// The queue's lock, taken by the writes that need one consistent view
    /// (see the crate docs).
    pub queue: i64,
    /// The lock around creating and migrating the schema.
    pub create: i64,
    /// The `LISTEN`/`NOTIFY` channel.
    pub channel: String,
}

impl Keys {
    pub fn new(schema: &str) -> Keys {
        let key = |what: &str| fnv64(format!("slothqueue:{what}:{schema}").as_bytes()) as i64;
        let mut channel = format!("slothqueue_{schema}");
        channel.truncate(63);
        Keys { queue: key("queue"), create: key("create"), channel }
    }
}

/// How every connection of a store is set up: its schema first in the
/// search path, the lock timeout, the idle-in-transaction timeout,
/// read-only when asked.
///
/// Straight to the server, these are the session's, sent once as the
/// startup `options` (`-c search_path=…`), and each statement is prepared
/// once per connection (named) and kept: one round trip a statement.
///
/// Through a pooler in transaction mode (PgBouncer's `pool_mode =
/// transaction`, `?pooler=transaction` in the URL) a client's next
/// transaction may run on another server connection, so nothing may live
/// in the session: the pooler refuses startup `options`, and a named
/// statement prepared on one server connection is missing on the next (or
/// its name taken there by another client: `prepared statement "s0"
/// already exists`). So the settings ride on each `BEGIN` as `SET LOCAL`
/// (same round trip), and statements are unnamed: `query_typed` /
/// `execute_typed` send parse, bind and execute in one round trip with the
/// parameters' types, which are learnt once per connection and SQL text
/// by a prepare closed again inside the same transaction (types are the
/// server's built-in ones, the same on every server connection). A
/// `COPY` prepares and closes its statement each time (one round trip
/// more). The queue's locks are transaction-level already
/// (`pg_advisory_xact_lock`); `LISTEN` needs a session, so change
/// listening polls instead (`listen.rs`).
#[derive(Clone, Debug)]
pub(crate) struct Session {
    pub config: tokio_postgres::Config,
    /// Through a pooler: the `SET LOCAL` statements every transaction
    /// starts with; `None` straight to the server.
    pub per_transaction: Option<String>,
}

/// The [`Session`] of a store's connections to `target`.
pub(crate) fn connection_config(target: &Target, options: &PgOptions, read_only: bool) -> Session {
    let mut config = target.config.clone();
    let lock_ms = options.busy_timeout.as_millis().max(1);
    let idle_ms = options.idle_in_transaction_timeout.as_millis().max(1);
    let per_transaction = if target.pooler {
        let mut set = format!(
            "SET LOCAL search_path TO {}; SET LOCAL lock_timeout = {lock_ms}; \
             SET LOCAL idle_in_transaction_session_timeout = {idle_ms}",
            target.schema
        );
        if read_only {
            set.push_str("; SET LOCAL transaction_read_only = on");
        }
        Some(set)
    } else {
        let mut settings = config.get_options().unwrap_or("").to_owned();
        settings.push_str(&format!(
            " -c search_path={} -c lock_timeout={lock_ms} -c idle_in_transaction_session_timeout={idle_ms}",
            target.schema,
        ));
        if read_only {
            settings.push_str(" -c default_transaction_read_only=on");
        }
        config.options(settings.trim());
        None
    };
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(options.connect_timeout);
    }
    if config.get_application_name().is_none() {
        config.application_name("slothqueue");
    }
    Session { config, per_transaction }
}

// ---------------------------------------------------------------------------
// Connections

/// The store's own runtime: one worker thread for its connections' tasks,
/// and blocking threads for its operations (one per pooled connection, a
/// few more for the listeners and the open).
pub(crate) fn runtime(pool_size: usize) -> Result<tokio::runtime::Runtime, StoreError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(pool_size.max(1) + 4)
        // An idle blocking thread would otherwise exit 10 s after its
        // last call, waking an idle runner (`run --follow`) for nothing;
        // a few parked threads cost nothing while they wait.
        .thread_keep_alive(Duration::from_secs(3600))
        .thread_name("slothqueue-pg")
        .enable_all()
        .build()
        .map_err(|e| StoreError::Io { context: "start the store's runtime".into(), source: e })
}

/// One connection, with its prepared statements by SQL text.
pub(crate) struct Conn {
    client: Client,
    stmts: RefCell<HashMap<String, Statement>>,
    /// Through a pooler ([`Session`]): what each transaction starts with,
    /// and the parameters' types by SQL text (no statement is kept).
    per_transaction: Option<String>,
    types: RefCell<HashMap<String, Vec<Type>>>,
    /// Inside `BEGIN` … `COMMIT`: a statement prepared to learn its types
    /// is closed on the same server connection.
    in_transaction: std::cell::Cell<bool>,
    /// How long a round trip on it may wait ([`PgOptions::call_timeout`]).
    timeout: Duration,
    /// A round trip waited longer than `timeout`: the connection is cut
    /// off, every later call on it fails at once, and it is dropped.
    silent: std::cell::Cell<bool>,
    /// Statements run on it (each a round trip, or two for a `COPY`), for
    /// the tests that hold the bulk paths to their few.
    #[cfg(test)]
    statements: std::cell::Cell<usize>,
}

/// Connects on the store's runtime (its I/O is registered there) and
/// spawns the connection's task on it, all within `timeout` (a server
/// behind a frozen link accepts the socket and never answers the login).
/// Called from a thread outside any runtime's async context.
pub(crate) fn connect(rt: &Handle, session: &Session, timeout: Duration) -> Result<Conn, Error> {
    let config = session.config.clone();
    let spawner = rt.clone();
    let client = rt.block_on(async move {
        let connected = tokio::time::timeout(timeout, config.connect(NoTls)).await;
        let (client, connection) = connected.map_err(|_| Error::Silent(timeout))??;
        spawner.spawn(async move {
            // Ends when the client is dropped or the server goes away;
            // the client then reports itself closed.
            let _ = connection.await;
        });
        Ok::<_, Error>(client)
    })?;
    Ok(Conn {
        client,
        stmts: RefCell::new(HashMap::new()),
        per_transaction: session.per_transaction.clone(),
        types: RefCell::new(HashMap::new()),
        in_transaction: std::cell::Cell::new(false),
        timeout,
        silent: std::cell::Cell::new(false),
        #[cfg(test)]
        statements: std::cell::Cell::new(0),
    })
}

/// A few connections, opened on demand and kept while they work.
pub(crate) struct Pool {
    config: Session,
    rt: Handle,
    timeout: Duration,
    idle: Mutex<Vec<Conn>>,
    permits: tokio::sync::Semaphore,
}

impl Pool {
    pub fn new(
        config: Session,
        rt: Handle,
        size: usize,
        timeout: Duration,
        first: Option<Conn>,
    ) -> Pool {
        Pool {
            config,
            rt,
            timeout,
            idle: Mutex::new(first.into_iter().collect()),
            permits: tokio::sync::Semaphore::new(size.max(1)),
        }
    }

    /// A connection for one call, waiting for one to be free; a new one
    /// when none idle is still open.
    pub fn get(&self) -> Result<Pooled<'_>, Error> {
        let permit = self
            .rt
            .block_on(self.permits.acquire())
            .map_err(|_| Error::Decode("the connection pool is closed".into()))?;
        let reused = loop {
            let next = self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
            match next {
                Some(c) if c.client.is_closed() || c.silent.get() => continue,
                other => break other,
            }
        };
        let conn = match reused {
            Some(c) => c,
            None => connect(&self.rt, &self.config, self.timeout)?,
        };
        Ok(Pooled { pool: self, conn: Some(conn), broken: false, _permit: permit })
    }
}

/// A connection lent by the [`Pool`]; back to it on drop unless broken.
pub(crate) struct Pooled<'p> {
    pool: &'p Pool,
    conn: Option<Conn>,
    pub broken: bool,
    _permit: tokio::sync::SemaphorePermit<'p>,
}

impl Pooled<'_> {
    pub fn db<'a>(&'a self, writes: bool) -> Db<'a> {
        #[expect(clippy::unwrap_used, reason = "set until drop")]
        let conn = self.conn.as_ref().unwrap();
        Db { conn, rt: &self.pool.rt, writes }
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if !self.broken && !conn.client.is_closed() && !conn.silent.get() {
                self.pool.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(conn);
            }
        }
    }
}

/// Parameters of a statement.
pub(crate) type Params<'a> = [&'a (dyn ToSql + Sync)];

/// One connection seen synchronously: every call blocks this (blocking)
/// thread on the store's runtime. `writes` is set inside write
/// transactions: the job reads there lock their rows (`FOR UPDATE`).
pub(crate) struct Db<'a> {
    conn: &'a Conn,
    rt: &'a Handle,
    pub writes: bool,
}

/// How a transaction serializes with the others on the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lock {
    /// Only row locks (`FOR UPDATE` on the rows it writes).
    Rows,
    /// The queue's advisory lock, shared: several such transactions at
    /// once, none with an exclusive one.
    Shared,
    /// The queue's advisory lock, exclusive.
    Exclusive,
}

impl<'a> Db<'a> {
    /// `conn` seen synchronously through `rt`.
    pub fn on(conn: &'a Conn, rt: &'a Handle, writes: bool) -> Db<'a> {
        Db { conn, rt, writes }
    }

    /// Counts one statement ([`Conn::statements`]); nothing outside tests.
    fn count(&self) {
        #[cfg(test)]
        self.conn.statements.set(self.conn.statements.get() + 1);
    }

    /// How many statements this connection has run.
    #[cfg(test)]
    pub fn statements(&self) -> usize {
        self.conn.statements.get()
    }

    /// Waits for one round trip on the connection, at most its timeout
    /// ([`PgOptions::call_timeout`]): past it the connection is taken for
    /// cut off ([`Error::Silent`]), and so is every later call on it.
    fn wait<T, E: Into<Error>>(
        &self,
        round_trip: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, Error> {
        let limit = self.conn.timeout;
        if self.conn.silent.get() {
            return Err(Error::Silent(limit));
        }
        match self.rt.block_on(async { tokio::time::timeout(limit, round_trip).await }) {
            Ok(answer) => answer.map_err(Into::into),
            Err(_) => {
                self.conn.silent.set(true);
                Err(Error::Silent(limit))
            }
        }
    }

    fn statement(&self, sql: &str) -> Result<Statement, Error> {
        if let Some(s) = self.conn.stmts.borrow().get(sql) {
            return Ok(s.clone());
        }
        let s = self.wait(self.conn.client.prepare(sql))?;
        self.conn.stmts.borrow_mut().insert(sql.to_owned(), s.clone());
        Ok(s)
    }

    /// The types of `sql`'s parameters, through a pooler ([`Session`]):
    /// learnt once per connection by a prepare whose statement is closed
    /// again at once, inside a transaction so that the close reaches the
    /// server connection the prepare did.
    fn types(&self, sql: &str) -> Result<Vec<Type>, Error> {
        if let Some(t) = self.conn.types.borrow().get(sql) {
            return Ok(t.clone());
        }
        if !sql.contains('$') {
            return Ok(Vec::new());
        }
        let outside = !self.conn.in_transaction.get();
        if outside {
            self.batch(&self.begin("BEGIN"))?;
        }
        // Dropped here: its close is sent before anything after it.
        let prepared = self.wait(self.conn.client.prepare(sql)).map(|s| s.params().to_vec());
        if outside {
            self.batch(if prepared.is_ok() { "COMMIT" } else { "ROLLBACK" })?;
        }
        let types = prepared?;
        self.conn.types.borrow_mut().insert(sql.to_owned(), types.clone());
        Ok(types)
    }

    /// `params` with their types, for `query_typed` / `execute_typed`.
    fn typed<'p>(
        &self,
        sql: &str,
        params: &Params<'p>,
    ) -> Result<Vec<(&'p (dyn ToSql + Sync), Type)>, Error> {
        let types = self.types(sql)?;
        if types.len() != params.len() {
            return Err(Error::Store(StoreError::Backend(format!(
                "{} parameters for a statement of {} ({sql})",
                params.len(),
                types.len()
            ))));
        }
        Ok(params.iter().copied().zip(types).collect())
    }

    /// Every row of a query.
    pub fn query(&self, sql: &str, params: &Params<'_>) -> Result<Vec<Row>, Error> {
        self.count();
        if self.conn.per_transaction.is_some() {
            let typed = self.typed(sql, params)?;
            return self.wait(self.conn.client.query_typed(sql, &typed));
        }
        let stmt = self.statement(sql)?;
        self.wait(self.conn.client.query(&stmt, params))
    }

    /// The first row of a query, if any.
    pub fn query_opt(&self, sql: &str, params: &Params<'_>) -> Result<Option<Row>, Error> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// Runs a statement; the number of rows it changed.
    pub fn execute(&self, sql: &str, params: &Params<'_>) -> Result<u64, Error> {
        self.count();
        if self.conn.per_transaction.is_some() {
            let typed = self.typed(sql, params)?;
            return self.wait(self.conn.client.execute_typed(sql, &typed));
        }
        let stmt = self.statement(sql)?;
        self.wait(self.conn.client.execute(&stmt, params))
    }

    /// Writes `rows` with one `COPY ... FROM STDIN (FORMAT binary)`
    /// (`copy`): a single round trip for the lot, where one `INSERT` each
    /// costs a round trip per row. Binary COPY does no conversion, so each
    /// value is sent typed as the parameter in its place of `insert`, the
    /// table's `INSERT` of the same columns in the same order: what the
    /// row-at-a-time path sends is exactly what COPY sends. Returns the
    /// number of rows written.
    pub fn copy_in<'v>(
        &self,
        copy: &str,
        insert: &str,
        rows: impl IntoIterator<Item = Vec<&'v (dyn ToSql + Sync)>>,
    ) -> Result<u64, Error> {
        self.count();
        let (types, stmt) = if self.conn.per_transaction.is_some() {
            // Prepared for this COPY alone, and closed when dropped at the
            // end of this call, after the COPY, on the same server
            // connection (inside the caller's transaction).
            (self.types(insert)?, self.wait(self.conn.client.prepare(copy))?)
        } else {
            (self.statement(insert)?.params().to_vec(), self.statement(copy)?)
        };
        self.wait(async {
            let sink = self.conn.client.copy_in(&stmt).await?;
            let mut writer = std::pin::pin!(BinaryCopyInWriter::new(sink, &types));
            for row in rows {
                // The writer panics on a row of the wrong width; every
                // caller builds its rows from the columns of `insert`, but
                // a mistake there is an error, not a crash.
                if row.len() != types.len() {
                    return Err(Error::Store(StoreError::Backend(format!(
                        "a COPY row of {} values for {} columns ({copy})",
                        row.len(),
                        types.len()
                    ))));
                }
                writer.as_mut().write(&row).await?;
            }
            Ok(writer.finish().await?)
        })
    }

    /// Runs statements without parameters (the simple protocol).
    pub fn batch(&self, sql: &str) -> Result<(), Error> {
        self.count();
        self.wait(self.conn.client.batch_execute(sql))
    }

    /// `begin`, and through a pooler the session's settings for this
    /// transaction alone ([`Session`]), in the same round trip.
    fn begin(&self, begin: &str) -> String {
        match &self.conn.per_transaction {
            Some(set) => format!("{begin}; {set}"),
            None => begin.to_owned(),
        }
    }

    /// Whether this connection goes through a pooler in transaction mode.
    pub fn pooled(&self) -> bool {
        self.conn.per_transaction.is_some()
    }

    /// ` FOR UPDATE` inside a write transaction, else nothing.
    pub fn for_update(&self) -> &'static str {
        if self.writes { " FOR UPDATE" } else { "" }
    }

    /// Runs `f` in one transaction (`READ COMMITTED`: every statement
    /// sees what committed before it, so what a lock holder reads after
    /// taking the lock includes every earlier holder's writes), with the
    /// queue's advisory lock as `lock` says, and a notification on
    /// `keys.channel` when `notify`, sent if and when it commits. A
    /// serialization failure or deadlock runs it again (a few times, then
    /// it is the caller's `Busy`); any other error rolls it back.
    pub fn transaction<T>(
        &self,
        keys: &Keys,
        lock: Lock,
        notify: bool,
        f: &mut dyn FnMut(&Db<'_>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let key = match lock {
            Lock::Rows => None,
            Lock::Shared => Some((keys.queue, true)),
            Lock::Exclusive => Some((keys.queue, false)),
        };
        self.run_tx(key, notify.then_some(keys.channel.as_str()), f)
    }

    /// [`Db::transaction`] under the exclusive advisory lock `key`, no
    /// notification (creation and migration).
    pub fn transaction_with_key<T>(
        &self,
        key: i64,
        f: &mut dyn FnMut(&Db<'_>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        self.run_tx(Some((key, false)), None, f)
    }

    fn run_tx<T>(
        &self,
        lock: Option<(i64, bool)>,
        channel: Option<&str>,
        f: &mut dyn FnMut(&Db<'_>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        const TRIES: u32 = 8;
        // The lock is taken, and the notification sent with the commit, in
        // the same round trip as `BEGIN` and `COMMIT` (the simple protocol
        // runs a string of statements at once): two round trips fewer per
        // write, out of 7 for a push. The key is a number and the channel a
        // checked schema name, so neither needs a parameter.
        let begin = self.begin("BEGIN");
        let begin = match lock {
            None => begin,
            Some((key, true)) => format!("{begin}; SELECT pg_advisory_xact_lock_shared({key})"),
            Some((key, false)) => format!("{begin}; SELECT pg_advisory_xact_lock({key})"),
        };
        let commit = match channel {
            None => "COMMIT".to_owned(),
            Some(channel) => {
                format!("SELECT pg_notify('{}', ''); COMMIT", channel.replace('\'', "''"))
            }
        };
        let mut tries = 0;
        loop {
            // A `BEGIN` whose lock timed out left the transaction open
            // (aborted): it is rolled back like any failed attempt.
            let out = self.batch(&begin).and_then(|()| {
                self.conn.in_transaction.set(true);
                let v = f(self)?;
                self.batch(&commit)?;
                self.conn.in_transaction.set(false);
                Ok(v)
            });
            match out {
                Ok(v) => return Ok(v),
                Err(e) => {
                    self.conn.in_transaction.set(false);
                    self.batch("ROLLBACK")?;
                    tries += 1;
                    if !e.is_retryable() || tries >= TRIES {
                        return Err(e);
                    }
                    nap_blocking(Duration::from_millis(1 + u64::from(tries) * 3));
                }
            }
        }
    }

    /// Runs `f`, one statement read outside a transaction: as it is
    /// straight to the server, in a read-only transaction through a
    /// pooler (where the schema is set per transaction: two round trips
    /// more, see [`Session`]).
    pub fn single<T>(&self, f: impl FnOnce(&Db<'_>) -> Result<T, Error>) -> Result<T, Error> {
        if self.pooled() && !self.conn.in_transaction.get() { self.read(f) } else { f(self) }
    }

    /// Runs `f` in a read-only transaction, so its queries see one
    /// snapshot (`REPEATABLE READ`).
    pub fn read<T>(&self, f: impl FnOnce(&Db<'_>) -> Result<T, Error>) -> Result<T, Error> {
        self.batch(&self.begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"))?;
        self.conn.in_transaction.set(true);
        let out = f(self);
        self.conn.in_transaction.set(false);
        let end = self.batch(if out.is_ok() { "COMMIT" } else { "ROLLBACK" });
        let v = out?;
        end?;
        Ok(v)
    }
}

#[expect(
    clippy::disallowed_methods,
    reason = "a retry's pause on the store's own blocking thread, not a test's wait"
)]
pub(crate) fn nap_blocking(d: Duration) {
    std::thread::sleep(d);
}
