//! HTTPS an organisation can run, end to end on loopback: a private CA made
//! here with the openssl CLI, the vault behind nginx (Debian's package,
//! started by the test with its own configuration and prefix) and with TLS
//! built in (reloaded on SIGHUP), `nd7 enroll --ca-cert` pinning the CA for
//! every later ship, `SSL_CERT_FILE`, and the refusals: another CA, another
//! name, and the compiled-in roots that know neither. `nd7 self-update`
//! fetches over the same client, so it is tried over the same TLS.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::common::{State, stderr, stdout};
use crate::vault::{Org, Vault, append, nd7, ok, ship};
use crate::vault_service::wait_until;

/// A CA and certificates it signed, made with the openssl CLI.
pub struct Pki {
    pub dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    pub fn new() -> Pki {
        Pki {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A self-signed CA: `<name>.pem` and `<name>.key`.
    pub fn ca(&self, name: &str) -> PathBuf {
        openssl(
            self.dir.path(),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.pem"),
            ],
        );
        self.path(&format!("{name}.pem"))
    }

    /// A server certificate for `names` (DNS names or IP addresses),
    /// signed by CA `ca`: (`<name>.pem`, `<name>.key`).
    pub fn server(&self, name: &str, ca: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let san: Vec<String> = names
            .iter()
            .map(|n| {
                if n.parse::<std::net::IpAddr>().is_ok() {
                    format!("IP:{n}")
                } else {
                    format!("DNS:{n}")
                }
            })
            .collect();
        std::fs::write(
            self.path(&format!("{name}.ext")),
            format!(
                "subjectAltName={}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
                san.join(",")
            ),
        )
        .expect("ext");
        openssl(
            self.dir.path(),
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-subj",
                &format!("/CN={}", names[0]),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ],
        );
        openssl(
            self.dir.path(),
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                &format!("{ca}.pem"),
                "-CAkey",
                &format!("{ca}.key"),
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}.pem"),
            ],
        );
        (
            self.path(&format!("{name}.pem")),
            self.path(&format!("{name}.key")),
        )
    }
}

/// A free port on loopback (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// nginx terminating TLS in front of a vault, as the current user, with
/// its own configuration, prefix and logs; stopped when dropped.
pub struct Nginx {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Nginx {
    pub fn start(cert: &Path, key: &Path, upstream: &str, extra: &str) -> Nginx {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let p = dir.path().display();
        // As root, nginx's workers would drop to `nobody`, who cannot write
        // this prefix: keep them as the current user.
        let user = if rustix::process::geteuid().is_root() {
            "user root root;"
        } else {
            ""
        };
        let conf = format!(
            "{user}
daemon off;
worker_processes 1;
pid {p}/nginx.pid;
error_log {p}/error.log info;
events {{ worker_connections 256; }}
http {{
  access_log {p}/access.log;
  client_body_temp_path {p}/body;
  proxy_temp_path {p}/proxy;
  fastcgi_temp_path {p}/fastcgi;
  uwsgi_temp_path {p}/uwsgi;
  scgi_temp_path {p}/scgi;
  server {{
    listen 127.0.0.1:{port} ssl;
    server_name localhost;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    client_max_body_size 17m;
    client_body_timeout 30s;
    client_header_timeout 10s;
    location / {{
      proxy_pass http://{upstream};
      proxy_http_version 1.1;
      proxy_read_timeout 120s;
    }}
    {extra}
  }}
}}
",
            cert = cert.display(),
            key = key.display(),
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("nginx.conf");
        let child = Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf_path)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx (apt-get install nginx)");
        let nginx = Nginx { child, port, dir };
        assert!(
            wait_until(Duration::from_secs(60), || std::net::TcpStream::connect((
                "127.0.0.1",
                port
            ))
            .is_ok()),
            "nginx did not start: {}",
            std::fs::read_to_string(nginx.dir.path().join("error.log")).unwrap_or_default()
        );
        nginx
    }

