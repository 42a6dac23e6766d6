//! The real server on a free port with a temporary data directory, as the CLI's end-to-end
//! and browser tests start it.

use std::path::PathBuf;
use std::time::Duration;

use corral_local::{ClusterConfig, ClusterFileConfig};
use corral_server::api_client::Client;
use corral_server::{Server, ServerOptions};
use libtest_mimic::Failed;

/// A server on a free port with a temporary data directory (mode `0711`: as root, replicas
/// run as their namespaces' uids and pass through it).
pub struct TestCluster {
    pub server: Server,
    /// The temporary directory; the data directory is its `data`.
    pub dir: tempfile::TempDir,
}

/// A range of replica ports of its own for each cluster of a test binary that sets none:
/// the tests of one binary run at once, and two clusters handing out the same free port at
/// the same moment would leave one replica unable to bind it.
fn own_ports(file: &mut ClusterFileConfig) {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    if file.settings.ports != corral_local::config::DEFAULT_PORT_RANGE {
        return;
    }
    // 20000-31999: below Linux's ephemeral ports (32768-60999), 150 ranges of 80.
    let n = NEXT.fetch_add(1, Ordering::Relaxed) % 150;
    let min = 20000 + n * 80;
    file.settings.ports = corral_local::config::PortRange { min, max: min + 79 };
}

impl TestCluster {
    pub fn start(config_yaml: &str) -> Result<TestCluster, Failed> {
        let dir = tempfile::tempdir()?;
        // As root, replicas run as their namespaces' uids and pass through it.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
        }
        let mut cluster = ClusterConfig::new(dir.path().join("data"));
        cluster.file = ClusterFileConfig::parse(config_yaml).map_err(|e| e.to_string())?;
        own_ports(&mut cluster.file);
        let mut options = ServerOptions::new(cluster);
        options.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        options.tick_interval = Duration::from_millis(100);
        let server = Server::start(options)?;
        Ok(TestCluster { server, dir })
    }

    /// The same, serving HTTPS with a self-signed certificate made in its data directory,
    /// and that certificate's fingerprint.
    pub fn start_https(config_yaml: &str) -> Result<(TestCluster, String), Failed> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir()?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
        let data = dir.path().join("data");
        std::fs::create_dir(&data)?;
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o711))?;
        let (files, _) = corral_server::tls::self_signed(
            &data,
            &corral_server::tls::names_for([127, 0, 0, 1].into()),
        )?;
        let fingerprint = corral_server::tls::fingerprint_of_file(&files.cert)?;
        let mut cluster = ClusterConfig::new(data);
        cluster.file = ClusterFileConfig::parse(config_yaml).map_err(|e| e.to_string())?;
        own_ports(&mut cluster.file);
        let mut options = ServerOptions::new(cluster);
        options.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        options.tick_interval = Duration::from_millis(100);
        options.tls = Some(files);
        let server = Server::start(options)?;
        Ok((TestCluster { server, dir }, fingerprint))
    }

    pub fn client(&self, token: Option<&str>) -> Client {
        Client::new(&self.server.url(), token)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }

    /// `<data>/code`: the code snapshots.
    pub fn code_dir(&self) -> PathBuf {
        self.dir.path().join("data/code")
    }
}
