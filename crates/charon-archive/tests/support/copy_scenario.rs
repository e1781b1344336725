//! The scenario the copy tests share (`error_text.rs`: migration 12; `key_copy.rs`: migration 13):
//! an archive just upgraded from the version before, checked right after the upgrade, once the
//! indexer caught up, after a burst of records above the watermark, after the test's changes, and
//! caught up again; on SQLite and on a private PostgreSQL cluster. Needs the test to include
//! `support/indexer_wait.rs` as `indexer_wait` and `support/pg_cluster.rs` as `pg_cluster`.

use charon_archive::Archive;
use charon_archive::sql::Conn;

/// What a test plugs in: its check (with the step's name), its burst and its changes.
pub(crate) struct Steps<'a> {
    pub check: &'a dyn Fn(&mut dyn Conn, &str),
    pub burst: &'a dyn Fn(&mut dyn Conn),
    pub change: &'a dyn Fn(&mut dyn Conn),
}

/// Runs the scenario on `a` (already upgraded).
pub(crate) fn run(a: &Archive, s: &Steps<'_>) {
    a.with(|c| (s.check)(c, "after the upgrade"));
    crate::indexer_wait::wait_caught_up(a);
    a.with(|c| {
        (s.check)(c, "caught up");
        (s.burst)(c);
        (s.check)(c, "a burst above the watermark");
    });
    crate::indexer_wait::wait_caught_up(a);
    a.with(|c| {
        (s.change)(c);
        (s.check)(c, "after changes");
    });
    crate::indexer_wait::wait_caught_up(a);
    a.with(|c| (s.check)(c, "after changes, caught up"));
}

/// `upgrade(url, old connection)` then [`run`] on a fresh SQLite file.
pub(crate) fn on_sqlite(upgrade: impl FnOnce(&str, Box<dyn Conn>) -> Archive, s: &Steps<'_>) {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("archive.db");
    let old = charon_archive::sqlite::Sqlite::open(&path).expect("open");
    let a = upgrade(&format!("sqlite://{}", path.display()), Box::new(old));
    run(&a, s);
}

/// The same on a private PostgreSQL cluster; returns it (to look further) once done.
pub(crate) fn on_postgres(
    upgrade: impl FnOnce(&str, Box<dyn Conn>) -> Archive,
    s: &Steps<'_>,
) -> Option<crate::pg_cluster::PgCluster> {
    let pg = crate::pg_cluster::PgCluster::start()?;
    let old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    let a = upgrade(&pg.url, Box::new(old));
    run(&a, s);
    Some(pg)
}