    pub fn url(&self) -> String {
        format!("https://localhost:{}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // QUIT: a graceful stop, the workers with it.
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid"),
            rustix::process::Signal::QUIT,
        );
        let _ = self.child.wait();
    }
}

fn enroll_at(state: &State, url: &str, org: &Org, extra: &[&str]) -> Output {
    state
        .nd7()
        .args([
            "enroll",
            url,
            "--token",
            &org.token(),
            "--fingerprint",
            &org.fingerprint,
        ])
        .args(extra)
        .output()
        .expect("run nd7 enroll")
}

/// A machine enrolled over HTTPS, shipping, and an admin pulling back.
fn ship_and_pull(state: &State, vault: &Vault, org: &Org, url: &str, ca: &Path) {
    append(state, "s1", 12);
    ok(ship(state));
    let machine = std::fs::read_to_string(state.xdg().join("nd7/vault/machine.id")).expect("id");
    let out = nd7()
        .args(["admin", "pull", url, "--read-token", &vault.read_token()])
        .arg("--ca-cert")
        .arg(ca)
        .arg("--identity")
        .arg(&org.identity)
        .args([
            "--fingerprint",
            &org.fingerprint,
            "--machine",
            machine.trim(),
            "--session",
            "s1",
        ])
        .arg("--out")
        .arg(vault.dir.path().join("pulled"))
        .output()
        .expect("pull");
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("pulled 12 entries"),
        "{}",
        stdout(&out)
    );
}

/// An untrusted server is refused before anything is written, saying how
/// to trust it.
fn refused(state: &State, out: &Output) {
    assert_eq!(out.status.code(), Some(2), "{}", stderr(out));
    assert!(stderr(out).contains("not trusted here"), "{}", stderr(out));
    assert!(!state.xdg().join("nd7/vault/machine.id").exists());
}

/// Guards `Trust::Pinned` (the CA given at enrolment, kept in `ca.pem`
/// and used for every ship after) and `SSL_CERT_FILE` in `http_client`,
/// and rustls' name check, through nginx in front of the vault.
#[test]
fn behind_nginx_with_a_private_ca_only_the_pinned_ca_and_name_are_trusted() {
    let pki = Pki::new();
    let ca = pki.ca("ca1");
    let other_ca = pki.ca("ca2");
    let (cert, key) = pki.server("srv", "ca1", &["localhost", "127.0.0.1"]);
    let (wrong_cert, wrong_key) = pki.server("wrong", "ca1", &["vault.example.org"]);
    let vault = Vault::start();
    let org = Org::new(&vault);
    let nginx = Nginx::start(&cert, &key, &vault.addr, "");

    // The compiled-in roots do not know a private CA; nor does another CA.
    let state = State::new();
    refused(&state, &enroll_at(&state, &nginx.url(), &org, &[]));
    let out = enroll_at(
        &state,
        &nginx.url(),
        &org,
        &["--ca-cert", other_ca.to_str().expect("utf8")],
    );
    refused(&state, &out);

    // Pinned at enrolment, and used by every ship after.
    ok(enroll_at(
        &state,
        &nginx.url(),
        &org,
        &["--ca-cert", ca.to_str().expect("utf8")],
    ));
    let pinned = state.xdg().join("nd7/vault/ca.pem");
    assert_eq!(
        std::fs::read(&pinned).expect("pinned"),
        std::fs::read(&ca).expect("ca")
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&pinned).expect("ca").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    ship_and_pull(&state, &vault, &org, &nginx.url(), &ca);

    // SSL_CERT_FILE, as OpenSSL reads it, without --ca-cert.
    let by_env = State::new();
    let out = by_env
        .nd7()
        .args([
            "enroll",
            &nginx.url(),
            "--token",
            &org.token(),
            "--fingerprint",
            &org.fingerprint,
        ])
        .env("SSL_CERT_FILE", &ca)
        .output()
        .expect("enroll");
    assert!(out.status.success(), "{}", stderr(&out));
    append(&by_env, "s1", 3);
    let out = by_env
        .nd7()
        .arg("ship")
        .env("SSL_CERT_FILE", &ca)
        .output()
        .expect("ship");
    assert!(out.status.success(), "{}", stderr(&out));
    let out = ship(&by_env);
    assert_eq!(
        out.status.code(),
        Some(1),
        "without SSL_CERT_FILE: {}",
        stderr(&out)
    );

    // The right CA, the wrong name.
    let wrong = Nginx::start(&wrong_cert, &wrong_key, &vault.addr, "");
    let misnamed = State::new();
    let out = enroll_at(
        &misnamed,
        &wrong.url(),
        &org,
        &["--ca-cert", ca.to_str().expect("utf8")],
    );
    refused(&misnamed, &out);
}

