//! Opening a queue: the look at its schema that refuses a foreign or
//! too-new one untouched, the creation of a missing (or empty) schema, and
//! the migration to this build's layout, all in one transaction under the
//! schema's creation lock (`pg_advisory_xact_lock`), so two processes
//! opening a fresh queue at once create it once and both succeed.

use slothqueue_core::StoreError;
use tokio::runtime::Handle;

use crate::clock::ServerClock;
use crate::error::{self, Context, Error};
use crate::schema::{ID_HIGH_WATER, MIGRATIONS, SCHEMA_VERSION, TABLES, VERSION_ROW};
use crate::txn::{Conn, Db, Keys, PgOptions, Target, connect, connection_config};

/// The store's first connection: the queue opened (created and migrated,
/// or only looked at when `read_only`) and the clock offset measured on
/// it. Runs on a plain thread of its own: `block_on` inside the caller's
/// runtime would panic.
pub(crate) fn first_connection(
    rt: &Handle,
    target: &Target,
    options: &PgOptions,
    ctx: &Context,
    clock: &ServerClock,
    read_only: bool,
) -> Result<Conn, StoreError> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let conn = if read_only {
                open_read_only(rt, target, options, ctx)?
            } else {
                open(rt, target, options, ctx)?
            };
            clock.measure(&Db::on(&conn, rt, false)).map_err(|e| ctx.map(e))?;
            Ok::<_, StoreError>(conn)
        })
        .join()
        .unwrap_or_else(|_| Err(StoreError::Backend("the opening thread panicked".into())))
    })
}

/// What the schema holds.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// No such schema.
    Missing,
    /// The schema exists and holds no table (made by a DBA for the queue).
    Empty,
    /// Tables, but no slothqueue `meta` with a version: not a queue.
    Foreign(String),
    /// A queue of this version.
    Queue { version: u32 },
}

/// Looks at the schema without writing.
fn probe(db: &Db<'_>, schema: &str) -> Result<Found, Error> {
    let exists = db.query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])?;
    if exists.is_none() {
        return Ok(Found::Missing);
    }
    let tables = table_names(db, schema)?;
    if tables.is_empty() {
        return Ok(Found::Empty);
    }
    if !tables.iter().any(|t| t == "meta") {
        return Ok(Found::Foreign(format!(
            "the schema holds tables ({}) but no slothqueue `meta`",
            tables.join(", ")
        )));
    }
    let sql = format!("SELECT value FROM {schema}.meta WHERE name = $1");
    let version: Option<i64> = match db.query_opt(&sql, &[&VERSION_ROW])? {
        Some(row) => Some(row.try_get(0)?),
        None => None,
    };
    match version.map(u32::try_from) {
        Some(Ok(v)) if v > 0 => Ok(Found::Queue { version: v }),
        Some(_) => Ok(Found::Foreign("its `meta` holds no valid schema version".into())),
        None => Ok(Found::Foreign("its `meta` holds no schema version".into())),
    }
}

/// The tables of `schema`, by name.
fn table_names(db: &Db<'_>, schema: &str) -> Result<Vec<String>, Error> {
    let rows = db.query(
        "SELECT c.relname::TEXT FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY 1",
        &[&schema],
    )?;
    rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
}

fn too_new(ctx: &Context, found: u32) -> StoreError {
    StoreError::SchemaTooNew { path: ctx.name.clone(), found, supported: SCHEMA_VERSION }
}

/// Runs the migrations from `from` up to [`SCHEMA_VERSION`] and records it.
fn migrate(db: &Db<'_>, schema: &str, from: u32) -> Result<(), Error> {
    db.batch(&format!("SET LOCAL search_path TO {schema}"))?;
    for step in &MIGRATIONS[from as usize..] {
        db.batch(step)?;
    }
    slothqueue_core::failpoint::hit("mid_migration"); // tables made, not committed
    db.execute(
        "INSERT INTO meta (name, value) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        &[&VERSION_ROW, &i64::from(SCHEMA_VERSION)],
    )?;
    Ok(())
}

