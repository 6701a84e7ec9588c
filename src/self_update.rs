//! `nd7 self-update` (feature `self-update`, off by default): replaces `nd7`,
//! `nd7-exec` and `nd7-record` with a release's, after checking the
//! release's signature.
//!
//! A release publishes, per target, `manifest-<target>` and
//! `manifest-<target>.sig` beside that target's binaries (one release holds
//! every target's, ADR-0124). The manifest names its target and, per binary,
//! the BLAKE3 of its bytes and the file to fetch; the signature is Ed25519 over a context line and the
//! manifest, by the release key compiled into release builds
//! (`ND7_RELEASE_KEY`, 64 hex digits). Nothing is replaced unless the
//! signature, the target and every hash check out; then each binary is
//! written beside the one it replaces at its mode and renamed over it, synced
//! ([`crate::files::replace`]), `nd7-exec` first and `nd7` last; an
//! `nd7-record` not installed before (an nd7 from before ADR-0151) is made.
//! A copy installed by Homebrew or Nix is never touched: their package
//! manager owns it.
//!
//! ```text
//! nd7-release v1
//! version 0.2.0
//! target x86_64-unknown-linux-gnu
//! file nd7 <blake3 hex> nd7-x86_64-unknown-linux-gnu
//! file nd7-exec <blake3 hex> nd7-exec-x86_64-unknown-linux-gnu
//! file nd7-record <blake3 hex> nd7-record-x86_64-unknown-linux-gnu
//! ```

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signature, Verifier, VerifyingKey};

use crate::files::{self, Durability};
use crate::http_client;
use semver::Version;

/// Where releases are published.
pub const DEFAULT_SOURCE: &str = "https://github.com/nd7-dev/nd7/releases/latest/download";

/// The key releases are signed with, when this build was given one.
pub const RELEASE_KEY: Option<&str> = option_env!("ND7_RELEASE_KEY");

/// The release key this nd7 trusts: [`RELEASE_KEY`]. In test builds only
/// (debug builds, or the `fault-injection` feature, which shipped builds
/// never enable), a build given no key takes `$ND7_TEST_RELEASE_KEY`, so a
/// test can sign a release for the real binary; a key built in is never
/// replaced.
pub fn release_key() -> Option<String> {
    #[cfg(any(debug_assertions, feature = "fault-injection"))]
    if RELEASE_KEY.is_none() {
        return std::env::var("ND7_TEST_RELEASE_KEY").ok();
    }
    RELEASE_KEY.map(str::to_string)
}

/// The version of the running nd7, which a release must be newer than.
pub const RUNNING: &str = env!("CARGO_PKG_VERSION");

/// The version an update compares releases with: [`RUNNING`]. In test
/// builds only (as [`release_key`]), `$ND7_TEST_VERSION` stands in for it,
/// so a test can install a release over an "older" copy of the one binary
/// it built; shipped builds never read it.
pub fn running() -> String {
    #[cfg(any(debug_assertions, feature = "fault-injection"))]
    if let Ok(version) = std::env::var("ND7_TEST_VERSION") {
        return version;
    }
    RUNNING.to_string()
}

/// The release's files that name and sign this target's binaries:
/// `manifest-<target>` and `manifest-<target>.sig`.
pub fn manifest_name(target: &str) -> (String, String) {
    let manifest = format!("manifest-{target}");
    let signature = format!("{manifest}.sig");
    (manifest, signature)
}

/// The target this binary was built for; a release for another is refused.
pub const TARGET: &str = env!("ND7_TARGET");

/// What the signature covers, before the manifest's bytes.
pub const CONTEXT: &[u8] = b"nd7 release manifest v1\n";

/// The largest file of a release fetched: a binary, with room to grow.
const MAX_FILE_BYTES: u64 = 512 << 20;

/// The binaries a release replaces, in the order they are replaced.
const BINARIES: [&str; 3] = ["nd7-exec", "nd7-record", "nd7"];

