//! A list checked against the plain SQL: the filter's rows in the API's order, cut into pages,
//! equal `ops::list`'s pages and its `total` (the tests of the paths that answer lists without
//! the plain query: range counts, sparse sorts, the status index).

use charon_archive::filter::{Filter, order_by};
use charon_archive::ops;
use charon_archive::sql::{Conn, Param};

/// The first column of `sql`'s rows, as ids.
pub(crate) fn ids(c: &mut dyn Conn, sql: &str, p: &[Param]) -> Vec<i64> {
    c.query(sql, p)
        .expect("ids")
        .iter()
        .map(|r| r[0].int())
        .collect()
}

/// Page `page` (1-based) of `size` ids of `all`, the plain query's ids in the list's order.
pub(crate) fn page_of(all: &[i64], page: u64, size: u64) -> Vec<i64> {
    all.iter()
        .copied()
        .skip((page - 1) as usize * size as usize)
        .take(size as usize)
        .collect()
}

/// `ops::list(f, sort)`'s total and pages `pages` of `size` equal the plain sorted query's;
/// `what` names the case in a failure.
pub(crate) fn assert_pages(
    c: &mut dyn Conn,
    f: &Filter,
    sort: Option<&str>,
    pages: &[u64],
    size: u64,
    what: &str,
) {
    let (cond, p) = f.to_sql(c.dialect()).expect("cond");
    let order = order_by(sort).expect("order");
    let all = ids(
        c,
        &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order}"),
        &p,
    );
    for &page in pages {
        let (recs, total) = ops::list(c, f, sort, page, size).expect("list");
        assert_eq!(total, all.len() as i64, "total {what}");
        let have: Vec<i64> = recs.iter().map(|r| r.id).collect();
        assert_eq!(
            have,
            page_of(&all, page, size),
            "page {page} {sort:?} {what}"
        );
    }
}
