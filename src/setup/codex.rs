//! Codex's part of `nd7 setup` and `nd7 doctor`: where Codex keeps its
//! settings (`$CODEX_HOME`, default `~/.codex`), which file nd7's hooks go in,
//! and whether Codex trusts them. The edits themselves are [`codex_merge`]'s.
//!
//! Which file: `hooks.json` beside `config.toml`, unless the user keeps hooks
//! inline in `config.toml`'s `[hooks]` and none in `hooks.json` (Codex warns
//! when a layer uses both); where nd7's hooks already are, they stay.
//!
//! Codex runs a non-managed hook only once the user has trusted it: `/hooks`
//! in the TUI writes `[hooks.state."<key>"] trusted_hash` into config.toml.
//! nd7 never writes that itself; setup says how, doctor checks it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::codex_merge::{self, CodexConfigError, Found, TrustState};
use super::merge::Merged;
use super::{Check, Report, SetupError, io_err, write_settings};
use crate::hook::Recorder;

/// How to trust the hooks, said by setup and doctor.
pub const TRUST_STEP: &str = "Codex runs nd7's hooks only once you trust them: start `codex`, type /hooks and trust each nd7 entry (`codex exec --dangerously-bypass-hook-trust` runs them untrusted for one run); or have an admin ship them as managed hooks, which need no trust (docs/agents/codex.md)";

/// Where Codex keeps its settings: `$CODEX_HOME` when set (Codex requires
/// it to exist, and resolves it), else `~/.codex`.
pub fn codex_home(home: &Path) -> Result<PathBuf, SetupError> {
    match std::env::var_os("CODEX_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            fs::canonicalize(&dir).map_err(io_err(&dir, "use CODEX_HOME"))
        }
        None => Ok(home.join(".codex")),
    }
}

/// `codex --version`'s text ("codex-cli 0.171.0"), or `None` when `codex`
/// cannot be run.
pub fn codex_version() -> Option<String> {
    let out = std::process::Command::new("codex")
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The hook events the installed `codex` says it knows, as its files spell
/// them: the `HookEventName` of its app server's protocol, which
/// `codex app-server generate-json-schema` writes out (the names
/// `hooks/list` reports). `None` when `codex` cannot be run or gives no
/// answer nd7 can read (a Codex without that command); then only the events
/// nd7 knows are registered.
pub fn known_events() -> Option<Vec<String>> {
    let dir = Scratch::new()?;
    let ran = std::process::Command::new("codex")
        .args(["app-server", "generate-json-schema", "--out"])
        .arg(&dir.0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    if !ran.success() {
        return None;
    }
    // The hooks/list response's own schema, else the whole bundle.
    [
        "v2/HooksListResponse.json",
        "codex_app_server_protocol.v2.schemas.json",
    ]
    .iter()
    .find_map(|name| {
        let file = fs::File::open(dir.0.join(name)).ok()?;
        let mut text = String::new();
        io::Read::read_to_string(&mut io::Read::take(file, SCHEMA_LIMIT), &mut text).ok()?;
        codex_merge::schema_events(&text)
    })
}

/// At most this much of a schema file is read.
const SCHEMA_LIMIT: u64 = 16 << 20;

/// A private directory of nd7's under the temporary directory, removed when
/// dropped: made new (never one that was there, nor a link), mode 0700.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Option<Scratch> {
        use std::os::unix::fs::DirBuilderExt;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "nd7-codex-events-{}-{nanos:08x}",
            std::process::id()
        ));
        fs::DirBuilder::new().mode(0o700).create(&dir).ok()?;
        Some(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Whether Codex is here: `codex` on PATH, or its settings directory.
pub fn found(home: &Path) -> bool {
    codex_version().is_some() || codex_home(home).is_ok_and(|d| d.is_dir())
}

/// The two files nd7 may change, and what they hold now.
struct Files {
    hooks_json: PathBuf,
    config_toml: PathBuf,
    json: Option<String>,
    toml: Option<String>,
}

fn read(path: &Path) -> Result<Option<String>, SetupError> {
    match fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path, "read")(e)),
    }
}

