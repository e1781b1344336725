//! A private PostgreSQL cluster for tests: initdb + pg_ctl in a temporary directory on a free
//! port, run as the `postgres` user when the tests run as root. `None` (and a loud message) when
//! PostgreSQL is not installed (scripts/test.sh installs Debian's `postgresql`).

use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) struct PgCluster {
    dir: PathBuf,
    bin: PathBuf,
    pub(crate) url: String,
    as_postgres: bool,
}

fn find_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(54329)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl PgCluster {
    fn run(&self, args: &[&str]) -> bool {
        let cmd = args.join(" ");
        let status = if self.as_postgres {
            Command::new("runuser")
                .args(["-u", "postgres", "--", "sh", "-c", &cmd])
                .status()
        } else {
            Command::new("sh").args(["-c", &cmd]).status()
        };
        status.map(|s| s.success()).unwrap_or(false)
    }

    pub(crate) fn start() -> Option<PgCluster> {
        let Some(bin) = find_bin() else {
            eprintln!(
                "\n*** SKIPPING PostgreSQL tests: no /usr/lib/postgresql/*/bin/initdb (install Debian's postgresql; scripts/test.sh does) ***\n"
            );
            return None;
        };
        let as_postgres = is_root();
        let dir =
            std::env::temp_dir().join(format!("charon-pg-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).ok()?;
        if as_postgres {
            let _ = Command::new("chown")
                .args(["-R", "postgres:postgres", &dir.to_string_lossy()])
                .status();
        }
        let port = free_port();
        let c = PgCluster {
            url: format!("postgresql://postgres@127.0.0.1:{port}/postgres"),
            dir,
            bin,
            as_postgres,
        };
        let data = c.dir.join("data");
        let b = |n: &str| c.bin.join(n).to_string_lossy().into_owned();
        let d = data.to_string_lossy().into_owned();
        if !c.run(&[
            &b("initdb"),
            "-D",
            &d,
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            ">/dev/null",
        ]) {
            eprintln!("\n*** SKIPPING PostgreSQL tests: initdb failed ***\n");
            return None;
        }
        let opts = format!(
            "\"-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off\"",
            c.dir.display()
        );
        let log = c.dir.join("log").to_string_lossy().into_owned();
        if !c.run(&[
            &b("pg_ctl"),
            "-D",
            &d,
            "-o",
            &opts,
            "-l",
            &log,
            "-w",
            "-t",
            "120",
            "start",
            ">/dev/null",
        ]) {
            eprintln!("\n*** SKIPPING PostgreSQL tests: pg_ctl start failed ***\n");
            return None;
        }
        Some(c)
    }

    #[allow(dead_code)]
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let d = self.dir.join("data").to_string_lossy().into_owned();
        let pg_ctl = self.bin.join("pg_ctl").to_string_lossy().into_owned();
        self.run(&[&pg_ctl, "-D", &d, "-m", "immediate", "stop", ">/dev/null"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
