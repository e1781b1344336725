//! Which records, audit rows and jobs an API user may see: the vhosts of each audit row (table
//! `dead_letter_audit_vhosts`, migration 2), and the SQL that limits a query to a set of vhosts.
//! The broker decides which vhosts a user may see (RabbitMQ's management rules); this module only
//! applies that set (`None` means every vhost).

use crate::error::ArchiveError;
use crate::sql::{Conn, Param};

/// `col IN (?, …)` for `vhosts` (`1 = 0` when the set is empty) and its parameters.
pub fn vhost_in(col: &str, vhosts: &[String]) -> (String, Vec<Param>) {
    if vhosts.is_empty() {
        return ("1 = 0".into(), Vec::new());
    }
    let marks = vec!["?"; vhosts.len()].join(", ");
    (
        format!("{col} IN ({marks})"),
        vhosts.iter().map(|v| Param::from(v.as_str())).collect(),
    )
}

/// Of `ids`, those of records in `vhosts` (all existing ones when `None`), in the given order.
pub fn visible_ids(
    c: &mut dyn Conn,
    ids: &[i64],
    vhosts: Option<&[String]>,
) -> Result<Vec<i64>, ArchiveError> {
    let Some(vs) = vhosts else {
        return Ok(ids.to_vec());
    };
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let (cond, mut p) = vhost_in("vhost", vs);
    let marks = vec!["?"; ids.len()].join(", ");
    let mut params: Vec<Param> = ids.iter().map(|i| Param::from(*i)).collect();
    params.append(&mut p);
    let found: std::collections::HashSet<i64> = c
        .query(
            &format!("SELECT id FROM dead_letters WHERE id IN ({marks}) AND {cond}"),
            &params,
        )?
        .iter()
        .map(|r| r[0].int())
        .collect();
    Ok(ids.iter().copied().filter(|i| found.contains(i)).collect())
}

/// Records the vhosts audit row `audit_id` touched: those of `cond` over `dead_letters`, or, for a
/// job's row, those of the job's records.
pub fn record_audit_vhosts(
    c: &mut dyn Conn,
    audit_id: i64,
    cond: &str,
    params: &[Param],
    job: Option<i64>,
) -> Result<(), ArchiveError> {
    match job {
        Some(job) => c.exec(
            "INSERT INTO dead_letter_audit_vhosts (audit_id, vhost) SELECT DISTINCT CAST(? AS BIGINT), d.vhost FROM replay_items i JOIN dead_letters d ON d.id = i.record_id WHERE i.job_id = ?",
            &[audit_id.into(), job.into()],
        )?,
        None => {
            let mut p = vec![Param::from(audit_id)];
            p.extend(params.iter().cloned());
            c.exec(
                &format!(
                    "INSERT INTO dead_letter_audit_vhosts (audit_id, vhost) SELECT DISTINCT CAST(? AS BIGINT), vhost FROM dead_letters WHERE {cond}"
                ),
                &p,
            )?
        }
    };
    Ok(())
}

/// The condition on `dead_letter_audit` rows (alias-free, column `id`, `actor`) a user sees: their
/// own actions, and rows whose every touched vhost is in `vhosts` (and that touched at least one).
pub fn audit_visible(user: &str, vhosts: &[String]) -> (String, Vec<Param>) {
    let (inside, mut p) = vhost_in("v.vhost", vhosts);
    let mut params = vec![Param::from(user)];
    params.append(&mut p);
    (
        format!(
            "(actor = ? OR (EXISTS (SELECT 1 FROM dead_letter_audit_vhosts v WHERE v.audit_id = dead_letter_audit.id) \
             AND NOT EXISTS (SELECT 1 FROM dead_letter_audit_vhosts v WHERE v.audit_id = dead_letter_audit.id AND NOT ({inside}))))"
        ),
        params,
    )
}

/// Whether a user limited to `vhosts` sees replay job `job` (created by them, or its records all
/// in `vhosts`, as its replay audit row recorded them).
pub fn job_visible(
    c: &mut dyn Conn,
    job: i64,
    user: &str,
    vhosts: Option<&[String]>,
) -> Result<bool, ArchiveError> {
    let Some(vs) = vhosts else {
        return Ok(true);
    };
    let (cond, mut p) = audit_visible(user, vs);
    let mut params = vec![Param::from(job)];
    params.append(&mut p);
    Ok(!c
        .query(
            &format!(
                "SELECT 1 FROM dead_letter_audit WHERE job_id = ? AND action = 'replay' AND {cond}"
            ),
            &params,
        )?
        .is_empty())
}
