//! `nd7 doctor`: every check of an installation, each with what was found
//! and the command that fixes it. Changes nothing.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::json;

use super::{
    MIN_CLAUDE, binary_problems, claude_json, claude_json_applies, claude_version, codex, merge,
    stable_path, timer,
};
use crate::hook::Recorder;

/// One line of `nd7 doctor`: what was checked, whether it is fine, what was
/// found, and the command that fixes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
    pub fix: Option<String>,
}

/// What a protection this system lacks starts with: no failure (nothing
/// lifts it today), and no "ok" either.
const NOT_ENFORCED: &str = "not enforced: ";

impl Check {
    /// The word at the start of its line: `ok`, `FAIL`, or `note` for a
    /// limit nothing can lift today (passes, but is not fine).
    pub fn mark(&self) -> &'static str {
        match (self.ok, self.detail.starts_with(NOT_ENFORCED)) {
            (false, _) => "FAIL",
            (true, true) => "note",
            (true, false) => "ok  ",
        }
    }
}

/// The modes `nd7 run` refuses or warns of ([`crate::modes`]).
fn modes_check(home: &Path) -> Check {
    let state = crate::session_log::state_dir().ok();
    let uid = rustix::process::geteuid().as_raw();
    let found = crate::modes::check(
        home,
        state.as_deref(),
        uid,
        crate::modes::private_group(uid),
    );
    let detail = if found.is_empty() {
        "nd7's own files and the credential stores are yours alone to change".into()
    } else {
        found
            .iter()
            .map(|f| match f.verdict {
                crate::modes::Verdict::Refuse => format!("nd7 run refuses: {f}"),
                crate::modes::Verdict::Warn => f.to_string(),
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    Check {
        name: "modes",
        ok: found.is_empty(),
        detail,
        fix: (!found.is_empty()).then(|| {
            found
                .iter()
                .map(|f| f.fix.as_str())
                .collect::<Vec<_>>()
                .join(" && ")
        }),
    }
}

/// What `nd7 doctor` reports for the binary at `exe`. Changes nothing.
pub fn doctor(exe: &Path, settings: Option<&Path>) -> Vec<Check> {
    let home = crate::home::env_home();
    let home = home.as_deref();
    let nd7 = nd7_path(exe, home);
    let recorder = super::recorder_beside(&nd7);
    let agents = Agents::find(home, settings);
    let mut checks = Vec::new();
    checks.extend(agents.claude_absent_note());
    checks.extend(
        agents
            .claude
            .then(|| settings_hooks_check(settings, home, &recorder)),
    );
    checks.push(binary_check(&nd7));
    checks.push(recorder_check(&nd7));
    // Modes on nd7's own files and the credential stores (ADR-0095).
    checks.extend(home.map(modes_check));
    checks.extend(agents.claude.then(claude_check));
    if let Some(home) = home.filter(|_| agents.codex) {
        checks.extend(codex::doctor(home, &recorder));
    }
    checks.extend(home.filter(|_| claude_json_applies()).map(state_check));
    checks.push(sandbox_check());
    // The home nd7 run builds the floor around must be the one Claude Code uses.
    checks.push(home_check(home));
    checks.push(locks_check());
    // What keeps the agent's network to nd7's proxy (ADR-0106): the same
    // user namespaces, on Linux.
    checks.push(egress_check());
    // The credential stores nd7 run keeps unreadable, and the user's file.
    if let Some(home) = home {
        checks.push(secrets_check(home));
        checks.push(grants_check(home));
    }
    checks.extend(protection_checks());
    checks.push(logs_check());
    if let (Ok(state), Some(home)) = (crate::session_log::state_dir(), home) {
        checks.extend(vault_checks(&state, home, SystemTime::now()));
    }
    checks
}

/// The nd7 the hooks should name: `exe` by its stable path under the home
/// where there is one.
fn nd7_path(exe: &Path, home: Option<&Path>) -> PathBuf {
    home.and_then(|h| stable_path(exe, h, Path::exists).ok())
        .unwrap_or_else(|| exe.to_path_buf())
}

/// Which agents doctor checks: where only Codex is installed, Claude Code's
/// absence is no failure, and its checks are left out.
struct Agents {
    /// Codex is installed.
    codex: bool,
    /// Claude Code's checks apply.
    claude: bool,
}

impl Agents {
    fn find(home: Option<&Path>, settings: Option<&Path>) -> Agents {
        let codex = home.is_some_and(codex::found);
        let claude_absent = settings.is_none()
            && claude_version().is_none()
            && home.is_none_or(|h| !h.join(".claude").exists());
        Agents {
            codex,
            claude: !(codex && claude_absent),
        }
    }

    /// The line that says why Claude Code's checks are left out.
    fn claude_absent_note(&self) -> Option<Check> {
        (!self.claude).then(|| Check {
            name: "claude",
            ok: true,
            detail: "Claude Code is not installed here (no `claude` on PATH, no ~/.claude): nothing to record".into(),
            fix: None,
        })
    }
}

/// The hooks: present for every recorded event and pointing at this nd7.
fn settings_hooks_check(
    settings: Option<&Path>,
    home: Option<&Path>,
    recorder: &Recorder,
) -> Check {
    let settings = settings
        .map(Path::to_path_buf)
        .or_else(|| home.map(|h| h.join(".claude/settings.json")));
    match settings.as_deref().map(fs::read_to_string) {
        None => Check {
            name: "hooks",
            ok: false,
            detail: "cannot find the home directory".into(),
            fix: Some("set HOME".into()),
        },
        Some(Err(e)) => Check {
            name: "hooks",
            ok: false,
            detail: format!(
                "{}: {e}",
                settings.as_deref().unwrap_or(Path::new("?")).display()
            ),
            fix: Some("nd7 setup".into()),
        },
        Some(Ok(text)) => hooks_check(&text, recorder),
    }
}

/// The program the hooks run: nd7-record beside nd7, or, missing, a note
/// that they run `nd7 record` (ADR-0151); a failure when something is at
/// that name that the hooks must not run (ADR-0153).
fn recorder_check(nd7: &Path) -> Check {
    let found = super::find_recorder(nd7);
    Check {
        name: "recorder",
        ok: !matches!(found, Err(super::NoRecorder::Refused(_))),
        detail: match &found {
            Ok(recorder) => format!("hooks run {}", recorder.program()),
            Err(why) => super::no_recorder_note(nd7, why),
        },
        fix: matches!(found, Err(super::NoRecorder::Refused(_))).then(|| {
            "reinstall nd7 so that its own nd7-record sits beside it, then nd7 setup".into()
        }),
    }
}

/// The binary and its directory: nd7 run trusts both.
fn binary_check(nd7: &Path) -> Check {
    let found = binary_problems(nd7);
    // The fix names what was found, nd7-record or a link's directory too.
    let paths: Vec<String> = found.iter().map(|(p, _)| p.display().to_string()).collect();
    let problems: Vec<String> = found
        .iter()
        .map(|(path, problem)| format!("{} {problem}", path.display()))
        .collect();
    Check {
        name: "binary",
        ok: problems.is_empty(),
        detail: if problems.is_empty() {
            format!(
                "{} {} and its directory are yours alone",
                nd7.display(),
                env!("CARGO_PKG_VERSION")
            )
        } else {
            problems.join("; ")
        },
        fix: (!problems.is_empty()).then(|| format!("chmod go-w {}", paths.join(" "))),
    }
}

/// Claude Code itself, new enough for exec-form hooks.
fn claude_check() -> Check {
    match claude_version() {
        None => Check {
            name: "claude",
            ok: false,
            detail: "Claude Code (`claude`) is not on PATH".into(),
            fix: Some("npm install -g @anthropic-ai/claude-code".into()),
        },
        Some((text, Some(v))) if v >= MIN_CLAUDE => Check {
            name: "claude",
            ok: true,
            detail: text,
            fix: None,
        },
        Some((text, _)) => Check {
            name: "claude",
            ok: false,
            detail: format!(
                "{text:?}: exec-form hooks need {}.{}.{} or newer",
                MIN_CLAUDE.0, MIN_CLAUDE.1, MIN_CLAUDE.2
            ),
            fix: Some("claude update".into()),
        },
    }
}

/// Claude Code's state file, where the floor needs it moved.
fn state_check(home: &Path) -> Check {
    let state = claude_json::state(home);
    Check {
        name: "state",
        ok: !matches!(state, claude_json::State::InHome | claude_json::State::Absent),
        detail: match &state {
            claude_json::State::Absent => "~/.claude.json does not exist yet, and Claude Code would create it in your home directory, where nd7 run lets nothing be written".into(),
            claude_json::State::InHome => {
                "~/.claude.json is in the home directory, where nd7 run would stop Claude Code saving it".into()
            }
            claude_json::State::Moved => format!("~/.claude.json links to ~/{}", claude_json::LINK_TARGET),
            claude_json::State::OtherLink(target) => {
                format!("~/.claude.json links to {} (left as it is)", target.display())
            }
        },
        fix: matches!(state, claude_json::State::InHome | claude_json::State::Absent)
            .then(|| "nd7 setup".into()),
    }
}

/// The kernel's sandbox, which nd7 run will apply.
fn sandbox_check() -> Check {
    match crate::sandbox::available() {
        Ok(what) => Check {
            name: "sandbox",
            ok: true,
            detail: what.to_string(),
            fix: None,
        },
        Err(why) => Check {
            name: "sandbox",
            ok: false,
            detail: why,
            fix: Some(
                "run nd7 on Linux 6.2 or newer with Landlock enabled (lsm=...,landlock)".into(),
            ),
        },
    }
}

/// What keeps the agent from planting files that run later outside the
/// sandbox (git hooks and configuration, .envrc, editor and Claude Code
/// settings): refused, or only watched and reported.
fn locks_check() -> Check {
    match crate::sandbox::hold_available() {
        Ok(what) => Check {
            name: "locks",
            ok: true,
            detail: format!("files that run later outside the sandbox: {what}"),
            fix: None,
        },
        Err(why) => Check {
            name: "locks",
            ok: false,
            detail: format!(
                "files that run later outside the sandbox cannot be made read-only ({why}); nd7 run only reports their changes when a session ends"
            ),
            fix: Some(
                "allow unprivileged user namespaces (sysctl user.max_user_namespaces above 0; on Ubuntu, kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for nd7)".into(),
            ),
        },
    }
}

/// What the kernel enforces beyond the file rules, one line each.
fn protection_checks() -> impl Iterator<Item = Check> {
    crate::sandbox::protections().into_iter().map(|p| Check {
        name: p.name,
        // A limit nothing can lift today is said, not failed.
        ok: p.enforced || p.needs.is_none(),
        detail: if p.enforced {
            p.detail
        } else {
            format!("{NOT_ENFORCED}{}", p.detail)
        },
        fix: p.needs.filter(|_| !p.enforced).map(str::to_string),
    })
}

/// Where the logs go, and whether a first record can create them.
fn logs_check() -> Check {
    match crate::session_log::state_dir() {
        Err(e) => Check {
            name: "logs",
            ok: false,
            detail: e.to_string(),
            fix: Some("set HOME or XDG_STATE_HOME".into()),
        },
        Ok(state) => {
            let sessions = crate::session_log::sessions_dir(&state);
            // The nearest directory that exists is the one a first record
            // will create the rest under.
            let existing = sessions
                .ancestors()
                .find(|p| p.exists())
                .unwrap_or(Path::new("/"));
            let writable = rustix::fs::access(existing, rustix::fs::Access::WRITE_OK).is_ok();
            let count = fs::read_dir(&sessions).map_or(0, |d| d.count());
            Check {
                name: "logs",
                ok: writable,
                detail: if writable {
                    format!("{} ({count} sessions)", sessions.display())
                } else {
                    format!("{} is not writable", existing.display())
                },
                fix: (!writable).then(|| format!("chown -R \"$USER\" {}", existing.display())),
            }
        }
    }
}

/// `$HOME` against the account database's home, which `nd7 run` confines
/// by: they must be the same directory, or `nd7 run` refuses to start.
fn home_check(env: Option<&Path>) -> Check {
    let account = crate::run_dir::account_home();
    let same = match (&account, env) {
        (Ok(a), Some(e)) => fs::canonicalize(e).ok().as_deref() == Some(a.as_path()),
        (Ok(_), None) => true,
        (Err(_), _) => false,
    };
    Check {
        name: "home",
        ok: same,
        detail: match (&account, env) {
            (Err(e), _) => e.to_string(),
            (Ok(a), _) if same => format!("{} (HOME and your account agree)", a.display()),
            (Ok(a), e) => format!(
                "HOME is {}, your account's home is {}: nd7 run will not start",
                e.map_or("unset".into(), |e| e.display().to_string()),
                a.display()
            ),
        },
        fix: (!same).then(|| match &account {
            Ok(a) => format!(
                "export HOME={} (or run nd7 as the account whose home HOME is)",
                a.display()
            ),
            Err(_) => "add your account to the account database (getent passwd)".into(),
        }),
    }
}

/// What sessions may write beyond the floor from the start: `~/.nd7/grants`
/// read as `nd7 run` reads it.
fn grants_check(home: &Path) -> Check {
    use crate::policy::grants;
    let file = home.join(grants::FILE);
    let text = match fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Check {
                name: "grants",
                ok: true,
                detail: format!(
                    "none: commands write only the floor's places; name toolchain caches in {} (preset cargo, npm, pip, …) or pass nd7 run --preset",
                    file.display()
                ),
                fix: None,
            };
        }
        Err(e) => {
            return Check {
                name: "grants",
                ok: false,
                detail: format!("{}: {e}", file.display()),
                fix: Some(format!("make {} readable", file.display())),
            };
        }
    };
    match grants::parse(&text, home) {
        Ok(lines) => {
            let mut sections: Vec<(String, Vec<String>)> = Vec::new();
            for line in &lines {
                let section = line
                    .project
                    .as_deref()
                    .map_or("every project".to_string(), |p| grants::tilde(p, home));
                let what = match &line.entry {
                    grants::Entry::Preset(p) => format!("preset {}", p.name),
                    grants::Entry::Path(p) => grants::tilde(p, home),
                    grants::Entry::Net(r) => format!("net {r}"),
                };
                match sections.iter_mut().find(|(s, _)| *s == section) {
                    Some((_, list)) => list.push(what),
                    None => sections.push((section, vec![what])),
                }
            }
            Check {
                name: "grants",
                ok: true,
                detail: format!(
                    "{}: {}",
                    file.display(),
                    sections
                        .iter()
                        .map(|(s, l)| format!("{s}: {}", l.join(", ")))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                fix: None,
            }
        }
        Err(e) => Check {
            name: "grants",
            ok: false,
            detail: format!("{} {e}; nd7 run will not start", file.display()),
            fix: Some(format!(
                "correct {} (docs/sandbox.md, \"Grants that last\")",
                file.display()
            )),
        },
    }
}

/// The credential stores a session would keep unreadable: how many, which
/// of them exist here, and whether `~/.nd7/secrets` reads.
/// Whether `nd7 run` can keep the agent's network to its proxy here.
fn egress_check() -> Check {
    match crate::sandbox::egress_available() {
        Ok(how) => Check {
            name: "egress",
            ok: true,
            detail: format!(
                "the network: only through nd7's proxy, to the hosts you allow ({how})"
            ),
            fix: None,
        },
        Err(why) => Check {
            name: "egress",
            ok: false,
            detail: format!(
                "the network is not kept to nd7's proxy here ({why}); nd7 run --net strict refuses to start"
            ),
            fix: Some(
                "on Linux, allow unprivileged user namespaces (as for the locks above)".into(),
            ),
        },
    }
}

fn secrets_check(home: &Path) -> Check {
    let file = home.join(crate::policy::secrets::FILE);
    match crate::run_dir::secrets(home) {
        Ok(list) => {
            let here: Vec<String> = list
                .iter()
                .filter(|p| fs::symlink_metadata(p).is_ok())
                .map(|p| match p.strip_prefix(home) {
                    Ok(rel) => format!("~/{}", rel.display()),
                    Err(_) => p.display().to_string(),
                })
                .collect();
            Check {
                name: "secrets",
                ok: true,
                detail: format!(
                    "{} paths unreadable under nd7 run ({}){}",
                    list.len(),
                    if file.exists() {
                        format!("nd7's list changed by {}", file.display())
                    } else {
                        format!("nd7's list; change it in {}", file.display())
                    },
                    if here.is_empty() {
                        String::new()
                    } else {
                        format!("; here: {}", here.join(", "))
                    }
                ),
                fix: None,
            }
        }
        Err(e) => Check {
            name: "secrets",
            ok: false,
            detail: e.to_string(),
            fix: Some(format!(
                "correct {} (docs/sandbox.md, \"Credential stores\")",
                file.display()
            )),
        },
    }
}

/// Enrolment, the last ship and the timer. A machine that is not enrolled
/// passes: a vault is the organisation's choice.
fn vault_checks(state: &Path, home: &Path, now: SystemTime) -> Vec<Check> {
    let vault = crate::ship::vault_dir(state);
    let read = |name: &str| fs::read_to_string(vault.join(name)).map(|t| t.trim().to_string());
    let (Ok(machine), Ok(server)) = (
        read(crate::ship::MACHINE_ID_FILE),
        read(crate::ship::SERVER_FILE),
    ) else {
        return vec![Check {
            name: "vault",
            ok: true,
            detail: "not enrolled: logs stay on this machine only".into(),
            fix: Some("nd7 enroll URL --token T --fingerprint FP (from your vault's admin)".into()),
        }];
    };
    let unreachable = read(crate::ship::UNREACHABLE_FILE).ok();
    let mut checks = vec![match unreachable {
        None => Check {
            name: "vault",
            ok: true,
            detail: format!("enrolled with {server} as machine {machine}"),
            fix: None,
        },
        Some(why) => Check {
            name: "vault",
            ok: false,
            detail: format!(
                "enrolled with {server} as machine {machine}, but the last nd7 ship said: {why}"
            ),
            fix: Some("nd7 ship, once the vault is up (or ask its admin)".into()),
        },
    }];
    let backlog = ship_backlog(&crate::session_log::sessions_dir(state));
    let ago = |t: SystemTime| {
        now.duration_since(t).map_or("just now".to_string(), |d| {
            format!("{} min ago", d.as_secs() / 60)
        })
    };
    let stale = backlog
        .last_ship
        .is_none_or(|t| now.duration_since(t).is_ok_and(|d| d.as_secs() > 3600));
    checks.push(Check {
        name: "ship",
        ok: backlog.unshipped == 0 || !stale,
        detail: format!(
            "last ship {}; {} of {} sessions have entries not yet shipped",
            backlog.last_ship.map_or("never".to_string(), ago),
            backlog.unshipped,
            backlog.sessions
        ),
        fix: (backlog.unshipped > 0 && stale).then(|| "nd7 ship".into()),
    });
    checks.push(receipts_check(&backlog));
    let unix = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let recipients = recipients_check(&vault.join(crate::ship::RECIPIENTS_FILE), unix);
    let exe = std::env::current_exe().unwrap_or_else(|_| "nd7".into());
    let nd7 = stable_path(&exe, home, Path::exists).unwrap_or(exe);
    checks.push(match timer::active(home, &nd7) {
        Ok(what) => Check {
            name: "timer",
            ok: true,
            detail: what,
            fix: None,
        },
        Err((why, fix)) => Check {
            name: "timer",
            ok: false,
            detail: why,
            fix: Some(fix),
        },
    });
    checks.push(recipients);
    checks
}

/// Fails once the recipients document the machine holds ran out of its
/// validity: no new chain key is started under it, so new sessions are not
/// shipped, and a vault that withholds the newer one (a freeze) shows here.
fn recipients_check(path: &Path, now: u64) -> Check {
    let doc = match fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))
        .and_then(|t| {
            crate::vault::Recipients::parse(&t).map_err(|e| format!("{}: {e}", path.display()))
        }) {
        Ok(doc) => doc,
        Err(why) => {
            return Check {
                name: "recipients",
                ok: false,
                detail: why,
                fix: Some("enrol again (docs/vault.md, \"Enrolling a machine\")".into()),
            };
        }
    };
    let days = |secs: u64| secs / 86_400;
    if doc.expired(now) {
        return Check {
            name: "recipients",
            ok: false,
            detail: format!(
                "the recipients document of version {} ran out {} day(s) ago (valid until {} Unix time), and the vault served no newer one at the last ship: new sessions are not shipped",
                doc.version,
                days(now - doc.valid_until),
                doc.valid_until
            ),
            fix: Some(
                "an admin signs and installs a newer version (docs/vault.md, \"Rotating recipients\"), then nd7 ship"
                    .into(),
            ),
        };
    }
    Check {
        name: "recipients",
        ok: true,
        detail: format!(
            "version {} with {} admin recipient(s), valid for {} more day(s)",
            doc.version,
            doc.recipients.len(),
            days(doc.valid_until - now)
        ),
        fix: None,
    }
}