impl Files {
    fn read(dir: &Path) -> Result<Files, SetupError> {
        let hooks_json = dir.join("hooks.json");
        let config_toml = dir.join("config.toml");
        Ok(Files {
            json: read(&hooks_json)?,
            toml: read(&config_toml)?,
            hooks_json,
            config_toml,
        })
    }

    fn refused(path: &Path) -> impl FnOnce(CodexConfigError) -> SetupError + '_ {
        move |source| SetupError::CodexConfig {
            path: path.to_path_buf(),
            source,
        }
    }

    fn found_json(&self) -> Result<Vec<Found>, SetupError> {
        codex_merge::found_json(self.json.as_deref()).map_err(Files::refused(&self.hooks_json))
    }

    fn found_toml(&self) -> Result<Vec<Found>, SetupError> {
        codex_merge::found_toml(self.toml.as_deref()).map_err(Files::refused(&self.config_toml))
    }

    /// Whether nd7's hooks belong in config.toml rather than hooks.json.
    fn inline(&self) -> Result<bool, SetupError> {
        if !self.found_toml()?.is_empty() {
            return Ok(true);
        }
        if !self.found_json()?.is_empty() {
            return Ok(false);
        }
        let toml = codex_merge::toml_has_hooks(self.toml.as_deref())
            .map_err(Files::refused(&self.config_toml))?;
        let json = codex_merge::json_has_hooks(self.json.as_deref())
            .map_err(Files::refused(&self.hooks_json))?;
        Ok(toml && !json)
    }

    /// nd7's handlers with the key Codex trusts each under.
    fn registered(&self) -> Result<Vec<(String, Found)>, SetupError> {
        let json = self.hooks_json.to_string_lossy().into_owned();
        let toml = self.config_toml.to_string_lossy().into_owned();
        let mut all: Vec<(String, Found)> = self
            .found_json()?
            .into_iter()
            .map(|f| (f.trust_key(&json), f))
            .collect();
        all.extend(
            self.found_toml()?
                .into_iter()
                .map(|f| (f.trust_key(&toml), f)),
        );
        Ok(all)
    }

    fn states(&self) -> Result<std::collections::BTreeMap<String, TrustState>, SetupError> {
        codex_merge::trust_states(self.toml.as_deref()).map_err(Files::refused(&self.config_toml))
    }
}

/// Writes `merged` over `path` (or says it would), with a line per change.
fn apply(
    path: &Path,
    original: Option<&str>,
    merged: &Merged,
    dry_run: bool,
    report: &mut Report,
) -> Result<(), SetupError> {
    for change in &merged.changes {
        report.done.push(format!("{}: {change}", path.display()));
    }
    let Some(new) = &merged.text else {
        return Ok(());
    };
    if dry_run {
        report.done.push(format!(
            "{}: would write these changes (dry run: nothing written)",
            path.display()
        ));
        return Ok(());
    }
    // A symlinked file (dotfile managers) is changed where it points.
    let target = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if let Some(backup) = write_settings(&target, original, new)? {
        report.done.push(format!(
            "{}: previous version kept as {}",
            path.display(),
            backup.display()
        ));
    }
    Ok(())
}

/// Removes a hooks.json that uninstalling left with no hook at all: Codex
/// reads no file as it reads an empty one. Its last version stays as the
/// backup `apply` made.
fn remove_if_empty(
    path: &Path,
    merged: &Merged,
    dry_run: bool,
    report: &mut Report,
) -> Result<(), SetupError> {
    let Some(text) = &merged.text else {
        return Ok(());
    };
    let empty = serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| {
        v.as_object().is_some_and(|o| {
            o.iter()
                .all(|(k, v)| k == "hooks" && v.as_object().is_some_and(|h| h.is_empty()))
        })
    });
    if !empty {
        return Ok(());
    }
    if !dry_run {
        fs::remove_file(path).map_err(io_err(path, "remove"))?;
    }
    report.done.push(format!(
        "{}: removed, as it holds no hook any more",
        path.display()
    ));
    Ok(())
}

