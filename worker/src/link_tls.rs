//! TLS of the worker's link to the control plane, read once at start: the CA that
//! signed the control plane's certificate and, for mutual TLS, our own certificate.
//! The gRPC channel and the model relay's HTTP client are configured from the same
//! files, and trust only that CA.

use tonic::transport::{Certificate, ClientTlsConfig, Identity as TlsIdentity};

/// TLS of the link (`--tls-ca`, and `--tls-cert`/`--tls-key` for mutual TLS): the
/// CA that signed the control plane's certificate, and our own certificate.
#[derive(Clone)]
pub struct LinkTls {
    ca_pem: Vec<u8>,
    identity_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for LinkTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkTls")
            .field("client_certificate", &self.identity_pem.is_some())
            .finish()
    }
}

impl LinkTls {
    /// Reads the files at start, so a missing one stops the worker at once.
    pub fn load(
        ca: &std::path::Path,
        identity: Option<(&std::path::Path, &std::path::Path)>,
    ) -> Result<LinkTls, String> {
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
        };
        let ca_pem = read(ca)?;
        reqwest::Certificate::from_pem(&ca_pem)
            .map_err(|e| format!("{}: not a PEM certificate ({e})", ca.display()))?;
        let identity_pem = match identity {
            Some((cert, key)) => {
                let pair = (read(cert)?, read(key)?);
                reqwest::Identity::from_pem(&[pair.0.as_slice(), pair.1.as_slice()].concat())
                    .map_err(|e| {
                        format!(
                            "{} and {}: not a PEM certificate and key ({e})",
                            cert.display(),
                            key.display()
                        )
                    })?;
                Some(pair)
            }
            None => None,
        };
        Ok(LinkTls {
            ca_pem,
            identity_pem,
        })
    }

    pub(crate) fn client_config(&self) -> ClientTlsConfig {
        let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca_pem));
        match &self.identity_pem {
            Some((cert, key)) => config.identity(TlsIdentity::from_pem(cert, key)),
            None => config,
        }
    }

    /// The same trust and identity for the HTTP client of the model relay; only our
    /// CA is trusted there (the relay is the control plane, nothing else).
    pub fn configure(&self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        let mut builder = builder.tls_built_in_root_certs(false);
        if let Ok(ca) = reqwest::Certificate::from_pem(&self.ca_pem) {
            builder = builder.add_root_certificate(ca);
        }
        if let Some((cert, key)) = &self.identity_pem
            && let Ok(identity) =
                reqwest::Identity::from_pem(&[cert.as_slice(), key.as_slice()].concat())
        {
            builder = builder.identity(identity);
        }
        builder
    }
}
