//! One step of a replay job for the archive's tests: a job over `f`'s records created as
//! "carol", its next `n` records finished (every `fail_every`-th, counting from 1, FAILED with
//! "no route", the rest REPLAYED), then the job cancelled.

use charon_archive::filter::Filter;
use charon_archive::jobs;
use charon_archive::ops::Selection;
use charon_archive::sql::Conn;
use serde_json::json;

/// Runs the step; returns how many records it finished.
pub(crate) fn replay_step(c: &mut dyn Conn, f: Filter, n: u64, fail_every: usize) -> usize {
    let (job, total) =
        jobs::create(c, &Selection::Filter(f), &json!({"note": "again"}), "carol").expect("job");
    assert!(total > 0);
    let spec = jobs::running(c)
        .expect("running")
        .into_iter()
        .find(|j| j.id == job)
        .expect("job running");
    let next = jobs::next(c, job, n).expect("next");
    let results: Vec<(i64, Result<(), String>)> = next
        .iter()
        .enumerate()
        .map(|(k, r)| {
            (
                r.id,
                if k % fail_every == fail_every - 1 {
                    Err("no route".into())
                } else {
                    Ok(())
                },
            )
        })
        .collect();
    jobs::finish(c, &spec, &results).expect("finish");
    jobs::cancel(c, job, "carol").expect("cancel");
    next.len()
}