/// Guards the built-in TLS (`http::load_tls`) and its reload on SIGHUP:
/// after the certificate files are replaced by one from another CA and
/// the vault is told, machines pinned to the old CA are refused and the
/// new CA is trusted, with the vault running throughout.
#[test]
fn built_in_tls_serves_the_pinned_ca_and_reloads_on_sighup() {
    let pki = Pki::new();
    let ca = pki.ca("ca1");
    let new_ca = pki.ca("ca2");
    let (cert, key) = pki.server("srv", "ca1", &["localhost", "127.0.0.1"]);
    let (new_cert, new_key) = pki.server("srv2", "ca2", &["localhost", "127.0.0.1"]);
    let (wrong_cert, wrong_key) = pki.server("wrong", "ca1", &["vault.example.org"]);
    let serving = tempfile::tempdir().expect("tempdir");
    let (live_cert, live_key) = (
        serving.path().join("cert.pem"),
        serving.path().join("key.pem"),
    );
    std::fs::copy(&cert, &live_cert).expect("cert");
    std::fs::copy(&key, &live_key).expect("key");
    let vault = Vault::start_with(&[
        "--tls-cert",
        live_cert.to_str().expect("utf8"),
        "--tls-key",
        live_key.to_str().expect("utf8"),
    ]);
    assert!(vault.url.starts_with("https://"), "{}", vault.url);
    let url = vault.url.replace("127.0.0.1", "localhost");
    let org = Org::new(&vault);

    let state = State::new();
    refused(&state, &enroll_at(&state, &url, &org, &[]));
    ok(enroll_at(
        &state,
        &url,
        &org,
        &["--ca-cert", ca.to_str().expect("utf8")],
    ));
    ship_and_pull(&state, &vault, &org, &url, &ca);
    // By address too: the certificate names 127.0.0.1.
    let by_ip = State::new();
    ok(enroll_at(
        &by_ip,
        &vault.url,
        &org,
        &["--ca-cert", ca.to_str().expect("utf8")],
    ));

    // A certificate for another name, reloaded: refused by name.
    std::fs::copy(&wrong_cert, &live_cert).expect("cert");
    std::fs::copy(&wrong_key, &live_key).expect("key");
    let hup = || {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(vault.pid() as i32).expect("pid"),
            rustix::process::Signal::HUP,
        )
        .expect("SIGHUP")
    };
    hup();
    assert!(wait_until(Duration::from_secs(60), || vault
        .log()
        .matches("tls: reloaded")
        .count()
        == 1));
    let misnamed = State::new();
    refused(
        &misnamed,
        &enroll_at(
            &misnamed,
            &url,
            &org,
            &["--ca-cert", ca.to_str().expect("utf8")],
        ),
    );

    // Files that do not go together are refused, and the served one stays.
    std::fs::copy(&new_cert, &live_cert).expect("cert");
    hup();
    assert!(wait_until(Duration::from_secs(60), || vault
        .log()
        .contains("tls: kept the certificate in use")));
    let still = State::new();
    refused(
        &still,
        &enroll_at(
            &still,
            &url,
            &org,
            &["--ca-cert", new_ca.to_str().expect("utf8")],
        ),
    );

    // Another CA's certificate, reloaded: the old pin is refused, the new
    // CA trusted.
    std::fs::copy(&new_key, &live_key).expect("key");
    hup();
    assert!(wait_until(Duration::from_secs(60), || vault
        .log()
        .matches("tls: reloaded")
        .count()
        == 2));
    append(&state, "s1", 2);
    let out = ship(&state);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not trusted here"),
        "{}",
        stderr(&out)
    );
    let fresh = State::new();
    ok(enroll_at(
        &fresh,
        &url,
        &org,
        &["--ca-cert", new_ca.to_str().expect("utf8")],
    ));
    append(&fresh, "s1", 2);
    ok(ship(&fresh));
}

