//! The release path, end to end on loopback (ADR-0124, ADR-0125): the local
//! dry run (`scripts/release.sh --local`) packs the binaries this test build
//! made (no build of its own: a few seconds of tar, gzip and hashing), signs
//! them with a throwaway key, and the tests serve the result on 127.0.0.1.
//! install.sh installs from it and refuses what does not check out; the
//! installed nd7 updates itself to it, forward only; the generated formula
//! names the archive's SHA-256. Needs b3sum, ssh-keygen, openssl and xxd
//! (scripts/test.sh --tools installs them).
#![cfg(feature = "self-update")]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use nd7_core::self_update::{RUNNING, TARGET};

use crate::common::{stderr, stdout};

/// The dry run's output: `dist/` (what a release publishes) and the
/// throwaway key's public half, made once for every test here.
struct DryRun {
    dist: PathBuf,
    key_hex: String,
}

fn dry_run() -> &'static DryRun {
    static RUN: OnceLock<DryRun> = OnceLock::new();
    RUN.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("release-local");
        let bins = Path::new(env!("CARGO_BIN_EXE_nd7"))
            .parent()
            .expect("target/debug");
        let run = Command::new("bash")
            .arg(repo("scripts/release.sh"))
            .arg("--local")
            .arg("--bin-dir")
            .arg(bins)
            .arg("--out")
            .arg(&out)
            .output()
            .expect("run scripts/release.sh");
        assert!(
            run.status.success(),
            "scripts/release.sh --local: {}{}",
            stdout(&run),
            stderr(&run)
        );
        let key_hex = std::fs::read_to_string(out.join("key/release-key.hex")).expect("key");
        DryRun {
            dist: out.join("dist"),
            key_hex: key_hex.trim().to_string(),
        }
    })
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn archive_name() -> String {
    format!("nd7-{RUNNING}-{TARGET}.tar.gz")
}

/// Serves the files of `dir` on loopback until the test ends; the base URL.
fn serve_dir(dir: PathBuf) -> String {
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
            let name = request.split(' ').nth(1).unwrap_or("/");
            let name = name.trim_start_matches('/');
            let body = (!name.contains('/') && !name.is_empty())
                .then(|| std::fs::read(dir.join(name)).ok())
                .flatten();
            let status = if body.is_some() {
                "200 OK"
            } else {
                "404 Not Found"
            };
            let body = body.unwrap_or_default();
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

/// A copy of the dry run's files, to tamper with.
fn copy_of_dist() -> tempfile::TempDir {
    let copy = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    for entry in std::fs::read_dir(&dry_run().dist).expect("dist") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), copy.path().join(entry.file_name())).expect("copy");
    }
    copy
}

/// Runs `script` (an install.sh) with `args`.
fn install_sh(script: &Path, args: &[&str]) -> Output {
    Command::new("sh")
        .arg(script)
        .args(args)
        .output()
        .expect("run install.sh")
}

fn install_from(url: &str, prefix: &Path, extra: &[&str]) -> Output {
    let prefix = prefix.to_str().expect("utf-8 prefix");
    let mut args = vec!["--from", url, "--target", TARGET, "--prefix", prefix];
    args.extend_from_slice(extra);
    install_sh(&dry_run().dist.join("install.sh"), &args)
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    nd7_core::vault::hex(&sha2::Sha256::digest(bytes))
}

