//! How the API client trusts an HTTPS server (issue 33): the public roots (a certificate
//! from a public CA), a CA file (the site's own CA, or the server's self-signed
//! certificate), or a pinned SHA-256 fingerprint of the server's certificate (what
//! `corral up` prints for the self-signed one; the handshake still proves the server holds
//! its key). Verification is never skipped: a certificate that matches none of these fails
//! the connection with a message saying how to trust it.
//!
//! A CA file or a pin needs a rustls configuration of its own; ureq takes it through a
//! connector (`PinnedTls`) in place of its own TLS connector.

use std::fmt;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, StreamOwned};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
    TransportAdapter,
};

/// Which HTTPS servers the client believes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Trust {
    /// Certificates from the public CAs (webpki-roots).
    #[default]
    PublicRoots,
    /// Certificates issued by the CAs of this PEM file.
    CaFile(PathBuf),
    /// Only the certificate with this SHA-256 fingerprint (`AB:CD:...`, 32 bytes).
    Fingerprint(String),
}

/// A fingerprint as 32 bytes, from `AB:CD:...` or plain hex, any case.
pub fn parse_fingerprint(text: &str) -> Result<[u8; 32], String> {
    let hex: String = text
        .trim()
        .trim_start_matches("sha256:")
        .trim_start_matches("SHA256:")
        .chars()
        .filter(|c| *c != ':')
        .collect();
    let bad = || {
        format!(
            "fingerprint `{text}`: expected a SHA-256 fingerprint, 32 bytes in hex (`AB:CD:...`, \
             as `corral up` prints it)"
        )
    };
    if hex.len() != 64 || !hex.is_ascii() {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls configuration of `trust`; `None` for the public roots (ureq's own).
pub fn client_config(trust: &Trust) -> Result<Option<Arc<ClientConfig>>, String> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let config = match trust {
        Trust::PublicRoots => return Ok(None),
        Trust::CaFile(path) => {
            let mut roots = RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("the CA file {}: {e}", path.display()))?;
            for cert in certs {
                let cert = cert.map_err(|e| format!("the CA file {}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("the CA file {}: {e}", path.display()))?;
            }
            if roots.is_empty() {
                return Err(format!(
                    "the CA file {} holds no PEM certificate",
                    path.display()
                ));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::Fingerprint(text) => {
            let pin = parse_fingerprint(text)?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(PinnedVerifier {
                    pin,
                    algorithms: provider().signature_verification_algorithms,
                }))
                .with_no_client_auth()
        }
    };
    Ok(Some(Arc::new(config)))
}

/// Accepts exactly the certificate with the pinned fingerprint, whatever names it carries
/// (the pin is the server's identity), and checks the handshake's signature with its key.
#[derive(Debug)]
struct PinnedVerifier {
    pin: [u8; 32],
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use sha2::{Digest, Sha256};
        let got: [u8; 32] = Sha256::digest(end_entity.as_ref()).into();
        if got == self.pin {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "the server's certificate has the SHA-256 fingerprint {}, not the pinned {}",
                crate::tls::fingerprint(end_entity.as_ref()),
                crate::tls::hex_colons(&self.pin)
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// ureq's connector for HTTPS with a configuration of our own (after its TCP connector).
pub struct PinnedTls(pub Arc<ClientConfig>);

impl fmt::Debug for PinnedTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PinnedTls")
    }
}

impl<In: Transport> Connector<In> for PinnedTls {
    type Out = Either<In, TlsTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let host = details
            .uri
            .host()
            .ok_or(ureq::Error::Tls("the server's URL has no host"))?;
        // An IPv6 literal comes bracketed in the URL, not in a server name.
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_string())
            .map_err(|_| ureq::Error::Tls("the server's host is not a valid TLS name"))?;
        let mut conn = ClientConnection::new(Arc::clone(&self.0), name)?;
        let mut sock = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        sock.set_timeout(details.timeout);
        conn.complete_io(&mut sock)?;
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(Either::B(TlsTransport {
            buffers,
            stream: StreamOwned { conn, sock },
        })))
    }
}

/// An HTTPS connection made by [`PinnedTls`].
pub struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsTransport")
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let amount = self.stream.read(input)?;
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_parse_with_or_without_colons_and_bad_ones_say_what_is_valid() {
        let colons = (0..32)
            .map(|i| format!("{i:02x}"))
            .collect::<Vec<_>>()
            .join(":");
        let plain = colons.replace(':', "").to_uppercase();
        assert_eq!(parse_fingerprint(&colons), parse_fingerprint(&plain));
        assert_eq!(parse_fingerprint(&colons).expect("valid")[31], 31);
        for bad in ["", "AB:CD", &format!("{plain}00"), &plain.replace('0', "g")] {
            let e = parse_fingerprint(bad).expect_err(bad);
            assert!(e.contains("SHA-256"), "{e}");
        }
    }
}
