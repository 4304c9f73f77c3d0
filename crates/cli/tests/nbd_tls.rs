//! NBD over TLS (STARTTLS, X.509) through clients nobody here wrote: libnbd's `nbdinfo` and
//! `nbdcopy` (GnuTLS) and qemu's NBD driver with a `tls-creds-x509` object. Certificates are
//! made per run with `openssl`: a CA, the server's (for 127.0.0.1), and client certificates
//! whose CN names the host. A listener that requires TLS refuses clients in clear; a client
//! certificate's name gives its host's mapped volumes; data crosses byte-identical.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

fn openssl(dir: &Path, args: &[&str]) {
    let mut cmd = Command::new(require_tool("openssl"));
    cmd.args(args).current_dir(dir);
    run(&mut cmd, TOOL_TIMEOUT).ok();
}

/// A CA, a server certificate for 127.0.0.1, and a directory per client name holding
/// `ca-cert.pem`, `client-cert.pem` and `client-key.pem` (the layout libnbd and qemu read).
struct Pki {
    dir: PathBuf,
    _scratch: Scratch,
}

impl Pki {
    fn new(scratch: Scratch, clients: &[&str]) -> Pki {
        let dir = scratch.join("pki");
        fs::create_dir_all(&dir).unwrap();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend(["-keyout", "ca-key.pem", "-out", "ca-cert.pem", "-days", "2"]);
        ca.extend(["-subj", "/CN=weft test CA"]);
        openssl(&dir, &ca);
        fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n",
        )
        .unwrap();
        fs::write(
            dir.join("client.ext"),
            "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n",
        )
        .unwrap();
        let pki = Pki {
            dir,
            _scratch: scratch,
        };
        pki.sign("server", "localhost", "server.ext");
        for client in clients {
            pki.sign(client, client, "client.ext");
            let d = pki.dir.join(client);
            fs::create_dir_all(&d).unwrap();
            fs::rename(
                pki.dir.join(format!("{client}-cert.pem")),
                d.join("client-cert.pem"),
            )
            .unwrap();
            fs::rename(
                pki.dir.join(format!("{client}-key.pem")),
                d.join("client-key.pem"),
            )
            .unwrap();
            fs::copy(pki.dir.join("ca-cert.pem"), d.join("ca-cert.pem")).unwrap();
        }
        // A client that trusts the CA but has no certificate of its own.
        let anonymous = pki.dir.join("anonymous");
        fs::create_dir_all(&anonymous).unwrap();
        fs::copy(pki.dir.join("ca-cert.pem"), anonymous.join("ca-cert.pem")).unwrap();
        pki
    }

    fn sign(&self, name: &str, cn: &str, ext: &str) {
        let key = format!("{name}-key.pem");
        let csr = format!("{name}.csr");
        let cert = format!("{name}-cert.pem");
        let subj = format!("/CN={cn}");
        let req = [
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &subj,
        ];
        openssl(&self.dir, &req);
        let sign = [
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca-cert.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-out",
            &cert,
            "-days",
            "2",
            "-extfile",
            ext,
        ];
        openssl(&self.dir, &sign);
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).to_str().unwrap().to_string()
    }

    fn client(&self, name: &str) -> String {
        self.path(name)
    }
}

fn tls_server(name: &str) -> (Server, Pki) {
    let pki = Pki::new(Scratch::new(&format!("{name}-pki")), &["app1", "other"]);
    let srv = Server::start_with(
        name,
        ServeOpts::default()
            .volume_size("64M")
            .arg("--nbd-tls-cert")
            .arg(&pki.path("server-cert.pem"))
            .arg("--nbd-tls-key")
            .arg(&pki.path("server-key.pem"))
            .arg("--nbd-tls-client-ca")
            .arg(&pki.path("ca-cert.pem")),
    );
    (srv, pki)
}

fn list(uri: &str) -> CmdOut {
    let mut cmd = Command::new(require_tool("nbdinfo"));
    cmd.args(["--list", "--json", uri]);
    run(&mut cmd, TOOL_TIMEOUT)
}