/// install.sh from the release: checks the signature and the sum, installs
/// the binaries, completions and man page, says what it did; the installed
/// nd7 is the packaged one.
#[test]
fn install_sh_installs_the_release_it_checked() {
    let url = serve_dir(dry_run().dist.clone());
    let prefix = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("prefix");
    let out = install_from(&url, prefix.path(), &["--version", RUNNING]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let said = stdout(&out);
    assert!(
        said.contains(&format!(
            "nd7 {RUNNING} for {TARGET}, from {url} (signature and SHA-256 checked), installed:"
        )),
        "{said}"
    );
    for file in [
        "bin/nd7",
        "bin/nd7-exec",
        "bin/nd7-record",
        "share/bash-completion/completions/nd7",
        "share/zsh/site-functions/_nd7",
        "share/fish/vendor_completions.d/nd7.fish",
        "share/man/man1/nd7.1",
    ] {
        assert!(
            said.contains(&format!("{}/{file}", prefix.path().display())),
            "{file}: {said}"
        );
    }
    // The suite's build has the vault server, as a Linux release does.
    let vault = Path::new(env!("CARGO_BIN_EXE_nd7")).with_file_name("nd7-vault");
    assert_eq!(
        said.contains(&format!("{}/bin/nd7-vault", prefix.path().display())),
        vault.exists(),
        "nd7-vault installed where the release has it: {said}"
    );
    let installed = std::fs::read(prefix.path().join("bin/nd7")).expect("nd7");
    let packaged = std::fs::read(dry_run().dist.join(format!("nd7-{TARGET}"))).expect("raw nd7");
    assert!(installed == packaged, "the installed nd7 is the release's");
    // The hooks' binary (ADR-0151), which setup then finds beside nd7.
    let installed = std::fs::read(prefix.path().join("bin/nd7-record")).expect("nd7-record");
    let built = std::fs::read(env!("CARGO_BIN_EXE_nd7-record")).expect("built nd7-record");
    assert!(
        installed == built,
        "the installed nd7-record is the one built"
    );
    let version = Command::new(prefix.path().join("bin/nd7"))
        .arg("--version")
        .output()
        .expect("nd7 --version");
    assert_eq!(stdout(&version), format!("nd7 {RUNNING}\n"));
    let man = std::fs::read_to_string(prefix.path().join("share/man/man1/nd7.1")).expect("man");
    assert!(man.starts_with(".ie") || man.contains(".TH nd7 1"), "{man}");
    assert!(
        man.contains("self\\-update"),
        "the man page has every command"
    );
}

/// The attacks on the download: a changed archive (its sum no longer
/// matches), a changed archive with SHA256SUMS rewritten to match (the
/// signature no longer verifies), another release than --version pins, and
/// the repository's own install.sh, which carries no key. Each exits 2 and
/// installs nothing. Guards install.sh's `ssh-keygen -Y verify` and its
/// SHA-256 comparison.
#[test]
fn install_sh_refuses_a_changed_archive_or_list_and_installs_nothing() {
    let archive = archive_name();
    let prefix = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("prefix");
    let p = prefix.path().to_str().expect("utf-8");

    let changed = copy_of_dist();
    let mut bytes = std::fs::read(changed.path().join(&archive)).expect("archive");
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(changed.path().join(&archive), &bytes).expect("write");
    let out = install_from(&serve_dir(changed.path().into()), prefix.path(), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(&format!("{archive}: its SHA-256 is {}", sha256_hex(&bytes))),
        "{}",
        stderr(&out)
    );

    let sums = std::fs::read_to_string(changed.path().join("SHA256SUMS")).expect("sums");
    let want = sha256_hex(&std::fs::read(dry_run().dist.join(&archive)).expect("archive"));
    let forged = sums.replace(&want, &sha256_hex(&bytes));
    assert_ne!(forged, sums);
    std::fs::write(changed.path().join("SHA256SUMS"), forged).expect("write");
    let out = install_from(&serve_dir(changed.path().into()), prefix.path(), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(
            "SHA256SUMS: its signature does not verify against the release key; nothing was installed"
        ),
        "{}",
        stderr(&out)
    );

    let url = serve_dir(dry_run().dist.clone());
    let out = install_from(&url, prefix.path(), &["--version", "0.0.1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(&format!("the release is {RUNNING}, not 0.0.1")),
        "{}",
        stderr(&out)
    );

    let out = install_sh(
        &repo("install/install.sh"),
        &["--from", &url, "--target", TARGET, "--prefix", p],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("carries no release key"),
        "{}",
        stderr(&out)
    );

    let left: Vec<_> = std::fs::read_dir(prefix.path()).expect("prefix").collect();
    assert!(left.is_empty(), "nothing installed: {left:?}");
}

/// `nd7 self-update` from a script-installed copy: an older installed build
/// (the test build, told it is 0.0.9) moves to the release, both binaries
/// replaced by the release's; a newer one (told 9.0.0) refuses it and keeps
/// what it has.
#[test]
fn self_update_moves_an_older_install_to_the_release_and_refuses_the_reverse() {
    let run = dry_run();
    let url = serve_dir(run.dist.clone());
    let prefix = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("prefix");
    let out = install_from(&url, prefix.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let bin = prefix.path().join("bin");
    let update = |pretend: &str| {
        std::fs::write(bin.join("nd7-exec"), b"old exec").expect("old exec");
        std::fs::write(bin.join("nd7-record"), b"old record").expect("old record");
        Command::new(bin.join("nd7"))
            .args(["self-update", "--from", &url])
            .env("ND7_TEST_RELEASE_KEY", &run.key_hex)
            .env("ND7_TEST_VERSION", pretend)
            .output()
            .expect("nd7 self-update")
    };
    let release_exec = std::fs::read(run.dist.join(format!("nd7-exec-{TARGET}"))).expect("exec");
    let release_record =
        std::fs::read(run.dist.join(format!("nd7-record-{TARGET}"))).expect("record");

    let out = update("0.0.9");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("nd7 self-update: now {RUNNING}\n"));
    assert!(std::fs::read(bin.join("nd7-exec")).expect("exec") == release_exec);
    assert!(std::fs::read(bin.join("nd7-record")).expect("record") == release_record);

    let out = update("9.0.0");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim_end(),
        format!(
            "nd7 self-update: the release is {RUNNING}, not newer than this nd7 (9.0.0); nothing was replaced (--allow-downgrade installs it anyway)"
        )
    );
    assert_eq!(
        std::fs::read(bin.join("nd7-exec")).expect("exec"),
        b"old exec"
    );
}

/// The manifest the dry run signed with openssl is one `nd7 self-update`
/// accepts, naming the raw binaries by their BLAKE3.
#[test]
fn the_release_manifest_verifies_as_self_update_reads_it() {
    let run = dry_run();
    let (manifest, signature) = nd7_core::self_update::manifest_name(TARGET);
    let key = nd7_core::vault::unhex::<32>(&run.key_hex).expect("key hex");
    let m = nd7_core::self_update::verify(
        &std::fs::read(run.dist.join(manifest)).expect("manifest"),
        &std::fs::read_to_string(run.dist.join(signature)).expect("sig"),
        &key,
    )
    .expect("the manifest verifies");
    assert_eq!(
        (m.version.to_string(), m.target.as_str()),
        (RUNNING.to_string(), TARGET)
    );
    let mut names: Vec<&str> = m.files.iter().map(|(n, _, _)| n.as_str()).collect();
    names.sort();
    assert_eq!(names, ["nd7", "nd7-exec", "nd7-record"]);
    for (name, hash, file) in &m.files {
        assert_eq!(file, &format!("{name}-{TARGET}"));
        let bytes = std::fs::read(run.dist.join(file)).expect("binary");
        assert_eq!(&blake3::hash(&bytes).to_hex().to_string(), hash);
    }
}

/// The formula the release generates for the tap names this archive with
/// its SHA-256, keeps head, the service, completions, man page and the test,
/// and is valid Ruby.
#[test]
fn the_generated_formula_names_the_archive_and_its_sha256() {
    let run = dry_run();
    let formula = std::fs::read_to_string(run.dist.join("nd7.rb")).expect("nd7.rb");
    let archive = archive_name();
    let sum = sha256_hex(&std::fs::read(run.dist.join(&archive)).expect("archive"));
    let url =
        format!("url \"https://github.com/nd7-dev/nd7/releases/download/v{RUNNING}/{archive}\"");
    let at = formula
        .find(&url)
        .unwrap_or_else(|| panic!("{url} in {formula}"));
    assert!(
        formula[at..]
            .lines()
            .nth(1)
            .is_some_and(|l| l.trim() == format!("sha256 \"{sum}\"")),
        "{formula}"
    );
    for needle in [
        "head do",
        "service do",
        "run [opt_bin/\"nd7\", \"ship\"]",
        "man1.install \"doc/nd7.1\"",
        "bin.install \"nd7\", \"nd7-exec\", \"nd7-record\"",
        "zsh_completion.install",
        "test do",
        "nd7 verify",
        &format!("version \"{RUNNING}\""),
    ] {
        assert!(formula.contains(needle), "the formula lacks {needle}");
    }
    let out = Command::new("ruby")
        .arg("-c")
        .arg(run.dist.join("nd7.rb"))
        .output()
        .expect("ruby is needed: apt-get install ruby");
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The archive carries the licences Cargo.toml names (MIT OR Apache-2.0),
/// beside the README, so a copy handed on keeps its terms.
#[test]
fn the_archive_carries_the_licences() {
    let run = dry_run();
    let out = Command::new("tar")
        .arg("-tzf")
        .arg(run.dist.join(archive_name()))
        .output()
        .expect("tar");
    assert!(out.status.success(), "{}", stderr(&out));
    let listing = stdout(&out);
    for file in ["README.md", "LICENSE-MIT", "LICENSE-APACHE"] {
        assert!(
            listing.lines().any(|l| l.ends_with(&format!("/{file}"))),
            "the archive lacks {file}: {listing}"
        );
    }
}

/// A copy of what `scripts/release.sh check-tag` reads: the script,
/// Cargo.toml and each crate's Cargo.toml, to change.
fn manifests_copy() -> tempfile::TempDir {
    let tree = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tree");
    let t = tree.path();
    std::fs::create_dir_all(t.join("scripts")).expect("scripts/");
    std::fs::copy(repo("scripts/release.sh"), t.join("scripts/release.sh")).expect("script");
    std::fs::copy(repo("Cargo.toml"), t.join("Cargo.toml")).expect("Cargo.toml");
    for entry in std::fs::read_dir(repo("crates")).expect("crates/") {
        let name = entry.expect("entry").file_name();
        let from = repo("crates").join(&name).join("Cargo.toml");
        std::fs::create_dir_all(t.join("crates").join(&name)).expect("crate dir");
        std::fs::copy(from, t.join("crates").join(&name).join("Cargo.toml")).expect("copy");
    }
    tree
}

/// The release workflow's first job stops a tag that is not the version of
/// nd7 and of every crate it is built from (`[package]`, `[workspace.package]`,
/// each crate's `version.workspace`): a release of one version must not ship
/// or publish crates of another.
#[test]
fn the_tag_must_be_the_version_of_nd7_and_every_crate() {
    let workflow = std::fs::read_to_string(repo(".github/workflows/release.yml")).expect("yml");
    assert!(
        workflow.contains("version=$(bash scripts/release.sh check-tag \"$TAG\")"),
        "the version job runs check-tag"
    );
    let tree = manifests_copy();
    let check = |tag: &str| {
        Command::new("bash")
            .arg(tree.path().join("scripts/release.sh"))
            .args(["check-tag", tag])
            .output()
            .expect("run check-tag")
    };
    let out = check(&format!("v{RUNNING}"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("{RUNNING}\n"));
    for tag in ["v9.9.9", RUNNING, &format!("v{RUNNING}.1")] {
        let out = check(tag);
        assert_eq!(out.status.code(), Some(2), "{tag}");
        assert_eq!(
            stderr(&out).trim_end(),
            format!("release: the tag {tag} is not v{RUNNING}, Cargo.toml's version")
        );
    }

    let toml = tree.path().join("Cargo.toml");
    let original = std::fs::read_to_string(&toml).expect("Cargo.toml");
    let at = original
        .find("[workspace.package]")
        .expect("[workspace.package]");
    let line = format!("version = \"{RUNNING}\"");
    let moved = format!(
        "{}{}",
        &original[..at],
        original[at..].replacen(&line, "version = \"9.9.9\"", 1)
    );
    assert_ne!(moved, original);
    std::fs::write(&toml, moved).expect("write");
    let out = check(&format!("v{RUNNING}"));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(&format!(
            "[workspace.package] has version 9.9.9, [package] {RUNNING}"
        )),
        "{}",
        stderr(&out)
    );
    std::fs::write(&toml, &original).expect("restore");

    let crate_toml = tree.path().join("crates/nd7-format/Cargo.toml");
    let text = std::fs::read_to_string(&crate_toml).expect("crate toml");
    let own = text.replacen("version.workspace = true", "version = \"9.9.9\"", 1);
    assert_ne!(own, text);
    std::fs::write(&crate_toml, own).expect("write");
    let out = check(&format!("v{RUNNING}"));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("nd7-format/Cargo.toml: its version is not the workspace's"),
        "{}",
        stderr(&out)
    );
}

/// The release's nd7 installed as Homebrew installs it (the archive's
/// binaries under a Cellar) refuses to update itself, naming the command that
/// does, and replaces nothing, though the release is newer and signed:
/// brew owns that copy. Guards `refuse_managed` in `run_self_update`.
#[test]
fn self_update_leaves_a_homebrew_copy_to_brew() {
    let run = dry_run();
    let url = serve_dir(run.dist.clone());
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("root");
    let keg = root.path().join("Cellar/nd7/0.0.9");
    let out = install_from(&url, &keg, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let bin = keg.join("bin");
    std::fs::write(bin.join("nd7-exec"), b"old exec").expect("old exec");
    let out = Command::new(bin.join("nd7"))
        .args(["self-update", "--from", &url])
        .env("ND7_TEST_RELEASE_KEY", &run.key_hex)
        .env("ND7_TEST_VERSION", "0.0.9")
        .output()
        .expect("nd7 self-update");
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let real = std::fs::canonicalize(bin.join("nd7")).expect("canonical");
    assert_eq!(
        stderr(&out).trim_end(),
        format!(
            "nd7 self-update: {} was installed by Homebrew; update it with `brew upgrade nd7`",
            real.display()
        )
    );
    assert_eq!(
        std::fs::read(bin.join("nd7-exec")).expect("exec"),
        b"old exec"
    );
}

/// A release ships nd7-record as it ships nd7-exec (ADR-0151): packing a
/// directory without it is refused before anything is written, so a release
/// whose hooks would fall back to `nd7 record` never ships.
#[test]
fn a_release_without_nd7_record_is_refused() {
    let built = Path::new(env!("CARGO_BIN_EXE_nd7"))
        .parent()
        .expect("target/debug");
    let bins = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("bins");
    for bin in ["nd7", "nd7-exec"] {
        std::os::unix::fs::symlink(built.join(bin), bins.path().join(bin)).expect("link");
    }
    let dist = bins.path().join("dist");
    let run = Command::new("bash")
        .arg(repo("scripts/release.sh"))
        .args(["package", TARGET])
        .arg(bins.path())
        .arg(&dist)
        .output()
        .expect("run scripts/release.sh package");
    assert_eq!(run.status.code(), Some(2), "{}", stdout(&run));
    assert!(
        stderr(&run).contains("no nd7-record (a release ships nd7, nd7-exec and nd7-record)"),
        "{}",
        stderr(&run)
    );
    assert!(!dist.exists(), "nothing packed");
}

/// A Linux release is static (musl): packing one whose binary loads shared
/// libraries, as the test build does, is refused before anything is written,
/// so a release built against glibc by mistake never ships as `-linux-musl`.
#[test]
#[cfg(target_os = "linux")]
fn a_musl_release_refuses_a_binary_that_is_not_static() {
    let bins = Path::new(env!("CARGO_BIN_EXE_nd7"))
        .parent()
        .expect("target/debug");
    let out = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("out");
    let dist = out.path().join("dist");
    let run = Command::new("bash")
        .arg(repo("scripts/release.sh"))
        .args(["package", "x86_64-unknown-linux-musl"])
        .arg(bins)
        .arg(&dist)
        .output()
        .expect("run scripts/release.sh package");
    assert_eq!(run.status.code(), Some(2), "{}", stdout(&run));
    assert!(
        stderr(&run).contains(&format!(
            "{}: linked dynamically (",
            bins.join("nd7").display()
        )) && stderr(&run).contains("libc.so"),
        "{}",
        stderr(&run)
    );
    assert!(!dist.exists(), "nothing packed");
}

/// The release is published only after `cargo publish --dry-run` built
/// every crate of the workspace from its package, as crates.io would take
/// it, so the version a release names can be published as crates too.
#[test]
fn the_release_waits_for_every_crate_to_package_and_build() {
    let workflow = std::fs::read_to_string(repo(".github/workflows/release.yml")).expect("yml");
    assert!(
        workflow.contains("      - run: cargo publish --dry-run --workspace --locked\n"),
        "the crates job"
    );
    assert!(
        workflow.contains("    needs: [version, crates, build]\n"),
        "publish waits for the crates job"
    );
}

/// The formula's `test do`, run as `brew test` runs it (HOME and the state
/// under a scratch directory, each command's exit status checked) against
/// the release's nd7: the session it records verifies with the text it
/// asserts. Read from the generated formula, so a change to either side
/// that would fail `brew test` fails here.
#[test]
fn the_formulas_test_passes_against_the_release() {
    let run = dry_run();
    let formula = std::fs::read_to_string(run.dist.join("nd7.rb")).expect("nd7.rb");
    let test = &formula[formula.find("\n  test do\n").expect("test do")..];
    let between = |from: &str, to: char| {
        test.split(from)
            .nth(1)
            .and_then(|rest| rest.split(to).next())
            .unwrap_or_else(|| panic!("{from} in {test}"))
            .to_string()
    };
    let payload = between("payload = '", '\'');
    let want = between("assert_match \"", '"');
    let session = between("nd7 verify ", '"');
    let nd7 = run.dist.join(format!("nd7-{TARGET}"));
    let testpath = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("testpath");
    let command = |args: &[&str]| {
        let mut c = Command::new(&nd7);
        c.args(args)
            .env("HOME", testpath.path())
            .env("XDG_STATE_HOME", testpath.path());
        c
    };
    let mut record = command(&["record"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("nd7 record");
    record
        .stdin
        .take()
        .expect("stdin")
        .write_all(payload.as_bytes())
        .expect("payload");
    assert!(record.wait().expect("wait").success(), "pipe_output(.., 0)");
    let verify = command(&["verify", &session]).output().expect("verify");
    assert!(verify.status.success(), "{}", stderr(&verify));
    assert!(stdout(&verify).contains(&want), "{}", stdout(&verify));
    let zsh = command(&["completions", "zsh"]).output().expect("zsh");
    assert!(zsh.status.success() && stdout(&zsh).starts_with("#compdef nd7"));
}