/// What the session logs hold that the vault does not, and what the last
/// ships found about the vault.
struct Backlog {
    sessions: usize,
    unshipped: usize,
    last_ship: Option<SystemTime>,
    /// (session, first line of its `vault.alarm`): the vault broke a receipt.
    alarms: Vec<(String, String)>,
    /// Sessions keeping receipts a declared restore lost.
    lost: usize,
    /// (session, what was lost): lost in a declared restore, and not
    /// acknowledged by the vault again since.
    lost_not_again: Vec<(String, String)>,
    /// (session, what differs): the local log no longer holds what was shipped.
    rewritten: Vec<(String, String)>,
}

/// Fails while `nd7 ship` finds the vault breaking a receipt for some
/// session, or a local log no longer holds what was shipped: the vault's
/// doing and the machine's, told apart.
fn receipts_check(backlog: &Backlog) -> Check {
    let mut problems = Vec::new();
    if let Some((session, first)) = backlog.alarms.first() {
        problems.push(format!(
            "the vault broke its receipt for {} session(s); {session}: {first}",
            backlog.alarms.len()
        ));
    }
    if let Some((session, what)) = backlog.lost_not_again.first() {
        problems.push(format!(
            "the vault has not acknowledged again what a declared restore lost, for {} session(s); {session}: {what}",
            backlog.lost_not_again.len()
        ));
    }
    if let Some((session, what)) = backlog.rewritten.first() {
        problems.push(format!(
            "the local log of {} session(s) no longer holds what was shipped (this machine's doing, not the vault's); {session}: {what}",
            backlog.rewritten.len()
        ));
    }
    if !problems.is_empty() {
        return Check {
            name: "receipts",
            ok: false,
            detail: problems.join("; and "),
            fix: Some(
                "docs/vault.md (\"Restoring a vault from a backup\" when the vault lost entries); `nd7 admin pull --compare` names what differs"
                    .into(),
            ),
        };
    }
    Check {
        name: "receipts",
        ok: true,
        detail: if backlog.lost > 0 {
            format!(
                "the vault honours every receipt; {} session(s) keep receipts a declared restore lost (receipts.lost), each acknowledged again since",
                backlog.lost
            )
        } else {
            "the vault honoured every receipt at the last ship".into()
        },
        fix: None,
    }
}