/// `nd7 self-update`'s fetches go through the same client: a signed
/// release served over HTTPS by nginx with a private CA installs when that
/// CA is trusted, and is refused (nothing replaced) when it is not.
#[cfg(feature = "self-update")]
#[test]
fn self_update_fetches_a_release_over_https_through_the_same_client() {
    use ed25519_dalek::Signer;
    use nd7_core::http_client::Trust;
    use nd7_core::self_update::{self, Accept};
    let pki = Pki::new();
    let ca = pki.ca("ca1");
    let (cert, key) = pki.server("srv", "ca1", &["localhost"]);
    let release = tempfile::tempdir().expect("release");
    let (nd7_bin, exec_bin) = (b"new nd7".to_vec(), b"new exec".to_vec());
    let record_bin = b"new record".to_vec();
    let manifest = format!(
        "nd7-release v1\nversion 99.0.0\ntarget {}\nfile nd7 {} nd7-bin\nfile nd7-exec {} nd7-exec-bin\nfile nd7-record {} nd7-record-bin\n",
        self_update::TARGET,
        blake3::hash(&nd7_bin).to_hex(),
        blake3::hash(&exec_bin).to_hex(),
        blake3::hash(&record_bin).to_hex()
    );
    let signing = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
    let signature = signing.sign(&[self_update::CONTEXT, manifest.as_bytes()].concat());
    let (manifest_file, signature_file) = self_update::manifest_name(self_update::TARGET);
    std::fs::write(release.path().join(manifest_file), &manifest).expect("manifest");
    std::fs::write(
        release.path().join(signature_file),
        nd7_core::vault::hex(&signature.to_bytes()),
    )
    .expect("sig");
    std::fs::write(release.path().join("nd7-bin"), &nd7_bin).expect("bin");
    std::fs::write(release.path().join("nd7-exec-bin"), &exec_bin).expect("bin");
    std::fs::write(release.path().join("nd7-record-bin"), &record_bin).expect("bin");
    let nginx = Nginx::start(
        &cert,
        &key,
        "127.0.0.1:9",
        &format!(
            "location /release/ {{ alias {}/; }}",
            release.path().display()
        ),
    );
    let base = format!("{}/release", nginx.url());
    let installed = tempfile::tempdir().expect("installed");
    for name in ["nd7", "nd7-exec", "nd7-record"] {
        std::fs::write(installed.path().join(name), b"old").expect("old");
    }
    let public = signing.verifying_key().to_bytes();
    let err = self_update::update(
        installed.path(),
        &base,
        &Trust::Default,
        &public,
        &Accept::running(false),
    )
    .expect_err("an unknown CA is refused");
    assert!(err.to_string().contains("not trusted here"), "{err}");
    assert_eq!(
        std::fs::read(installed.path().join("nd7")).expect("nd7"),
        b"old"
    );
    let version = self_update::update(
        installed.path(),
        &base,
        &Trust::Pinned(ca),
        &public,
        &Accept::running(false),
    )
    .expect("update over https");
    assert_eq!(version.to_string(), "99.0.0");
    assert_eq!(
        std::fs::read(installed.path().join("nd7")).expect("nd7"),
        nd7_bin
    );
    assert_eq!(
        std::fs::read(installed.path().join("nd7-exec")).expect("exec"),
        exec_bin
    );
    assert_eq!(
        std::fs::read(installed.path().join("nd7-record")).expect("record"),
        record_bin
    );
}