#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error("{0} was installed by Homebrew; update it with `brew upgrade nd7`")]
    Homebrew(PathBuf),
    #[error("{0} is in the Nix store; update the flake input (or `nix profile upgrade nd7`)")]
    Nix(PathBuf),
    #[error(
        "this build has no release key to check a release against; install a release build, or build it from source (docs/setup.md)"
    )]
    NoKey,
    #[error("the release key compiled in is not 64 hex digits")]
    BadKey,
    #[error(
        "the release's signature does not verify against nd7's release key; nothing was replaced"
    )]
    BadSignature,
    #[error("manifest line {line}: {what}")]
    Manifest { line: usize, what: String },
    #[error("the release is for {0}, this nd7 for {TARGET}; nothing was replaced")]
    Target(String),
    #[error(
        "the release is {offered}, not newer than this nd7 ({running}); nothing was replaced (--allow-downgrade installs it anyway)"
    )]
    NotNewer { offered: Version, running: Version },
    #[error("{name}: its BLAKE3 is {got}, the signed manifest says {want}; nothing was replaced")]
    Hash {
        name: String,
        got: String,
        want: String,
    },
    #[error("{url}: {detail}")]
    Fetch { url: String, detail: String },
    #[error("{path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
}

crate::files::io_context_into!(UpdateError);

/// A verified manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    pub version: Version,
    pub target: String,
    /// (binary, BLAKE3 hex, file to fetch), for every binary in [`BINARIES`].
    pub files: Vec<(String, String, String)>,
}

/// Refuses an `nd7` that a package manager owns.
pub fn refuse_managed(exe: &Path) -> Result<(), UpdateError> {
    let text = exe.to_string_lossy();
    if text.contains("/Cellar/") || text.contains("/homebrew/") || text.contains("/linuxbrew/") {
        return Err(UpdateError::Homebrew(exe.to_path_buf()));
    }
    if text.starts_with("/nix/store/") {
        return Err(UpdateError::Nix(exe.to_path_buf()));
    }
    Ok(())
}

/// Checks the signature, then reads the manifest. Pure.
pub fn verify(
    manifest: &[u8],
    signature_hex: &str,
    key: &[u8; 32],
) -> Result<Manifest, UpdateError> {
    let key = VerifyingKey::from_bytes(key).map_err(|_| UpdateError::BadKey)?;
    let signature = crate::vault::unhex::<64>(signature_hex.trim())
        .map(|b| Signature::from_bytes(&b))
        .ok_or(UpdateError::BadSignature)?;
    let mut signed = CONTEXT.to_vec();
    signed.extend_from_slice(manifest);
    key.verify(&signed, &signature)
        .map_err(|_| UpdateError::BadSignature)?;
    parse(manifest)
}

fn parse(manifest: &[u8]) -> Result<Manifest, UpdateError> {
    let bad = |line: usize, what: &str| UpdateError::Manifest {
        line,
        what: what.to_string(),
    };
    let text = std::str::from_utf8(manifest).map_err(|_| bad(1, "not UTF-8"))?;
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    match lines.next() {
        Some((_, "nd7-release v1")) => {}
        _ => return Err(bad(1, "expected `nd7-release v1`")),
    }
    let (mut version, mut target, mut files) = (None, None, Vec::new());
    for (n, line) in lines {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["version", v] => {
                let v = Version::parse(v).map_err(|e| {
                    bad(n, &format!("version {v:?} is not a semantic version: {e}"))
                })?;
                version = Some(v);
            }
            ["target", t] => target = Some(t.to_string()),
            ["file", name, hash, file]
                if BINARIES.contains(name)
                    && crate::vault::unhex::<32>(hash).is_some()
                    && !file.contains('/')
                    && !file.starts_with('.') =>
            {
                files.push((name.to_string(), hash.to_string(), file.to_string()))
            }
            [] | [""] => {}
            _ => return Err(bad(n, "not a version, target or file line")),
        }
    }
    let version = version.ok_or_else(|| bad(0, "no version line"))?;
    let target = target.ok_or_else(|| bad(0, "no target line"))?;
    for name in BINARIES {
        if files.iter().filter(|(n, _, _)| n == name).count() != 1 {
            return Err(bad(0, &format!("expected one file line for {name}")));
        }
    }
    Ok(Manifest {
        version,
        target,
        files,
    })
}

