//! A vhost limit that leaves out no match (branch `k9b`, docs/archive.md "Twenty-ninth round
//! (branch `k9b`)").
//!
//! A `management` user sees only the records of its vhosts: its filter carries `vhosts`, written
//! `vhost IN (…)`. No index orders a key term's records by id with their vhost, so the limit is
//! checked on each record (SQLite: `original_queue=orders-7&page=500&sort=id` read 50,000
//! records, 58 ms over 1,000,000, where an administrator's page came from the
//! `(original_queue, status, id)` index alone in 8 ms), and several plans (`Filter::error_only`,
//! `header_only`) answer only filters without a limit.
//!
//! **The rule**: the summary (`dead_letter_groups`, kept exact by triggers in every writing
//! transaction) counts the records of the filter's key terms (`summary::KEY_COLUMNS`) with and
//! without the limit. When the two counts are equal, no record matching those terms lies outside
//! the user's vhosts, so neither does any match of the whole filter (its other terms only narrow
//! it), and the filter without the limit selects exactly the same records: the list is answered
//! by the unlimited filter's plans. Archives often have one vhost, or a user sees them all.
//!
//! **One snapshot.** Between the summary's counts and the page's statements a record of another
//! vhost could be archived; listed under the unlimited filter it would show the user a record it
//! may not see. So [`read`] runs inside the list's one read snapshot (`sql::read_snapshot`,
//! `ops::list_capped`), where the counts and the records agree.

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::sql::Conn;

/// Whether `f` has a vhost limit that the summary shows leaves out none of its key terms'
/// records (see the module docs).
pub fn leaves_none_out(c: &mut dyn Conn, f: &Filter) -> Result<bool, ArchiveError> {
    if f.vhosts.is_none() {
        return Ok(false);
    }
    let mut keys = f.clone();
    keys.terms
        .retain(|k, _| crate::summary::KEY_COLUMNS.contains(&k.as_str()));
    let (limited, lp) = keys.to_sql(c.dialect())?;
    let (all, ap) = keys.within(None).to_sql(c.dialect())?;
    // The summary's own columns: no `+vhost` (SQLite's hint for the records' table).
    let limited = limited.replace("+vhost", "vhost");
    Ok(crate::summary::records(c, &limited, &lp)? == crate::summary::records(c, &all, &ap)?)
}

/// `read(c, f)`, with `f`'s vhost limit dropped when [`leaves_none_out`] says it leaves out no
/// match. The caller holds one read snapshot over both (module docs).
pub fn read<T>(
    c: &mut dyn Conn,
    f: &Filter,
    read: impl FnOnce(&mut dyn Conn, &Filter) -> Result<T, ArchiveError>,
) -> Result<T, ArchiveError> {
    if f.vhosts.is_some() && leaves_none_out(c, f)? {
        read(c, &f.clone().within(None))
    } else {
        read(c, f)
    }
}
