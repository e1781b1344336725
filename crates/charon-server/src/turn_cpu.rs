//! Diagnostic: the queue actor's thread CPU per turn, split by phase. Off unless the binary
//! installs a thread-CPU clock ([`install`]; `charon` does when `CHARON_TURN_CPU_US` is set to
//! the threshold in µs above which a turn is logged to stderr). Off, a mark is one atomic load.

use std::cell::RefCell;
use std::sync::OnceLock;

static CLOCK: OnceLock<(fn() -> u64, u64)> = OnceLock::new();

thread_local! {
    static MARKS: RefCell<Vec<(&'static str, u64)>> = const { RefCell::new(Vec::new()) };
}

/// Installs the thread-CPU clock (ns) and the threshold (ns) above which a turn is logged.
pub fn install(clock: fn() -> u64, threshold_ns: u64) {
    let _ = CLOCK.set((clock, threshold_ns));
}

/// A turn starts.
pub(crate) fn start() {
    if let Some((c, _)) = CLOCK.get() {
        let t = c();
        MARKS.with(|m| {
            let mut m = m.borrow_mut();
            m.clear();
            m.push(("", t));
        });
    }
}

/// Phase `name` ended.
pub(crate) fn mark(name: &'static str) {
    if let Some((c, _)) = CLOCK.get() {
        let t = c();
        MARKS.with(|m| m.borrow_mut().push((name, t)));
    }
}

/// The turn ended: logged when over the threshold.
pub(crate) fn finish(what: std::fmt::Arguments<'_>) {
    let Some((c, threshold)) = CLOCK.get() else {
        return;
    };
    let t = c();
    MARKS.with(|m| {
        let m = m.borrow();
        let Some(&(_, t0)) = m.first() else { return };
        if t.saturating_sub(t0) < *threshold {
            return;
        }
        let mut s = String::new();
        let mut prev = t0;
        for &(name, at) in m.iter().skip(1) {
            s.push_str(&format!(" {name}={}", at.saturating_sub(prev) / 1000));
            prev = at;
        }
        eprintln!(
            "TURN_CPU at_us={} total_us={}{s} {what}",
            crate::lateness::now_us(),
            t.saturating_sub(t0) / 1000
        );
    });
}
