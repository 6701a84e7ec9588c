//! Attacking ADR-0146: the exec observer's hashes remembered across runs
//! (src/sandbox/linux/hashes.rs) and the run's end that waits for the
//! front's mark. The attacker is the agent under `nd7 run` (Linux), an
//! ordinary account, the agent a shell script; it wants the run's chain to
//! state, as confirmed, bytes that are not what ran, or to lack an exec
//! without saying so.
#![cfg(target_os = "linux")]

use crate::runs::*;
use crate::world::*;

/// A filesystem on a loop device, mounted by the test as udisks does for
/// an ordinary user (`udisksctl loop-setup`, `udisksctl mount`).
struct Loop {
    device: String,
    at: tempfile::TempDir,
}

impl Loop {
    /// `image` (made a filesystem by `mkfs`, which it ends) on a loop
    /// device, mounted.
    fn new(image: &std::path::Path, mkfs: &str) -> Loop {
        sh(&format!(
            "truncate -s 320M {0} && {mkfs} {0} >/dev/null",
            image.display()
        ));
        let out = std::process::Command::new("losetup")
            .args(["-f", "--show"])
            .arg(image)
            .output()
            .expect("losetup");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let at = tempfile::Builder::new()
            .prefix("loop-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("a mount point");
        let open = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(at.path(), open).expect("chmod");
        let l = Loop {
            device: text(&out.stdout).trim().to_string(),
            at,
        };
        sh(&format!("mount {} {}", l.device, l.at.path().display()));
        l
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.at.path())
            .status();
        let _ = std::process::Command::new("losetup")
            .args(["-d", &self.device])
            .status();
    }
}

fn sh(script: &str) {
    let out = std::process::Command::new("sh")
        .args(["-c", script])
        .output()
        .expect("sh");
    assert!(out.status.success(), "{script}: {}", text(&out.stderr));
}

/// The newest run chain's log.
fn last_log(w: &World) -> String {
    let run = run_dirs(w).pop().expect("a run chain");
    std::fs::read_to_string(run.join("events.ndjson")).expect("the run's log")
}

/// The agent owns a filesystem image that a loop device serves (udisks
/// sets one up for an ordinary user): ext4, so the front trusts a ctime
/// there, but the agent changes the file's bytes by writing the image,
/// under the filesystem, and no time moves; it drops the program's pages
/// from the cache ([`EVICT`]), and the program has the same device, inode,
/// size, mtime and ctime and other bytes. Without the fix the exec in the
/// next run was logged with the first bytes' BLAKE3, confirmed.
/// Guards `hashes::on_own_devices`: with it out, this fails (on each of
/// the three filesystems).
#[test]
fn bytes_changed_under_a_loop_mounted_ext4_are_hashed_again() {
    bytes_changed_under_a_loop_mounted_filesystem("mkfs.ext4 -q -F -I 256");
}

/// As [`bytes_changed_under_a_loop_mounted_ext4_are_hashed_again`], XFS.
#[test]
fn bytes_changed_under_a_loop_mounted_xfs_are_hashed_again() {
    bytes_changed_under_a_loop_mounted_filesystem("mkfs.xfs -q -f");
}

/// As [`bytes_changed_under_a_loop_mounted_ext4_are_hashed_again`], Btrfs,
/// whose devices nd7 finds by its FSID (its files' device numbers are its
/// own): guards `hashes::btrfs_devices`.
#[test]
fn bytes_changed_under_a_loop_mounted_btrfs_are_hashed_again() {
    bytes_changed_under_a_loop_mounted_filesystem("mkfs.btrfs -q -f");
}

