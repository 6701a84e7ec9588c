//! The timer that runs `nd7 ship`: systemd user units on Linux, a
//! LaunchAgent on macOS. The unit texts are rendered by pure functions from
//! the templates in install/; installing them is the only platform code
//! outside `sandbox/`.
//!
//! setup installs the timer only on an enrolled machine (nothing to ship to
//! otherwise), and never where Homebrew's `brew services` or a Nix
//! home-manager module already runs `nd7 ship`, so it is not scheduled twice.

use std::fs;
use std::path::{Path, PathBuf};

use super::SetupError;

const SERVICE_TEMPLATE: &str = include_str!("../../install/nd7-ship.service");
const TIMER_TEMPLATE: &str = include_str!("../../install/nd7-ship.timer");
const PLIST_TEMPLATE: &str = include_str!("../../install/dev.nd7.ship.plist");

pub const SYSTEMD_SERVICE: &str = "nd7-ship.service";
pub const SYSTEMD_TIMER: &str = "nd7-ship.timer";
pub const LAUNCHD_LABEL: &str = "dev.nd7.ship";

/// `path` as one word of a systemd command line: quoted, with `\`, `"` and
/// the specifier character `%` escaped.
pub fn systemd_word(path: &str) -> String {
    let mut out = String::from("\"");
    for c in path.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `text` escaped for XML character data.
pub fn xml_text(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The systemd service and timer for `nd7`.
pub fn systemd_units(nd7: &Path) -> (String, String) {
    let service = SERVICE_TEMPLATE.replace("@ND7@", &systemd_word(&nd7.to_string_lossy()));
    (service, TIMER_TEMPLATE.to_string())
}

/// The LaunchAgent property list for `nd7`.
pub fn launchd_plist(nd7: &Path) -> String {
    PLIST_TEMPLATE.replace("@ND7@", &xml_text(&nd7.to_string_lossy()))
}

/// Where the timer's files go, under the user's home.
pub fn unit_paths(home: &Path) -> Vec<PathBuf> {
    if cfg!(target_os = "macos") {
        vec![home.join(format!("Library/LaunchAgents/{LAUNCHD_LABEL}.plist"))]
    } else {
        let dir = crate::home::Base::Config.under(home).join("systemd/user");
        vec![dir.join(SYSTEMD_SERVICE), dir.join(SYSTEMD_TIMER)]
    }
}

/// Who else already runs `nd7 ship` on a schedule, if anyone.
pub fn managed_elsewhere(home: &Path) -> Option<String> {
    let brew = [
        home.join("Library/LaunchAgents/homebrew.mxcl.nd7.plist"),
        home.join(".config/systemd/user/homebrew.nd7.timer"),
    ];
    if let Some(found) = brew.iter().find(|p| p.exists()) {
        return Some(format!("Homebrew (`brew services`, {})", found.display()));
    }
    for path in unit_paths(home) {
        if fs::read_link(&path).is_ok_and(|target| target.starts_with("/nix/store")) {
            return Some(format!("Nix ({} links into the store)", path.display()));
        }
    }
    None
}

/// Writes the timer's files and starts it. Returns what was done, and a
/// warning when the scheduler could not be told (the files are in place).
pub fn install(
    home: &Path,
    nd7: &Path,
    dry_run: bool,
) -> Result<(Vec<String>, Option<String>), SetupError> {
    let paths = unit_paths(home);
    let texts: Vec<String> = if cfg!(target_os = "macos") {
        vec![launchd_plist(nd7)]
    } else {
        let (service, timer) = systemd_units(nd7);
        vec![service, timer]
    };
    let mut done = Vec::new();
    let mut changed = false;
    for (path, text) in paths.iter().zip(&texts) {
        if fs::read_to_string(path).ok().as_deref() == Some(text.as_str()) {
            continue;
        }
        changed = true;
        if !dry_run {
            super::write_file(path, text.as_bytes(), 0o644)?;
        }
        let verb = if dry_run { "would write" } else { "wrote" };
        done.push(format!("{}: {verb} the ship timer", path.display()));
    }
    if !changed || dry_run {
        return Ok((done, None));
    }
    if let Some(why) = no_scheduler() {
        return Ok((done, Some(unscheduled(&why, nd7))));
    }
    let warning = start(&paths).err();
    Ok((done, warning))
}

/// What to do when the timer's files are in place but nothing can run
/// them: how to get a user session that lasts, and how to ship without one.
pub fn unscheduled(why: &str, nd7: &Path) -> String {
    let nd7 = nd7.display();
    if cfg!(target_os = "macos") {
        return format!(
            "the ship timer's files are in place but launchd was not told ({why}); from a login session run `nd7 setup` again, or run `{nd7} ship` yourself (cron: `*/5 * * * * {nd7} ship`)"
        );
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "$USER".into());
    format!(
        "the ship timer's files are in place but nothing runs them: {why}. For a user session that lasts without a login, `loginctl enable-linger {user}` (as root, or where polkit allows it), then log in again and run `systemctl --user enable --now {SYSTEMD_TIMER}`; or run `{nd7} ship` yourself, or from cron: `*/5 * * * * {nd7} ship`"
    )
}

/// Why no scheduler can be told here, if none can. Linux: systemd's user
/// manager is reached through $XDG_RUNTIME_DIR, which only a login session
/// (or lingering) provides; su, sudo, ssh without PAM's systemd module, a
/// container and cron have none.
pub fn no_scheduler() -> Option<String> {
    if cfg!(target_os = "macos") {
        return None;
    }
    let Some(runtime) = std::env::var_os("XDG_RUNTIME_DIR").filter(|r| !r.is_empty()) else {
        return Some(
            "this account has no systemd user session here ($XDG_RUNTIME_DIR is not set: no login session, as under su, sudo, cron or a container)".into(),
        );
    };
    let runtime = Path::new(&runtime);
    let reachable = ["systemd/private", "bus"]
        .iter()
        .any(|p| runtime.join(p).exists());
    (!reachable).then(|| {
        format!(
            "this account has no systemd user manager running ({} has no systemd/private or bus)",
            runtime.display()
        )
    })
}

/// Stops the timer and removes its files, if they are nd7's own.
pub fn uninstall(home: &Path, dry_run: bool) -> Result<Vec<String>, SetupError> {
    let paths: Vec<PathBuf> = unit_paths(home)
        .into_iter()
        .filter(|p| fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file()))
        .collect();
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    if !dry_run {
        let _ = stop(&paths);
        for path in &paths {
            fs::remove_file(path).map_err(super::io_err(path, "remove"))?;
        }
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    Ok(paths
        .iter()
        .map(|p| format!("{}: {verb} the ship timer", p.display()))
        .collect())
}

/// Whether a ship timer is scheduled: nd7's own, or one Homebrew or Nix
/// manages. Says which, or why none is and what fixes it.
pub fn active(home: &Path, nd7: &Path) -> Result<String, (String, String)> {
    if let Some(who) = managed_elsewhere(home) {
        return Ok(format!("managed by {who}"));
    }
    if !unit_paths(home).iter().all(|p| p.exists()) {
        return Err(("no ship timer is installed".into(), "nd7 setup".into()));
    }
    if let Some(why) = no_scheduler() {
        return Err((
            "installed, but nothing runs it".into(),
            unscheduled(&why, nd7),
        ));
    }
    scheduled().map_err(|why| {
        let fix = if cfg!(target_os = "macos") {
            "nd7 setup".to_string()
        } else {
            format!("systemctl --user enable --now {SYSTEMD_TIMER}")
        };
        (why, fix)
    })
}

#[cfg(target_os = "macos")]
fn scheduled() -> Result<String, String> {
    let uid = rustix::process::getuid().as_raw();
    launchctl(&["print", &format!("gui/{uid}/{LAUNCHD_LABEL}")])
        .map(|()| format!("launchd agent {LAUNCHD_LABEL} loaded"))
        .map_err(|_| format!("launchd agent {LAUNCHD_LABEL} is installed but not loaded"))
}

#[cfg(not(target_os = "macos"))]
fn scheduled() -> Result<String, String> {
    run(
        "systemctl",
        &["--user", "is-active", "--quiet", SYSTEMD_TIMER],
    )
    .map(|()| format!("systemd user timer {SYSTEMD_TIMER} active"))
    .map_err(|_| format!("systemd user timer {SYSTEMD_TIMER} is installed but not active"))
}

#[cfg(target_os = "macos")]
fn start(paths: &[PathBuf]) -> Result<(), String> {
    let uid = rustix::process::getuid().as_raw();
    let plist = &paths[0];
    // bootout first, so a changed plist is reloaded; it fails harmlessly
    // when the agent was not loaded.
    let _ = launchctl(&["bootout", &format!("gui/{uid}/{LAUNCHD_LABEL}")]);
    launchctl(&["bootstrap", &format!("gui/{uid}"), &plist.to_string_lossy()])
}

#[cfg(target_os = "macos")]
fn stop(_paths: &[PathBuf]) -> Result<(), String> {
    let uid = rustix::process::getuid().as_raw();
    launchctl(&["bootout", &format!("gui/{uid}/{LAUNCHD_LABEL}")])
}

#[cfg(target_os = "macos")]
fn launchctl(args: &[&str]) -> Result<(), String> {
    run("launchctl", args)
}

#[cfg(not(target_os = "macos"))]
fn start(_paths: &[PathBuf]) -> Result<(), String> {
    run("systemctl", &["--user", "daemon-reload"])?;
    run("systemctl", &["--user", "enable", "--now", SYSTEMD_TIMER])
}

#[cfg(not(target_os = "macos"))]
fn stop(_paths: &[PathBuf]) -> Result<(), String> {
    run("systemctl", &["--user", "disable", "--now", SYSTEMD_TIMER])
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let shown = format!("{program} {}", args.join(" "));
    match std::process::Command::new(program).args(args).output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "`{shown}` failed ({}); the files are in place, run it yourself once the user session allows",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run `{shown}`: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_quoted_for_systemd() {
        assert_eq!(systemd_word("/usr/bin/nd7"), "\"/usr/bin/nd7\"");
        assert_eq!(
            systemd_word("/a b/100%/\"q\"\\"),
            "\"/a b/100%%/\\\"q\\\"\\\\\""
        );
        let (service, timer) = systemd_units(Path::new("/opt/my tools/nd7"));
        assert!(
            service.contains("ExecStart=\"/opt/my tools/nd7\" ship\n"),
            "{service}"
        );
        assert!(!service.contains("@ND7@"));
        assert!(timer.contains("OnUnitActiveSec=5min"));
    }

    #[test]
    fn paths_are_escaped_for_the_plist() {
        let plist = launchd_plist(Path::new("/Users/a&b/<x>/nd7"));
        assert!(
            plist.contains("<string>/Users/a&amp;b/&lt;x&gt;/nd7</string>"),
            "{plist}"
        );
        assert!(!plist.contains("@ND7@"));
    }
}
