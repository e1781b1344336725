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

/// A user's own `INSERT … SELECT` (one row for every record whose id is 5 modulo 29, headers
/// `headers_json`, error `user row: cause 5`), as the docs allow: the copy must follow it.
pub(crate) fn user_insert(c: &mut dyn Conn, headers_json: &str) {
    let empty = if c.dialect() == charon_archive::sql::Dialect::Sqlite {
        "x''"
    } else {
        "''::bytea"
    };
    c.exec(
        &format!(
            "INSERT INTO dead_letters (stable_key, vhost, queue, original_queue, original_exchange, \
             original_routing_keys, reason, death_count, message_id, message_key, properties, headers, \
             amqp_properties, payload, payload_bytes, error_message, status, created_at, updated_at) \
             SELECT 'u:' || id, '/', 'dlq-1', NULL, NULL, '[]', NULL, 1, NULL, NULL, '{{}}', '{headers_json}', {empty}, {empty}, 0, \
             'user row: cause 5', 'PENDING', created_at + 1, created_at + 1 FROM dead_letters WHERE id % 29 = 5"
        ),
        &[],
    )
    .expect("user insert");
}

/// The changes the walking tests make (`driving_set`, `total_cap`, `newest_groups`,
/// `keyed_candidates`): every record whose id is 1 modulo `skip_every` skipped (note `note`), every
/// one 3 modulo 17 deleted, a user's `UPDATE dead_letters SET {user_set}` of every one 5 modulo
/// 13, and a user's INSERT ([`user_insert`], headers `{"x-h":"v0"}`).
#[allow(dead_code)]
pub(crate) fn changes(c: &mut dyn Conn, skip_every: i64, note: &str, user_set: &str) {
    use charon_archive::ops::{self, Selection};
    let ids = |c: &mut dyn Conn, cond: &str| -> Vec<i64> {
        c.query(&format!("SELECT id FROM dead_letters WHERE {cond}"), &[])
            .expect("ids")
            .iter()
            .map(|r| r[0].int())
            .collect()
    };
    let skip = ids(c, &format!("id % {skip_every} = 1"));
    ops::skip(c, &Selection::Ids(skip), "carol", note).expect("skip");
    let del = ids(c, "id % 17 = 3");
    ops::delete(c, &Selection::Ids(del), "carol", None).expect("delete");
    c.exec(
        &format!("UPDATE dead_letters SET {user_set} WHERE id % 13 = 5"),
        &[],
    )
    .expect("user update");
    user_insert(c, r#"{"x-h":"v0"}"#);
}

/// The search index (migration 7) of records `id <= upto` as the indexer fills it, in SQL (the
/// watermark not moved).
pub(crate) fn search_fill_sql(d: charon_archive::sql::Dialect, upto: i64) -> String {
    match d {
        charon_archive::sql::Dialect::Postgres => format!(
            "INSERT INTO dead_letter_search (id, error, body, headers) \
             SELECT id, concat_ws(E'\\n', error_message, error_stacktrace), convert_from(payload, 'UTF8'), '' \
             FROM dead_letters WHERE id <= {upto}"
        ),
        charon_archive::sql::Dialect::Sqlite => format!(
            "INSERT INTO dead_letter_search_error (rowid, text) SELECT id, \
             COALESCE(error_message, '') || CASE WHEN error_message IS NOT NULL AND error_stacktrace IS NOT NULL THEN char(10) ELSE '' END || COALESCE(error_stacktrace, '') \
             FROM dead_letters WHERE id <= {upto}; \
             INSERT INTO dead_letter_search_body (rowid, text) SELECT id, CAST(payload AS TEXT) FROM dead_letters WHERE id <= {upto}"
        ),
    }
}

/// The header index table's primary key definition (PostgreSQL's `pg_indexes.indexdef`).
#[allow(dead_code)] // only the header tests (header_columns, header_groups) read it
pub(crate) fn header_pkey_def(c: &mut dyn Conn) -> String {
    let r = c
        .query(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'dead_letter_search_header_pkey'",
            &[],
        )
        .expect("pkey");
    r[0][0].opt_text().unwrap_or_default()
}

/// The upgrade applied migration `version` (its row in `archive_migrations`).
#[allow(dead_code)] // only the upgrade tests (header_columns, header_groups, header_key_columns)
pub(crate) fn assert_applied(c: &mut dyn Conn, version: i64) {
    let v = c
        .query(
            "SELECT COUNT(*) FROM archive_migrations WHERE version = ?",
            &[version.into()],
        )
        .expect("version")[0][0]
        .int();
    assert_eq!(v, 1, "version {version} applied");
}

/// PostgreSQL: the header table a migration copied is vacuumed by the opener (its index-only
/// scans need no heap right after the upgrade). Nothing on SQLite.
#[allow(dead_code)] // only the header tables' upgrade tests
pub(crate) fn assert_header_vacuumed(c: &mut dyn Conn) {
    if c.dialect() != charon_archive::sql::Dialect::Postgres {
        return;
    }
    let vis = c
        .query(
            "SELECT relallvisible FROM pg_class WHERE relname = 'dead_letter_search_header'",
            &[],
        )
        .expect("relallvisible")[0][0]
        .int();
    assert!(
        vis > 0,
        "the copied header table has a visibility map after the upgrade"
    );
}