/// Compares each session's `head` with its `shipped` (both "<seq> <hash>").
fn ship_backlog(sessions: &Path) -> Backlog {
    let mut backlog = Backlog {
        sessions: 0,
        unshipped: 0,
        last_ship: None,
        alarms: Vec::new(),
        lost: 0,
        lost_not_again: Vec::new(),
        rewritten: Vec::new(),
    };
    let Ok(entries) = fs::read_dir(sessions) else {
        return backlog;
    };
    for dir in entries.filter_map(Result::ok).map(|e| e.path()) {
        let Ok(head) = fs::read_to_string(dir.join("head")) else {
            continue;
        };
        backlog.sessions += 1;
        let shipped = dir.join(crate::ship::SHIPPED_FILE);
        if fs::read_to_string(&shipped).ok().as_deref().map(str::trim) != Some(head.trim()) {
            backlog.unshipped += 1;
        }
        if let Ok(modified) = fs::metadata(&shipped).and_then(|m| m.modified()) {
            backlog.last_ship = backlog.last_ship.max(Some(modified));
        }
        let session = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Ok(alarm) = fs::read_to_string(dir.join(crate::ship::ALARM_FILE)) {
            let first = alarm.lines().next().unwrap_or_default().to_string();
            backlog.alarms.push((session.clone(), first));
        }
        let log = dir
            .parent()
            .and_then(|parent| crate::session_log::SessionLog::new(parent, &session).ok());
        if dir.join(crate::ship::LOST_FILE).exists() {
            backlog.lost += 1;
            if let Some(what) = log.as_ref().and_then(|l| {
                crate::ship::lost_not_acknowledged_again(l)
                    .into_iter()
                    .next()
            }) {
                backlog.lost_not_again.push((session.clone(), what));
            }
        }
        if let Some(what) = log.as_ref().and_then(crate::ship::rewritten_since_shipped) {
            backlog.rewritten.push((session, what));
        }
    }
    backlog
}

