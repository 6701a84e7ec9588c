//! Unsafe modes on nd7's own files and the credential stores (ADR-0095),
//! checked by `nd7 run` before it starts anything and shown by `nd7 doctor`.
//!
//! The floor keeps a session from changing modes outside its write roots
//! (`sandbox::linux::attrs`), but a mode an earlier session, a tool or a
//! mistake left stays: a `~/.nd7/grants` another account can write hands it
//! the next session's grants, and a key readable by others is no secret. So
//! each place is looked at by what someone else could do with it:
//!
//! - **Refused** (`nd7 run` starts nothing, exit 2): `~/.nd7`, its `runs`,
//!   `grants` and `secrets` writable by the group or others, or owned by
//!   another account (through them another account chooses what the next
//!   session may write or read); the home writable by others, or the home
//!   owned by another account while writable by it (it could replace
//!   `~/.nd7`).
//! - **Warned** (the session starts; the line says how to fix it): the home
//!   writable by its group (often the account's own group); nd7's state
//!   (the logs, the vault and its key) writable by others, and the vault key
//!   readable by them; `~/.ssh` and the other credential stores writable by
//!   others; a private key in `~/.ssh` readable or writable by them (ssh
//!   itself then refuses it). These harm the account, not the next
//!   session's floor, and a refusal would not undo a leak.
//!
//! Links are followed: what counts is the place the file really is.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What a finding does to `nd7 run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Refuse,
    Warn,
}

/// One unsafe mode: where, what is wrong, and the command that fixes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub path: PathBuf,
    pub problem: String,
    pub fix: String,
    pub verdict: Verdict,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}; fix: {}",
            self.path.display(),
            self.problem,
            self.fix
        )
    }
}

const GROUP_WRITE: u32 = 0o020;
const OTHER_WRITE: u32 = 0o002;
const GROUP_OTHER_ANY: u32 = 0o077;

/// How strictly a place is judged.
#[derive(Clone, Copy)]
enum Place {
    Home,
    /// `~/.nd7` and what decides the next session: refused.
    Own,
    /// Warned when others may write it.
    Shared,
    /// Warned when others may read or write it.
    Private,
}

/// The account's own group, if it is a private one: the account's primary
/// group, with no other member and no other account's primary group (as
/// `useradd` makes them where `USERGROUPS_ENAB` is on, with umask 002).
/// A file writable by that group is writable by the account alone. Read
/// from `/etc/group` and `/etc/passwd`; a group found elsewhere is not
/// taken as private.
pub fn private_group(uid: u32) -> Option<u32> {
    let group = std::fs::read_to_string("/etc/group").ok()?;
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    private_group_in(&group, &passwd, uid)
}

/// [`private_group`] for the files' texts.
pub fn private_group_in(group: &str, passwd: &str, uid: u32) -> Option<u32> {
    let fields = |line: &'_ str| line.split(':').map(str::to_string).collect::<Vec<_>>();
    let accounts: Vec<Vec<String>> = passwd.lines().map(fields).filter(|f| f.len() > 3).collect();
    let me = accounts.iter().find(|f| f[2].parse() == Ok(uid))?;
    let (name, gid) = (&me[0], me[3].parse::<u32>().ok()?);
    let shared = accounts
        .iter()
        .any(|f| f[3].parse() == Ok(gid) && f[2].parse() != Ok(uid));
    let entry = group
        .lines()
        .map(fields)
        .find(|f| f.len() > 3 && f[2].parse() == Ok(gid))?;
    let others = entry[3].split(',').any(|m| !m.is_empty() && m != name);
    (!shared && !others).then_some(gid)
}

