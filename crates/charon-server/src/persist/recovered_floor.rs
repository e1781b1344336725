//! The *recovered floor*: the store's last log index as the first start after a stop found it,
//! kept until the dead-letter archive has decided the replays that stop interrupted
//! (docs/archive.md, "Replay": an INFLIGHT item whose publish has store index `i` is durable
//! iff `i ≤` this floor).
//!
//! Why a file: a crash loses the store's unwritten tail, and the next run hands those indices
//! out again (its topology rewrite at start, new publishes). The run that recovers decides with
//! its own recovered index — unless the archive cannot be opened in that run (PostgreSQL down)
//! and the broker stops again before it could: the run after that recovers a log in which the
//! lost index names some other record. So the floor of the first run after the interrupted one
//! is written (and synced) before that run writes anything, kept by later runs, and removed once
//! the archive has decided ([`clear`]). The file is `<data_dir>/recovered-floor`: the index in
//! decimal ASCII.

use std::io::Write;
use std::path::{Path, PathBuf};

const FILE: &str = "recovered-floor";

fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE)
}

/// The floor for a run whose recovery found `last`: the kept floor if one is (and is not above
/// `last`: a store begun afresh), else `last`, written durably first when it changed.
pub(crate) fn open(data_dir: &Path, last: u64) -> std::io::Result<u64> {
    let p = path(data_dir);
    let kept = match std::fs::read_to_string(&p) {
        Ok(s) => s.trim().parse::<u64>().ok(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let floor = kept.map_or(last, |k| k.min(last));
    if kept != Some(floor) {
        let tmp = data_dir.join(format!("{FILE}.tmp"));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(floor.to_string().as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &p)?;
        sync_dir(data_dir)?;
    }
    Ok(floor)
}

/// Forgets the floor: every replay the floor was kept for is decided. The next start keeps its
/// own recovered index.
pub(crate) fn clear(data_dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path(data_dir)) {
        Ok(()) => sync_dir(data_dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_recovered_index_is_kept_until_cleared() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        assert_eq!(open(dir.path(), 100)?, 100);
        // A later run (the archive never decided): the first floor stays.
        assert_eq!(open(dir.path(), 140)?, 100);
        // A store begun afresh recovers less: the floor follows it down.
        assert_eq!(open(dir.path(), 7)?, 7);
        clear(dir.path())?;
        assert_eq!(open(dir.path(), 140)?, 140);
        clear(dir.path())?;
        clear(dir.path())?;
        Ok(())
    }
}