/// Which releases an update may install.
#[derive(Clone, Debug)]
pub struct Accept {
    /// The running nd7's version.
    pub running: Version,
    /// Install a release that is not newer than `running` too.
    pub downgrade: bool,
}

impl Accept {
    /// Releases newer than this nd7, or any release with `downgrade`.
    pub fn running(downgrade: bool) -> Accept {
        Accept {
            running: Version::parse(&running()).unwrap_or_else(|_| {
                Version::parse(RUNNING)
                    .expect("Cargo requires a package's version to be a semantic version")
            }),
            downgrade,
        }
    }

    /// Refuses a release that is not newer than the running nd7, unless
    /// downgrades were asked for. Pure. Newer by SemVer precedence: build
    /// metadata is ignored (`1.0.0+b` is not newer than `1.0.0`), where
    /// `Version`'s `Ord`, which the `self_update` crate compares with,
    /// would order it.
    pub fn check(&self, offered: &Version) -> Result<(), UpdateError> {
        if offered.cmp_precedence(&self.running).is_gt() || self.downgrade {
            Ok(())
        } else {
            Err(UpdateError::NotNewer {
                offered: offered.clone(),
                running: self.running.clone(),
            })
        }
    }
}

/// Fetches the release at `base` (HTTPS trusted as `trust` says), checks
/// it with `key` and `accept`, and replaces the binaries in `dir`. Returns
/// the version installed.
pub fn update(
    dir: &Path,
    base: &str,
    trust: &http_client::Trust,
    key: &[u8; 32],
    accept: &Accept,
) -> Result<Version, UpdateError> {
    let client = http_client::Client::new(base, trust).map_err(|e| UpdateError::Fetch {
        url: base.to_string(),
        detail: e.to_string(),
    })?;
    let fetch = |file: &str| -> Result<Vec<u8>, UpdateError> {
        let url = client.url(&format!("/{file}"));
        match client.fetch("GET", &format!("/{file}"), b"", &[], MAX_FILE_BYTES) {
            Ok(reply) if reply.status == 200 => Ok(reply.body),
            Ok(reply) => Err(UpdateError::Fetch {
                url,
                detail: format!("HTTP {}", reply.status),
            }),
            Err(e) => Err(UpdateError::Fetch {
                url,
                detail: e.to_string(),
            }),
        }
    };
    let (manifest_file, signature_file) = manifest_name(TARGET);
    let manifest = fetch(&manifest_file)?;
    let signature = fetch(&signature_file)?;
    let manifest = verify(&manifest, &String::from_utf8_lossy(&signature), key)?;
    if manifest.target != TARGET {
        return Err(UpdateError::Target(manifest.target));
    }
    accept.check(&manifest.version)?;
    // Everything fetched and checked before anything is written.
    let mut staged = Vec::new();
    for name in BINARIES {
        let (_, want, file) = manifest
            .files
            .iter()
            .find(|(n, _, _)| n == name)
            .ok_or(UpdateError::BadSignature)?;
        let bytes = fetch(file)?;
        let got = blake3::hash(&bytes).to_hex().to_string();
        if &got != want {
            return Err(UpdateError::Hash {
                name: name.to_string(),
                got,
                want: want.clone(),
            });
        }
        staged.push((name, bytes));
    }
    for (name, bytes) in staged {
        let target = dir.join(name);
        // The binary keeps the mode it had (as a package's replace would),
        // without set-id bits; a new one gets 0755.
        let mode = fs::metadata(&target).map_or(0o755, |m| m.permissions().mode() & 0o777);
        files::replace(&target, &bytes, mode, Durability::Durable)?;
    }
    Ok(manifest.version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::Signer;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;

    fn key() -> ed25519_dalek::SigningKey {
        ed25519_dalek::SigningKey::from_bytes(&[7u8; 32])
    }

    /// This target's manifest and signature, as a release names them.
    const MANIFEST: &str = concat!("manifest-", env!("ND7_TARGET"));
    const SIGNATURE: &str = concat!("manifest-", env!("ND7_TARGET"), ".sig");

    #[test]
    fn each_target_has_its_own_manifest() {
        assert_eq!(manifest_name(TARGET), (MANIFEST.into(), SIGNATURE.into()));
    }

    fn sign(manifest: &str, key: &ed25519_dalek::SigningKey) -> String {
        let mut signed = CONTEXT.to_vec();
        signed.extend_from_slice(manifest.as_bytes());
        crate::vault::hex(&key.sign(&signed).to_bytes())
    }

    fn manifest(target: &str, nd7: &[u8], exec: &[u8]) -> String {
        manifest_of("9.9.9", target, nd7, exec)
    }

    /// What every test release holds as its nd7-record.
    const RECORD: &[u8] = b"new record";

    fn manifest_of(version: &str, target: &str, nd7: &[u8], exec: &[u8]) -> String {
        format!(
            "nd7-release v1\nversion {version}\ntarget {target}\nfile nd7 {} nd7-bin\nfile nd7-exec {} nd7-exec-bin\nfile nd7-record {} nd7-record-bin\n",
            blake3::hash(nd7).to_hex(),
            blake3::hash(exec).to_hex(),
            blake3::hash(RECORD).to_hex()
        )
    }

    /// What `nd7 self-update` accepts by default.
    fn newer_only() -> Accept {
        Accept::running(false)
    }

    /// A release of `version`, signed with the release key, on loopback.
    fn serve_release(version: &str) -> String {
        let m = manifest_of(version, TARGET, b"new nd7", b"new exec");
        serve(vec![
            (MANIFEST, m.clone().into_bytes()),
            (SIGNATURE, sign(&m, &key()).into_bytes()),
            ("nd7-bin", b"new nd7".to_vec()),
            ("nd7-exec-bin", b"new exec".to_vec()),
            ("nd7-record-bin", RECORD.to_vec()),
        ])
    }

    /// Serves `files` on loopback until the test ends.
    fn serve(files: Vec<(&'static str, Vec<u8>)>) -> String {
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
                let path = request
                    .split(' ')
                    .nth(1)
                    .unwrap_or("/")
                    .trim_start_matches('/');
                let (status, body) = match files.iter().find(|(n, _)| *n == path) {
                    Some((_, b)) => ("200 OK", b.clone()),
                    None => ("404 Not Found", Vec::new()),
                };
                let mut s = &stream;
                let _ = write!(
                    s,
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(&body);
            }
        });
        url
    }

    fn installed() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join("nd7"), b"old nd7").expect("write");
        fs::write(dir.path().join("nd7-exec"), b"old exec").expect("write");
        for (name, mode) in [("nd7", 0o755), ("nd7-exec", 0o700)] {
            fs::set_permissions(dir.path().join(name), fs::Permissions::from_mode(mode))
                .expect("chmod");
        }
        dir
    }

    fn contents(dir: &Path) -> (Vec<u8>, Vec<u8>) {
        (
            fs::read(dir.join("nd7")).expect("nd7"),
            fs::read(dir.join("nd7-exec")).expect("nd7-exec"),
        )
    }

    /// [`update`] with the test release key.
    fn update_from(dir: &Path, url: &str, accept: &Accept) -> Result<Version, UpdateError> {
        update(
            dir,
            url,
            &http_client::Trust::Default,
            &key().verifying_key().to_bytes(),
            accept,
        )
    }

    #[test]
    fn a_signed_release_replaces_every_binary() {
        let url = serve_release("9.9.9");
        let dir = installed();
        let version = update_from(dir.path(), &url, &newer_only()).expect("update");
        assert_eq!(version.to_string(), "9.9.9");
        assert_eq!(
            contents(dir.path()),
            (b"new nd7".to_vec(), b"new exec".to_vec())
        );
        // An nd7 from before nd7-record had none: the update makes it, 0755.
        let record = dir.path().join("nd7-record");
        assert_eq!(fs::read(&record).expect("nd7-record"), RECORD);
        assert_eq!(
            fs::metadata(&record).expect("stat").permissions().mode() & 0o777,
            0o755
        );
        // Each keeps its mode, as the binary it replaced had it.
        for (name, mode) in [("nd7", 0o755), ("nd7-exec", 0o700)] {
            let got = fs::metadata(dir.path().join(name))
                .expect("stat")
                .permissions()
                .mode();
            assert_eq!(got & 0o777, mode, "{name}");
        }
    }

    #[test]
    fn a_bad_signature_a_wrong_hash_or_target_replace_nothing() {
        let good = manifest(TARGET, b"new nd7", b"new exec");
        let other_key = ed25519_dalek::SigningKey::from_bytes(&[8u8; 32]);
        type Case = (String, String, &'static [u8], fn(&UpdateError) -> bool);
        let cases: Vec<Case> = vec![
            (good.clone(), sign(&good, &other_key), b"new nd7", |e| {
                matches!(e, UpdateError::BadSignature)
            }),
            (good.clone(), "00".repeat(64), b"new nd7", |e| {
                matches!(e, UpdateError::BadSignature)
            }),
            (good.clone(), sign(&good, &key()), b"tampered nd7", |e| {
                matches!(e, UpdateError::Hash { .. })
            }),
            (
                manifest("mips-unknown-none", b"new nd7", b"new exec"),
                String::new(),
                b"new nd7",
                |e| matches!(e, UpdateError::Target(_)),
            ),
        ];
        for (m, sig, nd7_bytes, expected) in cases {
            let sig = if sig.is_empty() {
                sign(&m, &key())
            } else {
                sig
            };
            let url = serve(vec![
                (MANIFEST, m.clone().into_bytes()),
                (SIGNATURE, sig.into_bytes()),
                ("nd7-bin", nd7_bytes.to_vec()),
                ("nd7-exec-bin", b"new exec".to_vec()),
                ("nd7-record-bin", RECORD.to_vec()),
            ]);
            let dir = installed();
            let err = update_from(dir.path(), &url, &newer_only()).expect_err("refused");
            assert!(expected(&err), "{err}");
            assert_eq!(
                contents(dir.path()),
                (b"old nd7".to_vec(), b"old exec".to_vec())
            );
        }
    }

    #[test]
    fn manifests_are_read_strictly() {
        let k = key();
        let pk = k.verifying_key().to_bytes();
        let h = "ab".repeat(32);
        for bad in [
            "nd7-release v2\n".to_string(),
            format!(
                "nd7-release v1\nversion 1.0.0\ntarget t\nfile nd7 {h} ../x\nfile nd7-exec {h} y\n"
            ),
            format!("nd7-release v1\nversion 1.0.0\ntarget t\nfile nd7 {h} x\n"),
            format!(
                "nd7-release v1\nversion 1.0.0\ntarget t\nfile sh {h} x\nfile nd7 {h} x\nfile nd7-exec {h} y\nfile nd7-record {h} z\n"
            ),
            // A release without nd7-record: the hooks would run an old one.
            format!(
                "nd7-release v1\nversion 1.0.0\ntarget t\nfile nd7 {h} x\nfile nd7-exec {h} y\n"
            ),
        ] {
            assert!(
                matches!(
                    verify(bad.as_bytes(), &sign(&bad, &k), &pk),
                    Err(UpdateError::Manifest { .. })
                ),
                "{bad}"
            );
        }
    }

    /// A downgrade attack: an older release, properly signed (say, one with
    /// a flaw fixed since), offered to a newer nd7. Guards `accept.check` in
    /// `update`.
    #[test]
    fn an_older_or_same_release_is_refused_unless_downgrades_are_asked_for() {
        let running = Version::parse(RUNNING).expect("semver");
        let older = if running.patch > 0 {
            Version::new(running.major, running.minor, running.patch - 1)
        } else {
            Version::parse(&format!("{running}-rc.1")).expect("semver")
        };
        for offered in [older.to_string(), RUNNING.to_string(), "0.0.1".into()] {
            let url = serve_release(&offered);
            let dir = installed();
            let err =
                update_from(dir.path(), &url, &newer_only()).expect_err("a downgrade is refused");
            assert!(matches!(err, UpdateError::NotNewer { .. }), "{err}");
            let text = err.to_string();
            assert!(text.contains(&offered), "{text}");
            assert!(text.contains("--allow-downgrade"), "{text}");
            assert_eq!(
                contents(dir.path()),
                (b"old nd7".to_vec(), b"old exec".to_vec()),
                "nothing replaced"
            );
            let allowed = Accept {
                downgrade: true,
                ..newer_only()
            };
            let version = update_from(dir.path(), &url, &allowed)
                .expect("an explicit downgrade goes through");
            assert_eq!(version.to_string(), offered);
            assert_eq!(contents(dir.path()).0, b"new nd7".to_vec());
        }
    }

    #[test]
    fn versions_are_ordered_as_semantic_versions() {
        let accept = |running: &str| Accept {
            running: Version::parse(running).expect("semver"),
            downgrade: false,
        };
        let v = |s: &str| Version::parse(s).expect("semver");
        // Not text order: 0.10.0 is newer than 0.9.0.
        assert!(accept("0.9.0").check(&v("0.10.0")).is_ok());
        assert!(accept("0.10.0").check(&v("0.9.0")).is_err());
        // A release candidate comes before its release.
        assert!(accept("1.0.0-rc.1").check(&v("1.0.0")).is_ok());
        assert!(accept("1.0.0").check(&v("1.0.0-rc.2")).is_err());
        assert!(accept("1.0.0").check(&v("1.0.0")).is_err());
        // SemVer 2.0.0's own example of precedence, each newer than the last.
        let chain = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.0.1-0",
            "1.0.1",
        ];
        for pair in chain.windows(2) {
            assert!(accept(pair[0]).check(&v(pair[1])).is_ok(), "{pair:?}");
            assert!(accept(pair[1]).check(&v(pair[0])).is_err(), "{pair:?}");
        }
        // Build metadata does not count: the same release rebuilt, or any
        // signed build of it, is not an update. Guards `cmp_precedence`.
        for same in ["1.0.0+build.2", "1.0.0+zzz", "1.0.0+0"] {
            assert!(accept("1.0.0").check(&v(same)).is_err(), "{same}");
            assert!(accept("1.0.0+build.1").check(&v(same)).is_err(), "{same}");
        }
        assert!(accept("1.0.0+build.9").check(&v("1.0.1+build.1")).is_ok());
    }

    #[test]
    fn package_managers_keep_their_copies() {
        assert!(matches!(
            refuse_managed(Path::new("/opt/homebrew/Cellar/nd7/0.1.0/bin/nd7")),
            Err(UpdateError::Homebrew(_))
        ));
        assert!(matches!(
            refuse_managed(Path::new("/nix/store/abc-nd7-0.1.0/bin/nd7")),
            Err(UpdateError::Nix(_))
        ));
        assert!(refuse_managed(Path::new("/home/u/.cargo/bin/nd7")).is_ok());
        let err = refuse_managed(Path::new("/usr/local/Cellar/nd7/1/bin/nd7")).expect_err("brew");
        assert!(err.to_string().contains("brew upgrade nd7"), "{err}");
    }
}