/// Rewrites every 64 `A`s in the image (`argv[1]`) to `B`s.
const PATCH: &str = r#"import mmap, sys
with open(sys.argv[1], "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
    found, at = 0, m.find(b"A" * 64)
    while at >= 0:
        m[at:at + 64] = b"B" * 64
        found, at = found + 1, m.find(b"A" * 64, at + 64)
print("patched" if found else "not found")"#;

/// Drops the pages of the file named after it from the cache, as any
/// reader of it may (`posix_fadvise(DONTNEED)`; memory pressure does too).
const EVICT: &str = "/usr/bin/python3 -c 'import os, sys; os.posix_fadvise(os.open(sys.argv[1], os.O_RDONLY), 0, 0, os.POSIX_FADV_DONTNEED)'";

/// One loop device set up at a time: `losetup -f` of two tests at once
/// could pick the same.
static LOOPS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn bytes_changed_under_a_loop_mounted_filesystem(mkfs: &str) {
    let _one = LOOPS.lock().unwrap_or_else(|e| e.into_inner());
    let w = World::new();
    let image = w.proj().join("disk.img");
    let disk = Loop::new(&image, mkfs);
    let prog = disk.at.path().join("prog");
    let mut bytes = std::fs::read("/usr/bin/true").expect("true");
    let first = bytes.len();
    bytes.extend_from_slice(&[b'A'; 64]);
    // No data checksums (Btrfs's `nodatasum`, which the image's owner
    // chooses): they would refuse the bytes written under them.
    std::fs::write(&prog, b"").expect("the program");
    let _ = std::process::Command::new("chattr")
        .arg("+C")
        .arg(&prog)
        .status();
    std::fs::write(&prog, &bytes).expect("the program");
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    sh("sync");
    let hash_a = blake3::hash(&bytes).to_hex().to_string();
    // Past the two seconds after which the front trusts a ctime.
    std::thread::sleep(std::time::Duration::from_millis(2200));
    let run = format!(r#""{}" loop-marker; echo ran"#, prog.display());
    let out = w.run_agent(&run);
    assert_eq!(lines(&out), ["ran"], "{}", text(&out.stderr));
    assert!(last_log(&w).contains(&hash_a), "the first exec's hash");
    let out = w.run_agent(&format!(
        r#"/usr/bin/python3 - '{image}' <<'PY'
{PATCH}
PY
{EVICT} '{prog}'
"{prog}" loop-marker; echo ran"#,
        image = image.display(),
        prog = prog.display(),
    ));
    assert_eq!(lines(&out), ["patched", "ran"], "{}", text(&out.stderr));
    let ran = std::fs::read(&prog).expect("the program");
    assert_eq!(&ran[first..], &[b'B'; 64][..], "the new bytes are served");
    let hash_b = blake3::hash(&ran).to_hex().to_string();
    let log = last_log(&w);
    assert!(
        !log.contains(&hash_a) && log.contains(&hash_b),
        "the second exec is logged with the bytes that ran ({hash_b}), not the first's ({hash_a})"
    );
}

/// Within one run, by the agent alone: the program on the agent's image
/// is root's (the agent made the image, owners and all), mode 0755, so no
/// process of the run can write it through the filesystem
/// (`hashes::sealed`), and its hash was remembered for the run whatever
/// the filesystem. The agent rewrites the image under it and drops the
/// program's pages from the cache ([`EVICT`]): the second exec ran the new bytes and was logged with
/// the first bytes' BLAKE3. Guards the device check for a sealed file in
/// `hashes::trust`: with it out, this fails.
#[test]
fn a_sealed_program_on_a_loop_device_is_hashed_again_in_the_run() {
    let _one = LOOPS.lock().unwrap_or_else(|e| e.into_inner());
    let w = World::new();
    let image = w.proj().join("disk.img");
    let disk = Loop::new(&image, "mkfs.ext4 -q -F -I 256");
    let prog = disk.at.path().join("prog");
    let mut bytes = std::fs::read("/usr/bin/true").expect("true");
    let first = bytes.len();
    bytes.extend_from_slice(&[b'A'; 64]);
    std::fs::write(&prog, &bytes).expect("the program");
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    sh("sync");
    let hash_a = blake3::hash(&bytes).to_hex().to_string();
    bytes[first..].copy_from_slice(&[b'B'; 64]);
    let hash_b = blake3::hash(&bytes).to_hex().to_string();
    let out = w.run_agent(&format!(
        r#""{prog}" once-marker
/usr/bin/python3 - '{image}' <<'PY'
{PATCH}
PY
{EVICT} '{prog}'
"{prog}" twice-marker
echo done"#,
        prog = prog.display(),
        image = image.display(),
    ));
    assert_eq!(lines(&out), ["patched", "done"], "{}", text(&out.stderr));
    let ran = blake3::hash(&std::fs::read(&prog).expect("the program"));
    assert_eq!(ran.to_hex().to_string(), hash_b, "the new bytes are served");
    let log = last_log(&w);
    assert!(log.contains(&hash_a), "the first exec's hash");
    assert!(
        log.contains(&hash_b),
        "the second exec is logged with the bytes that ran ({hash_b}), not the first's ({hash_a})"
    );
}