fn hooks_check(text: &str, recorder: &Recorder) -> Check {
    let settings: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Check {
                name: "hooks",
                ok: false,
                detail: format!(
                    "the settings are not valid JSON (line {}, column {})",
                    e.line(),
                    e.column()
                ),
                fix: Some("fix the file, then nd7 setup".into()),
            };
        }
    };
    let mut missing = Vec::new();
    let mut elsewhere = Vec::new();
    let claude = claude_version().and_then(|(_, v)| v);
    let events: Vec<&str> = merge::recorded_events(claude).collect();
    for event in &events {
        let ours: Vec<&serde_json::Value> = settings["hooks"][*event]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|g| g["hooks"].as_array())
            .flatten()
            .filter(|h| merge::is_nd7_hook(h))
            .collect();
        if ours.is_empty() {
            missing.push(*event);
        } else if !ours
            .iter()
            .any(|h| h["command"] == recorder.program() && h["args"] == json!(recorder.args()))
        {
            elsewhere.push(*event);
        }
    }
    // Registered for events this Claude Code does not know (setup ran before
    // it was installed, or it was downgraded): it warns at every start.
    let registered = merge::registered_events(text);
    let unknown: Vec<&str> = crate::hook::HookEvent::NAMES
        .iter()
        .copied()
        .filter(|e| claude.is_some() && !events.contains(e) && registered.iter().any(|r| r == e))
        .collect();
    let ok = missing.is_empty() && elsewhere.is_empty() && unknown.is_empty();
    let mut detail = format!(
        "{} of {} events record with {}",
        events.len() - missing.len() - elsewhere.len(),
        events.len(),
        recorder.program()
    );
    if let (false, Some(v)) = (unknown.is_empty(), claude) {
        detail.push_str(&format!(
            "; registered for events Claude Code {}.{}.{} does not know, which it warns about at every start: {}",
            v.0,
            v.1,
            v.2,
            unknown.join(", ")
        ));
    }
    if !missing.is_empty() {
        detail.push_str(&format!("; missing: {}", missing.join(", ")));
    }
    if !elsewhere.is_empty() {
        detail.push_str(&format!(
            "; another nd7, nd7 record where nd7-record is beside it, or shell form: {}",
            elsewhere.join(", ")
        ));
    }
    Check {
        name: "hooks",
        ok,
        detail,
        fix: (!ok).then(|| "nd7 setup".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_nothing_lifts_is_a_note_not_ok() {
        let check = |ok, detail: &str| Check {
            name: "x",
            ok,
            detail: detail.into(),
            fix: None,
        };
        assert_eq!(
            check(true, "not enforced: no Landlock network rules").mark(),
            "note"
        );
        assert_eq!(check(true, "Landlock ABI 7").mark(), "ok  ");
        assert_eq!(check(false, "not enforced: x").mark(), "FAIL");
    }

    #[test]
    fn the_hooks_check_names_what_is_missing_or_stale() {
        let nd7 = Recorder::nd7("/home/u/.cargo/bin/nd7");
        let full = merge::install(None, &nd7, None)
            .expect("ok")
            .text
            .expect("text");
        assert!(hooks_check(&full, &nd7).ok);
        let stale = hooks_check(&full, &Recorder::nd7("/other/nd7"));
        assert!(
            !stale.ok && stale.detail.contains("another nd7"),
            "{stale:?}"
        );
        let none = hooks_check("{}", &nd7);
        assert!(!none.ok && none.detail.starts_with("0 of 32"), "{none:?}");
        assert!(!hooks_check("{", &nd7).ok);
        // nd7-record beside nd7: hooks that still run nd7 record want setup.
        let lean = Recorder::lean("/home/u/.cargo/bin/nd7-record");
        let old = hooks_check(&full, &lean);
        assert!(
            !old.ok && old.fix.as_deref() == Some("nd7 setup"),
            "{old:?}"
        );
        let moved = merge::install(Some(&full), &lean, None)
            .expect("ok")
            .text
            .expect("text");
        let now = hooks_check(&moved, &lean);
        assert!(
            now.ok
                && now
                    .detail
                    .ends_with("record with /home/u/.cargo/bin/nd7-record"),
            "{now:?}"
        );
    }

    #[test]
    fn doctor_reports_enrolment_and_the_ship_backlog() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state/nd7");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).expect("mkdir");
        let now = SystemTime::now();
        let not = vault_checks(&state, &home, now);
        assert_eq!(not.len(), 1);
        assert!(not[0].ok && not[0].detail.starts_with("not enrolled"));

        let vault = crate::ship::vault_dir(&state);
        std::fs::create_dir_all(&vault).expect("mkdir");
        std::fs::write(vault.join(crate::ship::MACHINE_ID_FILE), "m-1\n").expect("write");
        std::fs::write(vault.join(crate::ship::SERVER_FILE), "https://v.example\n").expect("write");
        let sessions = crate::session_log::sessions_dir(&state);
        for (id, head, shipped) in [
            ("a", "3 aa", Some("3 aa")),
            ("b", "5 bb", Some("2 cc")),
            ("c", "1 dd", None),
        ] {
            let s = sessions.join(id);
            std::fs::create_dir_all(&s).expect("mkdir");
            std::fs::write(s.join("head"), format!("{head}\n")).expect("write");
            if let Some(shipped) = shipped {
                std::fs::write(s.join(crate::ship::SHIPPED_FILE), format!("{shipped}\n"))
                    .expect("write");
            }
        }
        let checks = vault_checks(&state, &home, now);
        assert_eq!(
            checks[0].detail,
            "enrolled with https://v.example as machine m-1"
        );
        let ship = &checks[1];
        assert!(
            ship.detail
                .ends_with("2 of 3 sessions have entries not yet shipped"),
            "{}",
            ship.detail
        );
        assert!(ship.ok, "a ship just now is not stale: {}", ship.detail);
        let later = now + std::time::Duration::from_secs(2 * 3600);
        let stale = &vault_checks(&state, &home, later)[1];
        assert!(
            !stale.ok && stale.fix.as_deref() == Some("nd7 ship"),
            "{}",
            stale.detail
        );
        assert!(
            stale.detail.starts_with("last ship 120 min ago")
                || stale.detail.starts_with("last ship 119 min ago"),
            "{}",
            stale.detail
        );
        // Receipts: fine until a ship leaves an alarm, then failing and naming it.
        assert!(
            checks[2].ok && checks[2].name == "receipts",
            "{:?}",
            checks[2]
        );
        std::fs::write(sessions.join("b").join(crate::ship::LOST_FILE), "# lost\n").expect("write");
        let noted = &vault_checks(&state, &home, now)[2];
        assert!(
            noted.ok && noted.detail.contains("1 session(s) keep receipts"),
            "{noted:?}"
        );
        std::fs::write(
            sessions.join("b").join(crate::ship::ALARM_FILE),
            "machine m-1, session b: the vault broke its receipt: it dropped\nfound at 1\n",
        )
        .expect("write");
        let alarm = &vault_checks(&state, &home, now)[2];
        assert!(!alarm.ok, "{alarm:?}");
        assert!(
            alarm
                .detail
                .contains("for 1 session(s); b: machine m-1, session b"),
            "{}",
            alarm.detail
        );
    }
}