/// `nd7 setup --agent codex` (or its share of `nd7 setup`): nd7's hooks in,
/// or with `uninstall` out, together with the trust Codex stored for them.
pub fn setup(
    home: &Path,
    nd7: &Path,
    dry_run: bool,
    uninstall: bool,
    report: &mut Report,
) -> Result<(), SetupError> {
    let dir = codex_home(home)?;
    let files = Files::read(&dir)?;
    if uninstall {
        let trusted: Vec<(String, String)> = files
            .registered()?
            .into_iter()
            .map(|(key, f)| (key, f.trust_hash()))
            .collect();
        let json = codex_merge::uninstall_json(files.json.as_deref())
            .map_err(Files::refused(&files.hooks_json))?;
        if files.json.is_some() {
            apply(
                &files.hooks_json,
                files.json.as_deref(),
                &json,
                dry_run,
                report,
            )?;
            remove_if_empty(&files.hooks_json, &json, dry_run, report)?;
        }
        let toml = codex_merge::uninstall_toml(files.toml.as_deref())
            .map_err(Files::refused(&files.config_toml))?;
        let after = toml.text.as_deref().or(files.toml.as_deref());
        let trust = codex_merge::remove_trust(after, &trusted)
            .map_err(Files::refused(&files.config_toml))?;
        let mut changes = toml.changes;
        changes.extend(trust.changes);
        let merged = Merged {
            text: trust.text.or(toml.text),
            changes,
        };
        if files.toml.is_some() {
            apply(
                &files.config_toml,
                files.toml.as_deref(),
                &merged,
                dry_run,
                report,
            )?;
        }
        return Ok(());
    }
    let recorder = super::recorder_beside(nd7);
    let known = known_events();
    let events = codex_merge::with_known(known.as_deref());
    let (path, original, merged) = if files.inline()? {
        let merged = codex_merge::install_toml(files.toml.as_deref(), &recorder, &events)
            .map_err(Files::refused(&files.config_toml))?;
        (&files.config_toml, files.toml.as_deref(), merged)
    } else {
        let merged = codex_merge::install_json(files.json.as_deref(), &recorder, &events)
            .map_err(Files::refused(&files.hooks_json))?;
        (&files.hooks_json, files.json.as_deref(), merged)
    };
    if merged.text.is_none() {
        report
            .done
            .push(format!("{}: nothing to change", path.display()));
    }
    apply(path, original, &merged, dry_run, report)?;
    // What Codex will make of them: read back what was (or would be) written.
    let after = Files {
        json: if *path == files.hooks_json {
            merged.text.clone().or(files.json.clone())
        } else {
            files.json.clone()
        },
        toml: if *path == files.config_toml {
            merged.text.clone().or(files.toml.clone())
        } else {
            files.toml.clone()
        },
        ..files
    };
    let trust = trust_summary(&after)?;
    if trust.untrusted > 0 {
        report.warnings.push(format!(
            "{} of {} nd7 hooks are not trusted by Codex yet. {TRUST_STEP}",
            trust.untrusted, trust.total
        ));
    }
    if codex_merge::hooks_disabled(after.toml.as_deref())
        .map_err(Files::refused(&after.config_toml))?
    {
        report.warnings.push(format!(
            "{} turns Codex's hooks off ([features] hooks = false): nothing is recorded until you remove that",
            after.config_toml.display()
        ));
    }
    if codex_version().is_none() {
        report.warnings.push(
            "Codex (`codex`) is not on PATH: the hooks take effect once it is installed".into(),
        );
    }
    Ok(())
}

/// How many of nd7's handlers Codex trusts.
struct TrustSummary {
    total: usize,
    untrusted: usize,
}

fn trust_summary(files: &Files) -> Result<TrustSummary, SetupError> {
    let states = files.states()?;
    let registered = files.registered()?;
    Ok(TrustSummary {
        total: registered.len(),
        untrusted: registered
            .iter()
            .filter(|(key, found)| trust_problem(states.get(key), found).is_some())
            .count(),
    })
}

/// Why Codex will not run a handler it keeps at `state`, if it will not.
fn trust_problem(state: Option<&TrustState>, found: &Found) -> Option<&'static str> {
    let state = state.cloned().unwrap_or_default();
    if state.enabled == Some(false) {
        return Some("turned off");
    }
    match state.trusted_hash {
        None => Some("untrusted"),
        Some(h) if h != found.trust_hash() => Some("changed since trusted"),
        Some(_) => None,
    }
}

