//! NBD over TLS (NBD_OPT_STARTTLS with X.509): the server's certificate and key, the CA that
//! signs client certificates, whether TLS is required, the handshake on a connection that
//! asked for it, and the names a verified client certificate carries (its subject CN and DNS
//! names), which the host model matches against hosts' TLS names.
//!
//! rustls with the ring provider. TLS-PSK (which GnuTLS clients also offer) is not here:
//! rustls has no external pre-shared keys.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::Context as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use weft_nbd::TlsMode;

/// Where `weft serve` finds its NBD TLS material.
#[derive(Debug, Clone)]
pub struct NbdTlsFiles {
    /// PEM certificate chain, the server's first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM CA certificates that sign client certificates: with it, every TLS client must
    /// present a certificate it signed, whose names identify the host.
    pub client_ca: Option<PathBuf>,
    /// Clients may stay in clear (STARTTLS offered, not required).
    pub optional: bool,
}

/// The loaded TLS configuration of a listener.
pub struct NbdTls {
    acceptor: TlsAcceptor,
    pub mode: TlsMode,
    /// Client certificates are required and verified.
    pub verifies_clients: bool,
}

impl std::fmt::Debug for NbdTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NbdTls")
            .field("mode", &self.mode)
            .field("verifies_clients", &self.verifies_clients)
            .finish_non_exhaustive()
    }
}

impl NbdTls {
    pub fn load(files: &NbdTlsFiles) -> anyhow::Result<NbdTls> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs = read_certs(&files.cert)?;
        let key = PrivateKeyDer::from_pem_file(&files.key)
            .with_context(|| format!("reading the private key in {}", files.key.display()))?;
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?;
        let builder = match &files.client_ca {
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for cert in read_certs(ca)? {
                    roots
                        .add(cert)
                        .with_context(|| format!("a CA certificate in {}", ca.display()))?;
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    Arc::clone(&provider),
                )
                .build()
                .context("the client certificate verifier")?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let config = builder.with_single_cert(certs, key).with_context(|| {
            format!(
                "the certificate in {} does not go with the key in {}",
                files.cert.display(),
                files.key.display()
            )
        })?;
        Ok(NbdTls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            mode: if files.optional {
                TlsMode::Optional
            } else {
                TlsMode::Required
            },
            verifies_clients: files.client_ca.is_some(),
        })
    }

    /// Run the server side of the TLS handshake on a connection that sent STARTTLS.
    pub async fn accept(&self, tcp: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        self.acceptor.accept(tcp).await
    }
}

fn read_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading certificates in {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("a certificate in {}", path.display()))?;
    anyhow::ensure!(!certs.is_empty(), "no certificate in {}", path.display());
    Ok(certs)
}

/// The subject common names and DNS names of the verified client certificate of `stream`
/// (none without one).
pub fn client_names(stream: &TlsStream<TcpStream>) -> Vec<String> {
    let Some(cert) = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
    else {
        return Vec::new();
    };
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert.as_ref()) else {
        return Vec::new();
    };
    let mut names: Vec<String> = parsed
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = parsed.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push(dns.to_ascii_lowercase());
            }
        }
    }
    names
}

/// A connection's byte stream: clear until STARTTLS, TLS after.
pub enum NbdStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for NbdStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            NbdStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            NbdStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for NbdStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            NbdStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            NbdStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            NbdStream::Plain(s) => Pin::new(s).poll_flush(cx),
            NbdStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            NbdStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            NbdStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
