//! The embedded cluster under test, driven with a clock of the test's own: each pass moves
//! it a second forward, so that restart back-offs pass quickly. Shared by the end-to-end
//! tests of the cluster, containers and Python environments.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use corral_local::cluster::{JobState, TickReport};
use corral_local::config::{ClusterFileConfig, PortRange};
use corral_local::{Cluster, ClusterConfig};
use jiff::Timestamp;

/// How long `until` waits at most, and how long it pauses between passes.
#[derive(Clone, Copy)]
pub struct Waits {
    pub deadline: Duration,
    pub pause: Duration,
}

pub struct Harness {
    dir: tempfile::TempDir,
    pub config: ClusterConfig,
    pub now: Timestamp,
    waits: Waits,
}

impl Harness {
    /// A cluster in a temporary directory with its own range of 50 ports from `ports`
    /// (tests run in parallel), a 2 s grace period, and `extra` settings (`corral.yaml`).
    pub fn new(waits: Waits, ports: u16, extra: &str) -> (Harness, Cluster) {
        let dir = super::reachable_tempdir();
        let text = format!(
            "kind: CorralConfig\nports: {{min: {ports}, max: {}}}\ngracePeriodSeconds: 2\n{extra}",
            ports + 49
        );
        let mut config = ClusterConfig::new(dir.path().join("data"));
        config.file = ClusterFileConfig::parse(&text).expect("config");
        assert_eq!(
            config.file.settings.ports,
            PortRange {
                min: ports,
                max: ports + 49
            }
        );
        config.shim = Some(super::shim());
        let now = Timestamp::from_second(1_800_000_000).expect("time");
        let h = Harness {
            dir,
            config,
            now,
            waits,
        };
        let cluster = h.open();
        (h, cluster)
    }

    /// Opens the cluster (again, after a simulated crash).
    pub fn open(&self) -> Cluster {
        self.open_with_warnings().0
    }

    /// Opens the cluster, with what it warned about (see [`retry_while_in_use`]).
    pub fn open_with_warnings(&self) -> (Cluster, Vec<String>) {
        retry_while_in_use(|| Cluster::open(self.config.clone(), self.now))
    }

    /// A path in the test's temporary directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A path replicas may create (`<tmp>/scratch`, sticky and open to all, as /tmp): as
    /// root, replicas run as their namespace's uid and cannot write in the test's directory.
    pub fn scratch(&self, name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.dir.path().join("scratch");
        std::fs::create_dir_all(&dir).expect("scratch dir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))
            .expect("chmod scratch");
        dir.join(name)
    }

    /// Where the replicas' directories are.
    pub fn run_dir(&self) -> PathBuf {
        self.config.data_dir.join("replicas")
    }

    /// One pass, a second later.
    pub fn tick(&mut self, c: &mut Cluster) -> TickReport {
        self.now = self
            .now
            .checked_add(jiff::SignedDuration::from_secs(1))
            .expect("time");
        c.tick(self.now).expect("tick")
    }

    /// Passes until `cond` holds; panics after the deadline. Returns every report.
    pub fn until(
        &mut self,
        c: &mut Cluster,
        what: &str,
        mut cond: impl FnMut(&Cluster) -> bool,
    ) -> Vec<TickReport> {
        let deadline = Instant::now() + self.waits.deadline;
        let mut reports = Vec::new();
        loop {
            reports.push(self.tick(c));
            if cond(c) {
                return reports;
            }
            if Instant::now() > deadline {
                let jobs = c.list(None).expect("list");
                panic!("timed out waiting for {what}; jobs: {jobs:#?}; last: {reports:#?}");
            }
            std::thread::sleep(self.waits.pause);
        }
    }
}

/// The state of a job of the `default` namespace, if it exists.
pub fn state(c: &Cluster, name: &str) -> Option<JobState> {
    c.list(Some("default"))
        .expect("list")
        .into_iter()
        .find(|j| j.name == name)
        .map(|j| j.state)
}

/// The log of a replica of a job of the `default` namespace.
pub fn log_of(c: &Cluster, job: &str, replica: &str) -> String {
    let path = c
        .log_path("default", job, replica)
        .unwrap_or_else(|| panic!("no log of {replica}"));
    std::fs::read_to_string(&path).unwrap_or_default()
}

/// Opens what a dropped cluster held (its cluster or store). Another test of the same
/// binary that forks just then holds a copy of the data directory's lock until its child
/// execs: a refusal for "in use" is retried briefly.
pub fn retry_while_in_use<T, E: std::fmt::Display>(mut open: impl FnMut() -> Result<T, E>) -> T {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match open() {
            Ok(opened) => return opened,
            Err(e) if e.to_string().contains("is in use by") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("open: {e}"),
        }
    }
}
