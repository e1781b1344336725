//! Shared checks for the archive's tests: query rows in a stable order, and the summary table
//! `dead_letter_groups` against a recount over `dead_letters`.

use charon_archive::sql::{Cell, Conn};

/// The rows `sql` returns, sorted (backends return them in different orders).
pub(crate) fn rows(c: &mut dyn Conn, sql: &str) -> Vec<Vec<Cell>> {
    let mut r = c.query(sql, &[]).expect("query");
    r.sort_by_key(|row| format!("{row:?}"));
    r
}

/// The summary equals a GROUP BY over the records (counts, bounds, bytes), `when` naming the step;
/// grouped by the key the database's schema version has (migration 10 added two columns).
pub(crate) fn check_summary(c: &mut dyn Conn, when: &str) {
    let version = c
        .query("SELECT MAX(version) FROM archive_migrations", &[])
        .expect("version")[0][0]
        .int();
    let cols = if version >= 10 {
        "vhost, queue, original_queue, reason, error_fingerprint, content_type, original_exchange, status"
    } else {
        "vhost, queue, original_queue, reason, error_fingerprint, status"
    };
    let want = rows(
        c,
        &format!(
            "SELECT {cols}, COUNT(*), MIN(created_at), MAX(created_at), CAST(SUM(payload_bytes) AS BIGINT) FROM dead_letters GROUP BY {cols}"
        ),
    );
    let have = rows(
        c,
        &format!("SELECT {cols}, records, oldest, newest, payload_bytes FROM dead_letter_groups"),
    );
    assert_eq!(have, want, "summary after {when}");
}