/// Codex's lines of `nd7 doctor`: the CLI, nd7's hooks, and their trust.
pub fn doctor(home: &Path, recorder: &Recorder) -> Vec<Check> {
    let version = codex_version();
    let dir = match codex_home(home) {
        Ok(dir) => dir,
        Err(e) => {
            return vec![Check {
                name: "codex",
                ok: false,
                detail: e.to_string(),
                fix: Some("point CODEX_HOME at Codex's settings directory, or unset it".into()),
            }];
        }
    };
    if version.is_none() && !dir.is_dir() {
        return vec![Check {
            name: "codex",
            ok: true,
            detail: format!(
                "not installed (no `codex` on PATH, no {}): nothing to record",
                dir.display()
            ),
            fix: None,
        }];
    }
    let installed = version.is_some();
    let mut checks = vec![Check {
        name: "codex",
        ok: true,
        detail: version.unwrap_or_else(|| {
            format!(
                "`codex` is not on PATH; its settings are in {}",
                dir.display()
            )
        }),
        fix: None,
    }];
    let files = match Files::read(&dir) {
        Ok(f) => f,
        Err(e) => {
            checks.push(Check {
                name: "codex-hooks",
                ok: false,
                detail: e.to_string(),
                fix: Some("make the file readable, then nd7 setup --agent codex".into()),
            });
            return checks;
        }
    };
    let registered = match files.registered() {
        Ok(r) => r,
        Err(e) => {
            checks.push(Check {
                name: "codex-hooks",
                ok: false,
                detail: e.to_string(),
                fix: Some("fix the file, then nd7 setup --agent codex".into()),
            });
            return checks;
        }
    };
    let states = match files.states() {
        Ok(s) => s,
        Err(e) => {
            checks.push(Check {
                name: "codex-trust",
                ok: false,
                detail: e.to_string(),
                fix: Some("fix config.toml, then nd7 doctor".into()),
            });
            return checks;
        }
    };
    let requirements = read(Path::new(SYSTEM_REQUIREMENTS)).ok().flatten();
    let managed = codex_merge::found_toml(requirements.as_deref()).unwrap_or_default();
    let managed_only = codex_merge::managed_only(requirements.as_deref()).unwrap_or(false);
    let disabled = codex_merge::hooks_disabled(files.toml.as_deref()).unwrap_or(false);
    let known = installed.then(known_events).flatten();
    let version_text = checks[0].detail.clone();
    checks.extend(assess(&Seen {
        recorder,
        known: known.as_deref().map(|k| (version_text.as_str(), k)),
        user: &registered,
        states: &states,
        managed: &managed,
        managed_only,
        disabled,
        config_toml: &files.config_toml,
    }));
    checks
}

/// Where Codex reads an administrator's requirements, managed hooks among
/// them, on Linux and macOS (MDM and cloud-managed ones are not files).
pub const SYSTEM_REQUIREMENTS: &str = "/etc/codex/requirements.toml";

/// What doctor found about Codex's hooks.
pub struct Seen<'a> {
    /// What the hooks should run: nd7-record, or nd7 record.
    pub recorder: &'a Recorder,
    /// The installed Codex (`codex --version`'s text) and the events it
    /// says it knows, when it could be asked.
    pub known: Option<(&'a str, &'a [String])>,
    /// nd7's handlers in the user's files, with their trust keys.
    pub user: &'a [(String, Found)],
    pub states: &'a std::collections::BTreeMap<String, TrustState>,
    /// nd7's handlers an administrator ships as managed hooks.
    pub managed: &'a [Found],
    /// `allow_managed_hooks_only = true`: the user's hooks do not run.
    pub managed_only: bool,
    /// `[features] hooks = false`.
    pub disabled: bool,
    pub config_toml: &'a Path,
}

