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
    let nd7 = nd7.to_string_lossy();
    let (path, original, merged) = if files.inline()? {
        let merged = codex_merge::install_toml(files.toml.as_deref(), &nd7)
            .map_err(Files::refused(&files.config_toml))?;
        (&files.config_toml, files.toml.as_deref(), merged)
    } else {
        let merged = codex_merge::install_json(files.json.as_deref(), &nd7)
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
    /// Events whose nd7 handler is untrusted, changed since trusted, or off.
    problems: Vec<String>,
}

fn trust_summary(files: &Files) -> Result<TrustSummary, SetupError> {
    let states = files.states()?;
    let registered = files.registered()?;
    let mut summary = TrustSummary {
        total: registered.len(),
        untrusted: 0,
        problems: Vec::new(),
    };
    for (key, found) in &registered {
        let state = states.get(key).cloned().unwrap_or_default();
        let problem = if state.enabled == Some(false) {
            Some("turned off")
        } else {
            match state.trusted_hash {
                None => Some("untrusted"),
                Some(h) if h != found.trust_hash() => Some("changed since trusted"),
                Some(_) => None,
            }
        };
        if let Some(problem) = problem {
            summary.untrusted += 1;
            summary
                .problems
                .push(format!("{} ({problem})", found.event));
        }
    }
    Ok(summary)
}

/// Codex's lines of `nd7 doctor`: the CLI, nd7's hooks, and their trust.
pub fn doctor(home: &Path, nd7: &str) -> Vec<Check> {
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
    let events = codex_merge::events();
    let mut missing = Vec::new();
    let mut elsewhere = Vec::new();
    let wanted = codex_merge::command(nd7);
    for event in events {
        let ours: Vec<&Found> = registered
            .iter()
            .map(|(_, f)| f)
            .filter(|f| f.event == *event)
            .collect();
        if ours.is_empty() {
            missing.push(*event);
        } else if !ours.iter().any(|f| f.command == wanted) {
            elsewhere.push(*event);
        }
    }
    let disabled = codex_merge::hooks_disabled(files.toml.as_deref()).unwrap_or(false);
    let ok = missing.is_empty() && elsewhere.is_empty() && !disabled;
    let mut detail = format!(
        "{} of {} events record with {nd7}",
        events.len() - missing.len() - elsewhere.len(),
        events.len()
    );
    if !missing.is_empty() {
        detail.push_str(&format!("; missing: {}", missing.join(", ")));
    }
    if !elsewhere.is_empty() {
        detail.push_str(&format!("; another nd7: {}", elsewhere.join(", ")));
    }
    if disabled {
        detail.push_str(&format!(
            "; {} turns hooks off ([features] hooks = false)",
            files.config_toml.display()
        ));
    }
    checks.push(Check {
        name: "codex-hooks",
        ok,
        detail,
        fix: (!ok).then(|| "nd7 setup --agent codex".into()),
    });
    if registered.is_empty() {
        return checks;
    }
    checks.push(match trust_summary(&files) {
        Err(e) => Check {
            name: "codex-trust",
            ok: false,
            detail: e.to_string(),
            fix: Some("fix config.toml".into()),
        },
        Ok(t) => Check {
            name: "codex-trust",
            ok: t.untrusted == 0,
            detail: if t.untrusted == 0 {
                format!("Codex trusts all {} of nd7's hooks", t.total)
            } else {
                format!(
                    "{} of nd7's {} hooks will not run: {}",
                    t.untrusted,
                    t.total,
                    t.problems.join(", ")
                )
            },
            fix: (t.untrusted > 0).then(|| TRUST_STEP.to_string()),
        },
    });
    checks
}
