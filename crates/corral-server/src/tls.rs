//! HTTPS for `corral up` beyond loopback (issue 33): tokens must not cross the network in
//! the clear. The server serves a configured certificate and key (PEM), or a self-signed
//! pair it made at its first start and keeps in `<data>/tls/` (`0600`, in a `0700`
//! directory), so that its SHA-256 fingerprint, which clients pin, stays the same across
//! restarts. The client's side (a CA file or a pinned fingerprint) is `tls_client.rs`.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use sha2::{Digest, Sha256};

/// Where the self-signed pair lives, inside the data directory.
pub const TLS_DIR: &str = "tls";
pub const CERT_FILE: &str = "server.crt";
pub const KEY_FILE: &str = "server.key";

/// The certificate (chain, PEM) and private key (PEM) the server serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The self-signed pair of `data_dir`, made now (for `names`: DNS names and IP addresses)
/// when it does not exist yet. Returns the files and whether they were just made.
pub fn self_signed(data_dir: &Path, names: &[String]) -> Result<(TlsFiles, bool), String> {
    let dir = data_dir.join(TLS_DIR);
    let files = TlsFiles {
        cert: dir.join(CERT_FILE),
        key: dir.join(KEY_FILE),
    };
    match (files.cert.exists(), files.key.exists()) {
        (true, true) => return Ok((files, false)),
        (false, false) => {}
        _ => {
            return Err(format!(
                "{} holds only one of {CERT_FILE} and {KEY_FILE}: remove it to make a new \
                 self-signed certificate (clients must then pin its new fingerprint)",
                dir.display()
            ));
        }
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let made = rcgen::generate_simple_self_signed(names.to_vec())
        .map_err(|e| format!("cannot make a self-signed certificate for {names:?}: {e}"))?;
    // The key first: a certificate without its key is never left behind as a whole pair.
    write_private(&files.key, made.signing_key.serialize_pem().as_bytes())?;
    write_private(&files.cert, made.cert.pem().as_bytes())?;
    Ok((files, true))
}

/// Writes `path` readable by its owner alone (made so, never looser for a moment).
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    };
    write().map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The names a self-signed certificate is made for: `localhost`, loopback, the listening
/// address (unless it is the unspecified one) and the machine's host name.
pub fn names_for(listen: std::net::IpAddr) -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    if !listen.is_unspecified() && !listen.is_loopback() {
        names.push(listen.to_string());
    }
    if let Ok(host) = fs::read_to_string("/proc/sys/kernel/hostname") {
        let host = host.trim();
        if !host.is_empty() && !names.iter().any(|n| n == host) {
            names.push(host.to_string());
        }
    }
    names
}

/// The SHA-256 fingerprint of the first certificate in the PEM file `cert`, as
/// `AB:CD:...` (what `openssl x509 -fingerprint -sha256` prints).
pub fn fingerprint_of_file(cert: &Path) -> Result<String, String> {
    let first = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("cannot read the certificate {}: {e}", cert.display()))?
        .next()
        .ok_or_else(|| format!("{} holds no PEM certificate", cert.display()))?
        .map_err(|e| format!("cannot read the certificate {}: {e}", cert.display()))?;
    Ok(fingerprint(&first))
}

/// The SHA-256 fingerprint of a DER certificate, `AB:CD:...`.
pub fn fingerprint(der: &[u8]) -> String {
    hex_colons(&Sha256::digest(der))
}

/// Bytes as `AB:CD:...`.
pub fn hex_colons(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The server's TLS settings from `files` (checked at start: a bad pair fails the start).
pub async fn rustls_config(
    files: &TlsFiles,
) -> Result<axum_server::tls_rustls::RustlsConfig, String> {
    axum_server::tls_rustls::RustlsConfig::from_pem_file(&files.cert, &files.key)
        .await
        .map_err(|e| {
            format!(
                "cannot use the TLS certificate {} with the key {}: {e}",
                files.cert.display(),
                files.key.display()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_self_signed_pair_is_made_once_private_and_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let names = vec!["localhost".to_string(), "10.1.2.3".to_string()];
        let (files, made) = self_signed(dir.path(), &names).expect("made");
        assert!(made);
        for f in [&files.cert, &files.key] {
            assert_eq!(fs::metadata(f).expect("file").mode() & 0o777, 0o600);
        }
        let dir_mode = fs::metadata(dir.path().join(TLS_DIR)).expect("dir").mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        let first = fingerprint_of_file(&files.cert).expect("fingerprint");
        assert_eq!(first.len(), 32 * 3 - 1, "{first}");
        let (again, made) = self_signed(dir.path(), &names).expect("kept");
        assert!(!made);
        assert_eq!(
            fingerprint_of_file(&again.cert).expect("fingerprint"),
            first
        );
        // Half a pair is refused, not replaced behind the clients' backs.
        fs::remove_file(&files.key).expect("rm");
        let e = self_signed(dir.path(), &names).expect_err("half a pair");
        assert!(e.contains("only one of"), "{e}");
    }

    #[test]
    fn a_file_without_a_certificate_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("empty.pem");
        fs::write(&path, "not a certificate\n").expect("write");
        let e = fingerprint_of_file(&path).expect_err("no certificate");
        assert!(e.contains("empty.pem"), "{e}");
    }
}