/// The `codex-hooks` and `codex-trust` lines for what was found. Pure.
pub fn assess(seen: &Seen<'_>) -> Vec<Check> {
    let events = codex_merge::with_known(seen.known.map(|(_, k)| k));
    let wanted = codex_merge::command(seen.recorder);
    let user: Vec<&(String, Found)> = seen.user.iter().filter(|_| !seen.managed_only).collect();
    let mut missing = Vec::new();
    let mut elsewhere = Vec::new();
    let mut managed_events = 0;
    let mut unknown_to_nd7 = Vec::new();
    for event in &events {
        if seen.managed.iter().any(|f| f.event == *event) {
            managed_events += 1;
            continue;
        }
        let ours: Vec<&Found> = user
            .iter()
            .map(|(_, f)| f)
            .filter(|f| f.event == *event)
            .collect();
        if ours.is_empty() && !codex_merge::events().contains(event) {
            unknown_to_nd7.push(*event);
        } else if ours.is_empty() {
            missing.push(*event);
        } else if !ours.iter().any(|f| f.command == wanted) {
            elsewhere.push(*event);
        }
    }
    let ok =
        missing.is_empty() && elsewhere.is_empty() && unknown_to_nd7.is_empty() && !seen.disabled;
    let mut detail = format!(
        "{} of {} events record with {}",
        events.len() - missing.len() - elsewhere.len() - unknown_to_nd7.len(),
        events.len(),
        seen.recorder.program()
    );
    if let (false, Some((version, _))) = (unknown_to_nd7.is_empty(), seen.known) {
        detail.push_str(&format!(
            "; {version} knows events nd7 does not register: {}",
            unknown_to_nd7.join(", ")
        ));
    }
    if managed_events > 0 {
        detail.push_str(&format!(
            " ({managed_events} as managed hooks from {SYSTEM_REQUIREMENTS})"
        ));
    }
    if !missing.is_empty() {
        detail.push_str(&format!("; missing: {}", missing.join(", ")));
    }
    if !elsewhere.is_empty() {
        detail.push_str(&format!("; another nd7: {}", elsewhere.join(", ")));
    }
    if seen.managed_only && !seen.user.is_empty() {
        detail.push_str(&format!(
            "; {SYSTEM_REQUIREMENTS} allows managed hooks only, so the user's do not run"
        ));
    }
    if seen.disabled {
        detail.push_str(&format!(
            "; {} turns hooks off ([features] hooks = false)",
            seen.config_toml.display()
        ));
    }
    let mut checks = vec![Check {
        name: "codex-hooks",
        ok,
        detail,
        fix: (!ok).then(|| {
            if seen.managed_only {
                format!("ask your admin to add nd7's hooks to {SYSTEM_REQUIREMENTS} (docs/agents/codex.md)")
            } else {
                "nd7 setup --agent codex".into()
            }
        }),
    }];
    // Trust matters for the user's handlers of events no managed hook covers.
    let needing: Vec<&(String, Found)> = user
        .into_iter()
        .filter(|(_, f)| !seen.managed.iter().any(|m| m.event == f.event))
        .collect();
    if needing.is_empty() {
        return checks;
    }
    let mut problems = Vec::new();
    for (key, found) in &needing {
        if let Some(problem) = trust_problem(seen.states.get(key), found) {
            problems.push(format!("{} ({problem})", found.event));
        }
    }
    checks.push(Check {
        name: "codex-trust",
        ok: problems.is_empty(),
        detail: if problems.is_empty() {
            format!("Codex trusts all {} of nd7's hooks", needing.len())
        } else {
            format!(
                "{} of nd7's {} hooks will not run: {}",
                problems.len(),
                needing.len(),
                problems.join(", ")
            )
        },
        fix: (!problems.is_empty()).then(|| TRUST_STEP.to_string()),
    });
    checks
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const ND7: &str = "/usr/local/bin/nd7";

    static ND7_RECORDER: std::sync::LazyLock<Recorder> =
        std::sync::LazyLock::new(|| Recorder::nd7(ND7));

    fn found(event: &str, nd7: &str) -> Found {
        Found {
            event: event.into(),
            group: 0,
            handler: 0,
            command: codex_merge::command(&Recorder::nd7(nd7)),
            timeout: codex_merge::timeout_for(event),
            matcher: None,
            is_async: false,
            status_message: None,
        }
    }

    fn user(nd7: &str) -> Vec<(String, Found)> {
        codex_merge::events()
            .iter()
            .map(|e| {
                let f = found(e, nd7);
                (f.trust_key("/h/.codex/hooks.json"), f)
            })
            .collect()
    }

    fn trusted(user: &[(String, Found)]) -> BTreeMap<String, TrustState> {
        user.iter()
            .map(|(k, f)| {
                (
                    k.clone(),
                    TrustState {
                        trusted_hash: Some(f.trust_hash()),
                        enabled: None,
                    },
                )
            })
            .collect()
    }

    fn seen<'a>(
        user: &'a [(String, Found)],
        states: &'a BTreeMap<String, TrustState>,
        managed: &'a [Found],
        managed_only: bool,
    ) -> Seen<'a> {
        Seen {
            recorder: &ND7_RECORDER,
            known: None,
            user,
            states,
            managed,
            managed_only,
            disabled: false,
            config_toml: Path::new("/h/.codex/config.toml"),
        }
    }

    #[test]
    fn trusted_user_hooks_pass_and_a_new_path_needs_trusting_again() {
        let mine = user(ND7);
        let states = trusted(&mine);
        let checks = assess(&seen(&mine, &states, &[], false));
        assert!(checks.iter().all(|c| c.ok), "{checks:?}");
        // After an upgrade moved nd7, setup rewrote the commands: Codex
        // holds the old hashes.
        let moved = user("/opt/nd7/bin/nd7");
        let checks = assess(&Seen {
            recorder: &Recorder::nd7("/opt/nd7/bin/nd7"),
            ..seen(&moved, &states, &[], false)
        });
        assert!(checks[0].ok);
        assert!(!checks[1].ok);
        assert!(
            checks[1].detail.contains("changed since trusted"),
            "{checks:?}"
        );
    }

    #[test]
    fn managed_hooks_need_no_trust_and_managed_only_ignores_the_users() {
        let managed: Vec<Found> = codex_merge::events()
            .iter()
            .map(|e| found(e, ND7))
            .collect();
        let none = BTreeMap::new();
        let checks = assess(&seen(&[], &none, &managed, true));
        assert_eq!(checks.len(), 1, "no trust line: {checks:?}");
        assert!(
            checks[0].ok && checks[0].detail.contains("14 as managed hooks"),
            "{checks:?}"
        );
        // Managed only, and nd7's hooks are the user's: they will not run.
        let mine = user(ND7);
        let states = trusted(&mine);
        let checks = assess(&seen(&mine, &states, &[], true));
        assert!(!checks[0].ok);
        assert!(
            checks[0].detail.contains("allows managed hooks only"),
            "{checks:?}"
        );
        assert!(
            checks[0]
                .fix
                .as_deref()
                .is_some_and(|f| f.contains("admin"))
        );
    }

    #[test]
    fn turned_off_hooks_are_named() {
        let mine = user(ND7);
        let mut states = trusted(&mine);
        if let Some(s) = states.values_mut().next() {
            s.enabled = Some(false);
        }
        let checks = assess(&seen(&mine, &states, &[], false));
        assert!(checks[1].detail.contains("(turned off)"), "{checks:?}");
    }

    #[test]
    fn events_the_installed_codex_knows_and_nd7_does_not_register_fail() {
        let states = BTreeMap::new();
        let ours = user(ND7);
        let newer = vec!["StopFailure".to_string()];
        let checks = assess(&Seen {
            known: Some(("codex-cli 0.180.0", &newer)),
            ..seen(&ours, &states, &[], false)
        });
        assert!(!checks[0].ok, "{checks:?}");
        assert!(
            checks[0].detail.starts_with("14 of 15 events record with")
                && checks[0].detail.contains(
                    "; codex-cli 0.180.0 knows events nd7 does not register: StopFailure"
                ),
            "{checks:?}"
        );
        assert_eq!(checks[0].fix.as_deref(), Some("nd7 setup --agent codex"));
        // Asked nothing, nothing is missed.
        assert!(assess(&seen(&ours, &states, &[], false))[0].ok);
    }
}
