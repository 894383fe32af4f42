//! The binaries under measurement, and rotor-drainer as a child process (rotor-e2e's
//! [`Background`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use rotor_e2e::{Background, binary_dir, tail};

use crate::SETTLE_FLAG;
use crate::sim::BenchSim;

/// rotor-sim and rotor-drainer, built next to this example (`target/<profile>/`).
pub struct Bins {
    pub dir: PathBuf,
    pub drainer: PathBuf,
}

impl Bins {
    pub fn locate() -> anyhow::Result<Bins> {
        let dir = binary_dir();
        let release = dir.file_name().is_some_and(|n| n == "release");
        let find = |name: &str| -> anyhow::Result<PathBuf> {
            let p = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
            ensure!(
                p.is_file(),
                "{name} not found at {}: build the binaries first, with the same profile as this benchmark: \
cargo build {}-p rotor-sim -p rotor-drainer --bins",
                p.display(),
                if release { "--release " } else { "" }
            );
            Ok(p)
        };
        // rotor-sim is started through rotor-e2e's SimProcess, which finds it in the same place.
        find("rotor-sim")?;
        let drainer = find("rotor-drainer")?;
        if !release {
            eprintln!(
                "drain_bench: warning: not a release build; the figures are only meaningful with --release"
            );
        }
        Ok(Bins { dir, drainer })
    }
}

/// A `rotor-drainer` child with its stderr in a file, killed on drop.
pub struct Drainer {
    pub process: Background,
}

impl Drainer {
    /// `rotor-drainer run` against `sim` with its Lease in `lease_namespace`, an admin server on
    /// a free port, `flags` and the benchmark's `--settle`; its log is `<dir>/rotor-drainer.log`.
    pub fn run(
        bin: &Path,
        sim: &BenchSim,
        dir: &Path,
        lease_namespace: &str,
        flags: &[&str],
    ) -> anyhow::Result<Drainer> {
        let mut cmd = Command::new(bin);
        cmd.arg("--kubeconfig")
            .arg(sim.kubeconfig())
            .args(["run", "--admin-listen", "127.0.0.1:0"])
            .args(["--lease-namespace", lease_namespace])
            .args(flags)
            .args(["--settle", SETTLE_FLAG])
            .env_remove("KUBECONFIG");
        let log = dir.join("rotor-drainer.log");
        Ok(Drainer {
            process: Background::spawn("rotor-drainer", &mut cmd, log),
        })
    }

    pub fn exited(&mut self) -> Option<String> {
        self.process.exit_status()
    }

    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        tail(self.log_path(), 30)
    }

    /// Waits until the drainer has listed the cluster and stands by: it contends for the lease
    /// only once a node needs it, so that is when it is ready for the taints.
    pub fn wait_standing_by(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.log_count("standing by") > 0 {
                return Ok(());
            }
            if let Some(s) = self.exited() {
                bail!(
                    "rotor-drainer exited ({s}) before standing by; its log {}:\n{}",
                    self.log_path().display(),
                    self.log_tail()
                );
            }
            ensure!(
                Instant::now() < deadline,
                "rotor-drainer did not stand by within {} s; its log {}:\n{}",
                timeout.as_secs(),
                self.log_path().display(),
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// How many lines of its log contain `needle`.
    pub fn log_count(&self, needle: &str) -> usize {
        self.process
            .log()
            .lines()
            .filter(|l| l.contains(needle))
            .count()
    }
}