/// Every finding for the account `uid` (whose private group, if it has one,
/// is `private`) with home `home` and nd7's state directory `state`,
/// refusals first.
pub fn check(home: &Path, state: Option<&Path>, uid: u32, private: Option<u32>) -> Vec<Finding> {
    let nd7 = home.join(".nd7");
    let mut places: Vec<(PathBuf, Place)> = vec![(home.to_path_buf(), Place::Home)];
    places.push((nd7.clone(), Place::Own));
    places.extend(
        ["runs", "grants", "secrets"]
            .iter()
            .map(|p| (nd7.join(p), Place::Own)),
    );
    if let Some(state) = state {
        places.extend(
            [
                state.to_path_buf(),
                state.join("sessions"),
                state.join("vault"),
            ]
            .into_iter()
            .map(|p| (p, Place::Shared)),
        );
        places.push((state.join("vault/machine.key"), Place::Private));
    }
    places.extend(
        crate::policy::secrets::CREDENTIAL_STORES
            .iter()
            .map(|(p, _)| (home.join(p), Place::Shared)),
    );
    places.extend(
        private_keys(&home.join(".ssh"))
            .into_iter()
            .map(|k| (k, Place::Private)),
    );
    let mut out: Vec<Finding> = places
        .iter()
        .filter_map(|(path, place)| judge(path, *place, uid, private))
        .collect();
    out.sort_by_key(|f| f.verdict != Verdict::Refuse);
    out
}

/// The private keys in `~/.ssh`: `id_*` files but the `.pub` ones.
fn private_keys(ssh: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(ssh) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("id_") && !n.ends_with(".pub"))
        })
        .collect()
}

