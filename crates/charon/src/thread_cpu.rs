//! The calling thread's CPU time, for the queue actor's per-turn diagnostic
//! (`charon_server::turn_cpu`), installed when `CHARON_TURN_CPU_US` is set.

/// Installs the clock if `CHARON_TURN_CPU_US` (threshold, µs) is set.
pub(crate) fn init() {
    if let Some(us) = std::env::var("CHARON_TURN_CPU_US")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        charon_server::turn_cpu::install(now_ns, us.saturating_mul(1000));
    }
}

/// `CLOCK_THREAD_CPUTIME_ID` in ns.
#[allow(unsafe_code)]
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}
