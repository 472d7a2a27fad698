//! Test certificates made with the `openssl` command (installed wherever the tests run, as
//! Debian's memcached is): a CA, servers' certificates for `localhost` and 127.0.0.1 signed
//! by it, and client certificates, in a directory of the test's own.

use std::path::{Path, PathBuf};
use std::process::Command;

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