#[test]
fn tls_clients_are_identified_by_certificate_and_clear_text_is_refused() {
    let (srv, pki) = tls_server("nbd-tls");
    assert!(
        srv.server_output()
            .contains("nbd tls: required, client certificates verified"),
        "{}",
        srv.server_output()
    );
    srv.cli_ok(&["volume", "create", "pgdata", "--size", "64M"]);
    srv.cli_ok(&["host", "create", "app1", "--tls-name", "app1"]);
    srv.cli_ok(&["volume", "map", "pgdata", "--host", "app1"]);
    let nbds = |client: &str, export: &str| {
        format!(
            "nbds://{}/{export}?tls-certificates={}",
            srv.nbd,
            pki.client(client)
        )
    };

    // In clear: every option is refused until STARTTLS.
    let clear = list(&format!("nbd://{}", srv.nbd));
    assert!(!clear.success(), "listed in clear:\n{}", clear.all());
    // Without a client certificate the TLS handshake fails.
    let anonymous = list(&nbds("anonymous", ""));
    assert!(
        !anonymous.success(),
        "listed without a certificate:\n{}",
        anonymous.all()
    );
    // app1's certificate gives it its host's volume (and the unmapped one, on loopback);
    // another certificate from the same CA does not.
    assert_eq!(
        nbdinfo_export_names(&list(&nbds("app1", "")).ok()),
        ["pgdata", "vol0"]
    );
    assert_eq!(
        nbdinfo_export_names(&list(&nbds("other", "")).ok()),
        ["vol0"]
    );

    // Data through TLS, byte-identical both ways (libnbd's nbdcopy).
    let (mut rng, _) = test_rng("nbd-tls");
    let data = random_bytes(&mut rng, 8 << 20);
    let src = srv.scratch.join("src.img");
    let back = srv.scratch.join("back.img");
    fs::write(&src, &data).unwrap();
    let copy = |from: &str, to: &str| {
        let mut cmd = Command::new(require_tool("nbdcopy"));
        cmd.args([from, to]);
        run(&mut cmd, TOOL_TIMEOUT).ok();
    };
    copy(src.to_str().unwrap(), &nbds("app1", "pgdata"));
    copy(&nbds("app1", "pgdata"), back.to_str().unwrap());
    let read = fs::read(&back).unwrap();
    assert!(read[..data.len()] == data[..], "TLS round trip differs");
    assert!(read[data.len()..].iter().all(|&b| b == 0));

    // qemu's NBD driver with an X.509 credentials object.
    let qemu = |client: &str, export: &str| {
        let mut cmd = Command::new(require_tool("qemu-io"));
        cmd.args([
            "--object",
            &format!(
                "tls-creds-x509,id=tls0,endpoint=client,dir={}",
                pki.client(client)
            ),
            "--image-opts",
            "-c",
            "read -P 0 60M 64k",
            &format!(
                "driver=nbd,host=127.0.0.1,port={},export={export},tls-creds=tls0",
                srv.nbd.port()
            ),
        ]);
        run(&mut cmd, TOOL_TIMEOUT)
    };
    qemu("app1", "pgdata").ok();
    let refused = qemu("other", "pgdata");
    assert!(
        !refused.success() && refused.all().contains("export not available"),
        "{}",
        refused.all()
    );
}

#[test]
fn a_bad_certificate_stops_the_start_before_the_data_dir_is_made() {
    let scratch = Scratch::new("nbd-tls-bad");
    fs::write(scratch.join("junk.pem"), "not a certificate\n").unwrap();
    let junk = scratch.join("junk.pem");
    let mut cmd = Command::new(weft_bin());
    cmd.arg("--data-dir")
        .arg(scratch.join("data"))
        .args([
            "serve",
            "--nbd-listen",
            "127.0.0.1:0",
            "--api-listen",
            "127.0.0.1:0",
        ])
        .args(["--iscsi-listen", "off", "--nbd-tls-cert"])
        .arg(&junk)
        .arg("--nbd-tls-key")
        .arg(&junk);
    let out = run(&mut cmd, Duration::from_secs(60));
    assert!(!out.success(), "{}", out.all());
    assert!(out.all().contains("NBD TLS certificate"), "{}", out.all());
    assert!(!scratch.join("data").exists());
}
