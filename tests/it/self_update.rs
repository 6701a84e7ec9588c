//! `nd7 self-update` through the real binary (feature `self-update`): a
//! copy of `nd7` in a scratch directory, a release signed for it and served
//! on loopback, and the test release key a test build takes from
//! `ND7_TEST_RELEASE_KEY` (never a build with a key of its own).
#![cfg(feature = "self-update")]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

use ed25519_dalek::Signer;
use nd7_core::self_update::{CONTEXT, RUNNING, TARGET};

use crate::common::{stderr, stdout};

/// The release key of these tests.
fn key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[5u8; 32])
}

/// Serves `files` on loopback until the test ends; returns the base URL.
fn serve(files: Vec<(String, Vec<u8>)>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(&stream);
            let mut request = String::new();
            let _ = reader.read_line(&mut request);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let path = request.split(' ').nth(1).unwrap_or("/");
            let found = files
                .iter()
                .find(|(n, _)| path.strip_prefix('/') == Some(n.as_str()));
            let (status, body) = found.map_or(("404 Not Found", &[][..]), |(_, b)| ("200 OK", b));
            let mut s = &stream;
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(body);
        }
    });
    url
}

/// A release of `version` for this target, signed with [`key`], served.
fn release(version: &str) -> String {
    let manifest = format!(
        "nd7-release v1\nversion {version}\ntarget {TARGET}\nfile nd7 {} nd7-bin\nfile nd7-exec {} nd7-exec-bin\nfile nd7-record {} nd7-record-bin\n",
        blake3::hash(b"new nd7").to_hex(),
        blake3::hash(b"new exec").to_hex(),
        blake3::hash(b"new record").to_hex()
    );
    let signature = key().sign(&[CONTEXT, manifest.as_bytes()].concat());
    let (manifest_file, signature_file) = nd7_core::self_update::manifest_name(TARGET);
    serve(vec![
        (manifest_file, manifest.into_bytes()),
        (
            signature_file,
            nd7_core::vault::hex(&signature.to_bytes()).into_bytes(),
        ),
        ("nd7-bin".into(), b"new nd7".to_vec()),
        ("nd7-exec-bin".into(), b"new exec".to_vec()),
        ("nd7-record-bin".into(), b"new record".to_vec()),
    ])
}

/// A copy of the test build's `nd7`, with an `nd7-exec` and an
/// `nd7-record` beside it, where an update may replace them.
fn installed() -> tempfile::TempDir {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    std::fs::copy(env!("CARGO_BIN_EXE_nd7"), dir.path().join("nd7")).expect("copy nd7");
    std::fs::write(dir.path().join("nd7-exec"), b"old exec").expect("nd7-exec");
    std::fs::write(dir.path().join("nd7-record"), b"old record").expect("nd7-record");
    dir
}

fn self_update(dir: &Path, args: &[&str], key: Option<&str>) -> Output {
    let mut cmd = Command::new(dir.join("nd7"));
    cmd.arg("self-update")
        .args(args)
        .env_remove("ND7_TEST_RELEASE_KEY");
    if let Some(key) = key {
        cmd.env("ND7_TEST_RELEASE_KEY", key);
    }
    cmd.output().expect("run nd7 self-update")
}

/// An older (or the same) signed release is refused by the binary with 2,
/// nothing replaced, until `--allow-downgrade` is given: a release signed
/// once stays signed, and an older one may bring back a fixed flaw
/// (ADR-0027). Guards `Accept::running(downgrade)` in src/bin/nd7.rs's
/// `run_self_update` (with `true` there the refusals pass, with `false`
/// the downgrade asked for fails).
#[test]
fn an_older_release_is_refused_unless_a_downgrade_is_asked_for() {
    let public = nd7_core::vault::hex(&key().verifying_key().to_bytes());
    let dir = installed();
    let binary = std::fs::read(dir.path().join("nd7")).expect("nd7");
    for version in ["0.0.1", RUNNING] {
        let base = release(version);
        let out = self_update(dir.path(), &["--from", &base], Some(&public));
        assert_eq!(out.status.code(), Some(2), "{version}: {}", stderr(&out));
        assert_eq!(
            stderr(&out).trim_end(),
            format!(
                "nd7 self-update: the release is {version}, not newer than this nd7 ({RUNNING}); nothing was replaced (--allow-downgrade installs it anyway)"
            )
        );
        assert_eq!(stdout(&out), "");
        assert_eq!(
            std::fs::read(dir.path().join("nd7-exec")).expect("exec"),
            b"old exec"
        );
        assert_eq!(
            std::fs::read(dir.path().join("nd7-record")).expect("record"),
            b"old record"
        );
        assert!(
            std::fs::read(dir.path().join("nd7")).expect("nd7") == binary,
            "nd7 untouched"
        );
    }

    let base = release("0.0.1");
    let out = self_update(
        dir.path(),
        &["--from", &base, "--allow-downgrade"],
        Some(&public),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "nd7 self-update: now 0.0.1\n");
    assert_eq!(
        std::fs::read(dir.path().join("nd7-exec")).expect("exec"),
        b"new exec"
    );
    // The hooks' binary is replaced with the others (ADR-0151).
    assert_eq!(
        std::fs::read(dir.path().join("nd7-record")).expect("record"),
        b"new record"
    );
    assert_eq!(
        std::fs::read(dir.path().join("nd7")).expect("nd7"),
        b"new nd7"
    );
}

/// A newer release signed by another key, and a build with no key at all,
/// replace nothing.
#[test]
fn a_release_the_key_did_not_sign_or_a_build_without_a_key_replaces_nothing() {
    let dir = installed();
    let base = release("99.0.0");
    let other = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]).verifying_key();
    let other = nd7_core::vault::hex(&other.to_bytes());
    let out = self_update(dir.path(), &["--from", &base], Some(&other));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("does not verify against nd7's release key"),
        "{}",
        stderr(&out)
    );
    let out = self_update(dir.path(), &["--from", &base], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim_end(),
        "nd7 self-update: this build has no release key to check a release against; install a release build, or build it from source (docs/setup.md)"
    );
    assert_eq!(
        std::fs::read(dir.path().join("nd7-exec")).expect("exec"),
        b"old exec"
    );
}

/// `self-update` is a subcommand like any other: in `--help`, with its own
/// help and its flags, and a stray argument is clap's usage error (2).
#[test]
fn self_update_is_on_the_command_line() {
    let nd7 = env!("CARGO_BIN_EXE_nd7");
    let help = Command::new(nd7)
        .arg("--help")
        .output()
        .expect("nd7 --help");
    assert!(stdout(&help).contains("self-update"), "{}", stdout(&help));
    let own = Command::new(nd7)
        .args(["self-update", "--help"])
        .output()
        .expect("help");
    assert!(stdout(&own).contains("--allow-downgrade") && stdout(&own).contains("--from <URL>"));
    let stray = Command::new(nd7)
        .args(["self-update", "--force"])
        .output()
        .expect("stray");
    assert_eq!(stray.status.code(), Some(2));
    assert!(
        stderr(&stray).contains("unexpected argument '--force'"),
        "{}",
        stderr(&stray)
    );
}
