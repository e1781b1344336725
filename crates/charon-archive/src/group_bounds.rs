//! Migration 21 (PostgreSQL; SQLite: `SELECT 1`), docs/archive.md "Migration 21": the group
//! summary's removed bounds looked up through the group summary per second
//! (`dead_letter_group_seconds`, migration 19) instead of the group key's expression index
//! `dead_letters_group_key`, which the migration drops. That index was read only by the
//! summary's delete and update triggers (a removed record held its group's oldest or newest
//! time), and every archived record paid an entry in it (17,700 instructions of a COPY row,
//! 7.3 %, docs/archive.md "Twenty-third round").
//!
//! A group's new oldest time is then found in two seeks: the group's first second in
//! `dead_letter_group_seconds` (new index `(group_key, second)`), and from that second's first
//! millisecond the first record of the group in `dead_letters_created` order. Exact: the table
//! counts every record of every group per second in the same transaction, and its statement
//! triggers (`dead_letter_group_seconds_*`) fire before the summary's (`dead_letter_groups_*`:
//! PostgreSQL fires a relation's triggers of one event in name order), so the table already
//! reflects the statement's removals: the group has no record before its first second, and at
//! least one in it. The walk of `dead_letters_created` reads the records of that second up to
//! the group's first (other groups' records of the second at most). The newest bound is the
//! mirror image.

use crate::sql::Dialect;

/// The migration's version.
pub const VERSION: i64 = 21;

/// The records of summary row `g`'s group among `dead_letters AS x` (migration 10's key: `IS
/// NOT DISTINCT FROM` for the columns that may be NULL).
fn same_group() -> String {
    let mut c = String::from("x.vhost = g.vhost AND x.queue = g.queue");
    for col in [
        "original_queue",
        "reason",
        "error_fingerprint",
        "content_type",
        "original_exchange",
    ] {
        c.push_str(&format!(" AND x.{col} IS NOT DISTINCT FROM g.{col}"));
    }
    c.push_str(" AND x.status = g.status");
    c
}

/// The new oldest (`newest`: false) or newest time of summary row `g`'s group, a scalar
/// subquery for the summary's remove triggers (`crate::summary::Bounds::Seconds`).
pub(crate) fn bound(newest: bool) -> String {
    walk_bound(newest, false)
}

/// [`bound`] (`own`: false) or [`bound_from`] (`own`: true): the walk of `dead_letters_created`
/// from the group's edge second, or from the later of it and the group's own bound.
fn walk_bound(newest: bool, own: bool) -> String {
    let (cmp, edge, dir, keep, mine) = if newest {
        ("<=", "s.second * 1000 + 999", "DESC", "LEAST", "g.newest")
    } else {
        (">=", "s.second * 1000", "ASC", "GREATEST", "g.oldest")
    };
    let second = format!(
        "(SELECT {edge} FROM dead_letter_group_seconds AS s WHERE s.group_key = g.group_key AND s.records > 0 \
         ORDER BY s.second {dir} LIMIT 1)"
    );
    let from = if own {
        format!("{keep}({second}, {mine})")
    } else {
        second
    };
    format!(
        "(SELECT x.created_at FROM dead_letters AS x WHERE x.created_at {cmp} {from} AND {same} \
         ORDER BY x.created_at {dir} LIMIT 1)",
        same = same_group(),
    )
}

/// Migration 30's bound (stop 47): [`bound`] whose walk starts at the later of the group's first
/// second and its oldest time before the statement (`g.oldest`; for the newest bound the earlier
/// of its last second's end and `g.newest`). The group's records before the statement all lie at
/// or after `g.oldest`, so its remaining ones do; a record the statement brought into the group
/// earlier than that is the summary's add step's (`LEAST(oldest, …)`, which runs after the
/// removal in the same trigger). The walk then passes the records of this statement's removals
/// and other groups' records among them, not every record of the group's first second that left
/// it before: a replay job moving a group's oldest records out 500 at a time, within a second
/// that held 20,000 of them, walked over all those moved before at each step (PostgreSQL: 263 ms
/// a statement of 500, most of it in this walk; docs/archive.md "Migration 30").
pub(crate) fn bound_from(newest: bool) -> String {
    walk_bound(newest, true)
}

/// Migration 30's version.
pub const VERSION_FROM: i64 = 30;

/// Migration 30 (PostgreSQL; SQLite `SELECT 1`): the summary's delete and update trigger
/// functions with [`bound_from`].
pub fn v30(d: Dialect) -> String {
    if d == Dialect::Sqlite {
        return "SELECT 1".into();
    }
    let (del, upd) = crate::summary::postgres_remove_bodies(
        crate::summary::Keys::V10,
        crate::summary::Bounds::SecondsFrom,
    );
    format!(
        "CREATE OR REPLACE FUNCTION dead_letter_groups_delete() RETURNS trigger LANGUAGE plpgsql AS $$ {del} $$;
CREATE OR REPLACE FUNCTION dead_letter_groups_update() RETURNS trigger LANGUAGE plpgsql AS $$ {upd} $$;"
    )
}

/// Migration 21 (see the module docs).
pub fn v21(d: Dialect) -> String {
    if d == Dialect::Sqlite {
        return "SELECT 1".into();
    }
    let (del, upd) = crate::summary::postgres_remove_bodies(
        crate::summary::Keys::V10,
        crate::summary::Bounds::Seconds,
    );
    format!(
        "CREATE INDEX dead_letter_group_seconds_group ON dead_letter_group_seconds (group_key, second);
CREATE OR REPLACE FUNCTION dead_letter_groups_delete() RETURNS trigger LANGUAGE plpgsql AS $$ {del} $$;
CREATE OR REPLACE FUNCTION dead_letter_groups_update() RETURNS trigger LANGUAGE plpgsql AS $$ {upd} $$;
DROP INDEX dead_letters_group_key;"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_seek_the_groups_edge_second_and_walk_from_it() {
        let lo = bound(false);
        assert!(lo.contains("x.created_at >= (SELECT s.second * 1000 FROM"));
        assert!(lo.contains("ORDER BY s.second ASC LIMIT 1"));
        assert!(lo.ends_with("ORDER BY x.created_at ASC LIMIT 1)"));
        let hi = bound(true);
        assert!(hi.contains("x.created_at <= (SELECT s.second * 1000 + 999 FROM"));
        assert!(hi.ends_with("ORDER BY x.created_at DESC LIMIT 1)"));
        let sql = v21(Dialect::Postgres);
        assert!(sql.contains("DROP INDEX dead_letters_group_key"));
        assert!(sql.contains("ON dead_letter_group_seconds (group_key, second)"));
        assert!(sql.contains(&bound(false)) && sql.contains(&bound(true)));
        assert_eq!(v21(Dialect::Sqlite), "SELECT 1");
        let from = bound_from(false);
        assert!(from.contains("x.created_at >= GREATEST((SELECT s.second * 1000 FROM"));
        assert!(from.contains("LIMIT 1), g.oldest)"));
        assert!(
            bound_from(true).contains("x.created_at <= LEAST((SELECT s.second * 1000 + 999 FROM")
        );
        let sql = v30(Dialect::Postgres);
        assert!(sql.contains(&bound_from(false)) && sql.contains(&bound_from(true)));
        assert!(!sql.contains(&bound(false)));
        assert_eq!(v30(Dialect::Sqlite), "SELECT 1");
    }
}