fn judge(path: &Path, place: Place, uid: u32, private: Option<u32>) -> Option<Finding> {
    let meta = std::fs::metadata(path).ok()?;
    let mode = meta.mode() & 0o7777;
    // What others may write: the group's bit counts unless the group is
    // the account's private one.
    let group_write = if Some(meta.gid()) == private {
        0
    } else {
        GROUP_WRITE
    };
    let others_write = mode & (group_write | OTHER_WRITE);
    let theirs = meta.uid() != uid;
    let finding = |problem: String, fix: String, verdict| Finding {
        path: path.to_path_buf(),
        problem,
        fix,
        verdict,
    };
    let owner = || format!("belongs to uid {}, not to you (uid {uid})", meta.uid());
    let chown = || format!("sudo chown {uid} '{}'", path.display());
    let go_w = || format!("chmod go-w '{}'", path.display());
    let writable = |bits: u32| {
        let who = match (bits & GROUP_WRITE != 0, bits & OTHER_WRITE != 0) {
            (true, true) => "its group and every other account",
            (true, false) => "its group",
            _ => "every other account",
        };
        format!(
            "is writable by {who} (mode {mode:04o}, group {})",
            meta.gid()
        )
    };
    match place {
        Place::Own if theirs => Some(finding(owner(), chown(), Verdict::Refuse)),
        Place::Own if others_write != 0 => {
            Some(finding(writable(others_write), go_w(), Verdict::Refuse))
        }
        Place::Home if mode & OTHER_WRITE != 0 => {
            Some(finding(writable(mode), go_w(), Verdict::Refuse))
        }
        Place::Home if theirs && mode & GROUP_WRITE != 0 => Some(finding(
            format!("{} and {}", owner(), writable(mode)),
            chown(),
            Verdict::Refuse,
        )),
        Place::Home if mode & GROUP_WRITE != 0 => {
            Some(finding(writable(mode), go_w(), Verdict::Warn))
        }
        Place::Shared if theirs => Some(finding(owner(), chown(), Verdict::Warn)),
        Place::Shared if mode & (GROUP_WRITE | OTHER_WRITE) != 0 => {
            Some(finding(writable(mode), go_w(), Verdict::Warn))
        }
        Place::Private if theirs => Some(finding(owner(), chown(), Verdict::Warn)),
        Place::Private if mode & GROUP_OTHER_ANY != 0 => Some(finding(
            format!("can be read or written by others (mode {mode:04o})"),
            format!("chmod 600 '{}'", path.display()),
            Verdict::Warn,
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn each_place_is_judged_by_what_others_could_do_with_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let state = home.join(".local/state/nd7");
        for d in [".nd7/runs", ".ssh", "x"] {
            std::fs::create_dir_all(home.join(d)).expect("mkdir");
        }
        std::fs::create_dir_all(state.join("vault")).expect("mkdir");
        std::fs::write(home.join(".nd7/grants"), "").expect("write");
        std::fs::write(home.join(".ssh/id_ed25519"), "").expect("write");
        std::fs::write(home.join(".ssh/id_ed25519.pub"), "").expect("write");
        std::fs::write(state.join("vault/machine.key"), "").expect("write");
        for (p, m) in [
            (home.clone(), 0o755),
            (home.join(".nd7"), 0o700),
            (home.join(".nd7/runs"), 0o700),
            (home.join(".ssh"), 0o700),
            (home.join(".nd7/grants"), 0o644),
            (home.join(".ssh/id_ed25519"), 0o600),
            (home.join(".ssh/id_ed25519.pub"), 0o644),
            (state.join("vault/machine.key"), 0o600),
        ] {
            chmod(&p, m);
        }
        let uid = rustix::process::geteuid().as_raw();
        let st = Some(state.as_path());
        assert_eq!(check(&home, st, uid, None), Vec::new());

        chmod(&home.join(".nd7/grants"), 0o666);
        chmod(&home.join(".ssh/id_ed25519"), 0o644);
        chmod(&home.join(".ssh"), 0o777);
        chmod(&home, 0o775);
        let found = check(&home, st, uid, None);
        let verdict = |p: PathBuf| found.iter().find(|f| f.path == p).map(|f| f.verdict);
        assert_eq!(verdict(home.join(".nd7/grants")), Some(Verdict::Refuse));
        assert_eq!(verdict(home.join(".ssh/id_ed25519")), Some(Verdict::Warn));
        assert_eq!(verdict(home.join(".ssh")), Some(Verdict::Warn));
        assert_eq!(verdict(home.clone()), Some(Verdict::Warn));
        assert_eq!(verdict(home.join(".ssh/id_ed25519.pub")), None);
        assert_eq!(found[0].verdict, Verdict::Refuse, "refusals first");
        chmod(&home, 0o777);
        assert_eq!(verdict_of(&home, st, uid, &home), Some(Verdict::Refuse));
        // Another account's ~/.nd7 is refused however its mode reads.
        assert_eq!(
            verdict_of(&home, st, uid + 1, &home.join(".nd7")),
            Some(Verdict::Refuse)
        );
        assert!(found[0].to_string().contains("chmod go-w"));
        // The account's private group writing its grants is the account.
        chmod(&home, 0o755);
        chmod(&home.join(".nd7/grants"), 0o664);
        let gid = std::fs::metadata(&home).expect("stat").gid();
        assert_eq!(
            verdict_of_in(&home, st, uid, Some(gid), &home.join(".nd7/grants")),
            None
        );
        assert_eq!(
            verdict_of_in(&home, st, uid, None, &home.join(".nd7/grants")),
            Some(Verdict::Refuse)
        );
    }

    #[test]
    fn a_private_group_has_the_account_alone() {
        let passwd = "root:x:0:0::/root:/bin/sh\nann:x:1000:1000::/home/ann:/bin/sh\nbob:x:1001:100::/home/bob:/bin/sh\ncat:x:1002:100::/home/cat:/bin/sh\n";
        let group = "root:x:0:\nann:x:1000:\nusers:x:100:\nwheel:x:10:ann\n";
        assert_eq!(private_group_in(group, passwd, 1000), Some(1000));
        // Shared as a primary group.
        assert_eq!(private_group_in(group, passwd, 1001), None);
        // With another member.
        let group = "ann:x:1000:dan\n";
        assert_eq!(private_group_in(group, passwd, 1000), None);
        assert_eq!(private_group_in("", passwd, 1000), None);
    }

    fn verdict_of(home: &Path, st: Option<&Path>, uid: u32, p: &Path) -> Option<Verdict> {
        verdict_of_in(home, st, uid, None, p)
    }

    fn verdict_of_in(
        home: &Path,
        st: Option<&Path>,
        uid: u32,
        private: Option<u32>,
        p: &Path,
    ) -> Option<Verdict> {
        check(home, st, uid, private)
            .into_iter()
            .find(|f| f.path == p)
            .map(|f| f.verdict)
    }
}
