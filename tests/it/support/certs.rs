//! Test certificates made with the `openssl` command (installed wherever the tests run, as
//! Debian's memcached is): a CA, servers' certificates for `localhost` and 127.0.0.1 signed
//! by it, and client certificates, in a directory of the test's own.

use memfleet_tls::rustls::{ClientConnection, StreamOwned};
use memfleet_tls::ClientTlsFiles;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// How long TLS test clients wait for a reply.
pub const TIMEOUT: Duration = Duration::from_secs(15);

/// A directory of certificates under one test CA; removed when dropped.
pub struct TestPki {
    /// Where the files are.
    pub dir: PathBuf,
    /// The CA certificate, PEM.
    pub ca: PathBuf,
    serial: u32,
}

/// A certificate and its key.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The certificate, PEM.
    pub cert: PathBuf,
    /// Its private key, PEM (PKCS#8).
    pub key: PathBuf,
}

impl TestPki {
    /// A new CA in a fresh directory named after the test.
    pub fn new(test: &str) -> TestPki {
        let dir = std::env::temp_dir().join(format!("memfleet-pki-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=memfleet test CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        TestPki { dir, ca, serial: 1 }
    }

    /// A server certificate for `localhost` and 127.0.0.1, files named after `name`.
    pub fn server(&mut self, name: &str) -> Issued {
        self.issue(
            name,
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        )
    }

    /// A client certificate, files named after `name`.
    pub fn client(&mut self, name: &str) -> Issued {
        self.issue(name, "extendedKeyUsage=clientAuth\n")
    }

    fn issue(&mut self, name: &str, extensions: &str) -> Issued {
        self.serial += 1;
        let ext = format!("{name}.ext");
        std::fs::write(
            self.dir.join(&ext),
            format!("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n{extensions}"),
        )
        .unwrap();
        let (key, csr, cert) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
        );
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-set_serial",
                &self.serial.to_string(),
                "-days",
                "2",
                "-out",
                &cert,
                "-extfile",
                &ext,
            ],
        );
        Issued {
            cert: self.dir.join(cert),
            key: self.dir.join(key),
        }
    }
}

/// A TLS client over a blocking socket.
pub struct TlsClient {
    stream: StreamOwned<ClientConnection, TcpStream>,
}

impl TlsClient {
    /// Connects and completes the handshake, trusting `ca`, presenting `identity` if given.
    pub fn connect(port: u16, ca: &Path, identity: Option<&Issued>) -> std::io::Result<TlsClient> {
        let config = memfleet_tls::client_config(&ClientTlsFiles {
            ca: ca.to_path_buf(),
            cert: identity.map(|i| i.cert.clone()),
            key: identity.map(|i| i.key.clone()),
        })
        .unwrap();
        let name = memfleet_tls::server_name("localhost").unwrap();
        let session = ClientConnection::new(Arc::new(config), name).unwrap();
        let mut stream = StreamOwned::new(session, super::connect(port, TIMEOUT));
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(TlsClient { stream })
    }

    /// The certificate the server showed, DER.
    pub fn peer_cert(&self) -> Vec<u8> {
        self.stream.conn.peer_certificates().unwrap()[0].to_vec()
    }

    pub fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Reads until the input ends with `end` (or fails: closed, timed out, refused).
    pub fn read_until(&mut self, end: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut got = Vec::new();
        let mut chunk = [0u8; 64 * 1024];
        while !got.ends_with(end) {
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            got.extend_from_slice(&chunk[..n]);
        }
        Ok(got)
    }

    /// Sends `request` and returns the reply, which ends with `end`.
    pub fn ask(&mut self, request: &[u8], end: &[u8]) -> Vec<u8> {
        self.send(request).unwrap();
        self.read_until(end).unwrap()
    }

    /// `stats` as (name, value) text.
    pub fn stat(&mut self, name: &str) -> Option<String> {
        let reply = self.ask(b"stats\r\n", b"END\r\n");
        let text = String::from_utf8(reply).unwrap();
        let prefix = format!("STAT {name} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
    }

    /// Reads exactly `buf.len()` bytes.
    pub fn read_exact(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
        self.stream.read_exact(buf)
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The DER bytes of the first certificate of a PEM file (to compare with what a peer shows).
pub fn der_of(pem: &Path) -> Vec<u8> {
    let out = Command::new("openssl")
        .args(["x509", "-outform", "DER", "-in"])
        .arg(pem)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl x509 -outform DER failed");
    out.stdout
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl command is installed");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