/// Checks a queue of the current version has every table and the id
/// high water: a schema half dropped by hand is refused, not written to.
fn vet(db: &Db<'_>, schema: &str) -> Result<(), Error> {
    let tables = table_names(db, schema)?;
    let missing: Vec<&str> =
        TABLES.iter().copied().filter(|t| !tables.iter().any(|have| have == t)).collect();
    if !missing.is_empty() {
        return Err(Error::Decode(format!("tables missing: {}", missing.join(", "))));
    }
    let sql = format!("SELECT 1 FROM {schema}.meta WHERE name = $1");
    if db.query_opt(&sql, &[&ID_HIGH_WATER])?.is_none() {
        return Err(Error::Decode("its `meta` has no id high water".into()));
    }
    Ok(())
}

/// A hot standby (a replica in recovery) answers every write with "cannot
/// execute INSERT in a read-only transaction", from whichever statement
/// writes first: a writer is refused at open instead, in one line that
/// says what to do ([`StoreError::ReadOnlyStandby`]), before it creates or
/// migrates anything. A store that only looks opens on a standby as on
/// the primary.
fn refuse_a_standby(db: &Db<'_>, ctx: &Context) -> Result<(), StoreError> {
    let row = db.query_opt("SELECT pg_is_in_recovery()", &[]).map_err(|e| ctx.map(e))?;
    let in_recovery = match row {
        Some(row) => row.try_get::<_, bool>(0).map_err(|e| ctx.map(e.into()))?,
        None => false,
    };
    if in_recovery {
        return Err(StoreError::ReadOnlyStandby(ctx.server.clone()));
    }
    Ok(())
}

/// A writing connection to the queue, the schema created or migrated
/// first. Runs on a thread outside any runtime's async context.
pub(crate) fn open(
    rt: &Handle,
    target: &Target,
    options: &PgOptions,
    ctx: &Context,
) -> Result<Conn, StoreError> {
    let conn = connect(rt, &connection_config(target, options, false), options.call_timeout)
        .map_err(|e| ctx.map(e))?;
    let keys = Keys::new(&target.schema);
    let schema = target.schema.as_str();
    let db = Db::on(&conn, rt, true);
    refuse_a_standby(&db, ctx)?;
    let out = db.transaction_with_key(keys.create, &mut |db| match probe(db, schema)? {
        Found::Missing => {
            db.batch(&format!("CREATE SCHEMA {schema}"))?;
            migrate(db, schema, 0)
        }
        Found::Empty => migrate(db, schema, 0),
        Found::Foreign(detail) => Err(Error::Decode(detail)),
        Found::Queue { version } if version > SCHEMA_VERSION => {
            Err(Error::Store(too_new(ctx, version)))
        }
        Found::Queue { version } if version < SCHEMA_VERSION => {
            migrate(db, schema, version)?;
            vet(db, schema)
        }
        Found::Queue { .. } => vet(db, schema),
    });
    out.map_err(|e| ctx.map(e))?;
    Ok(conn)
}

/// A read-only connection to an existing queue: nothing is created; a
/// missing schema is [`StoreError::Io`] of kind `NotFound`, an empty one
/// refused; a queue of an older layout is migrated first by [`open`] (the
/// one write such an open makes), as the other stores do.
pub(crate) fn open_read_only(
    rt: &Handle,
    target: &Target,
    options: &PgOptions,
    ctx: &Context,
) -> Result<Conn, StoreError> {
    let conn = connect(rt, &connection_config(target, options, true), options.call_timeout)
        .map_err(|e| ctx.map(e))?;
    let db = Db::on(&conn, rt, false);
    let found = db.read(|db| probe(db, &target.schema)).map_err(|e| ctx.map(e))?;
    match found {
        Found::Missing => Err(StoreError::Io {
            context: format!("no queue at {}", ctx.name.display()),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        }),
        Found::Empty => Err(error::corrupt(&ctx.name, "the schema is empty: not a queue yet")),
        Found::Foreign(detail) => Err(error::corrupt(&ctx.name, detail)),
        Found::Queue { version } if version > SCHEMA_VERSION => Err(too_new(ctx, version)),
        Found::Queue { version } if version < SCHEMA_VERSION => {
            drop(open(rt, target, options, ctx)?);
            Ok(conn)
        }
        Found::Queue { .. } => {
            db.read(|db| vet(db, &target.schema)).map_err(|e| ctx.map(e))?;
            Ok(conn)
        }
    }
}
