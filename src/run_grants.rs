//! The grants a session of `nd7 run` starts with, beyond the floor
//! (ADR-0042): what `~/.nd7/grants` names for every project or this one,
//! then `--preset` and `--allow`, each made as `nd7 allow` makes it; the
//! `run_start` member that records them and the banner line that says them.
//! Kept apart from `run.rs`, which only calls it before the floor is built.

use std::io;
use std::path::{Path, PathBuf};

use crate::policy::{Policy, grants};
use crate::{kernel, run_dir};

/// Why the start grants stop `nd7 run` before anything starts.
#[derive(Debug, thiserror::Error)]
pub enum StartGrantError {
    #[error("{path} {source}")]
    File {
        path: PathBuf,
        source: grants::GrantsError,
    },
    #[error("{path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    #[error("--preset {0}: no such preset; the presets are {list}", list = grants::preset_names())]
    NoPreset(String),
    #[error(
        "{path} ({from}) is your home directory: ~/.nd7/grants never grants the whole home to every session; give it to one session with --allow ~ or nd7 allow ~, or name the directories commands need"
    )]
    LastingHome { path: PathBuf, from: String },
    #[error("{path} ({from}): {source}")]
    Grant {
        path: PathBuf,
        from: String,
        source: crate::policy::GrantError,
    },
}

/// What a session starts with beyond the floor: `~/.nd7/grants` (nothing
/// inside a session can write it), then `--preset` and `--allow`; and what
/// to tell the user about a project section that matches nothing because
/// its path goes through a link nd7 does not follow (ADR-0068: the agent
/// could otherwise make a section of another project's its own).
pub fn planned(
    home: &Path,
    project: &Path,
    presets: &[String],
    allow: &[PathBuf],
) -> Result<(Vec<grants::Planned>, Vec<String>), StartGrantError> {
    let file = home.join(grants::FILE);
    let warnings = std::cell::RefCell::new(Vec::new());
    let mut planned = match std::fs::read_to_string(&file) {
        Ok(text) => {
            let lines = grants::parse(&text, home).map_err(|source| StartGrantError::File {
                path: file.clone(),
                source,
            })?;
            let resolve = |p: &Path| match kernel::real_path(p) {
                Ok(real) => Some(real.path),
                Err(e) => {
                    let line = format!(
                        "the section [{}] of ~/{} is no project's: {e}; write the project's real path in its place",
                        grants::tilde(p, home),
                        grants::FILE
                    );
                    let mut warnings = warnings.borrow_mut();
                    if !warnings.contains(&line) {
                        warnings.push(line);
                    }
                    None
                }
            };
            grants::plan(&lines, project, home, &resolve)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            return Err(StartGrantError::Io {
                path: file,
                action: "read",
                source,
            });
        }
    };
    for name in presets {
        // A preset of hosts only (`github`) grants no path.
        if grants::preset(name).is_none() && crate::policy::net::net_preset(name).is_some() {
            continue;
        }
        let preset = grants::preset(name).ok_or_else(|| StartGrantError::NoPreset(name.clone()))?;
        planned.extend(grants::entry_paths(
            &grants::Entry::Preset(preset),
            home,
            "--preset",
        ));
    }
    for dir in allow {
        let path = grants::expand_tilde(dir, home);
        let path = std::path::absolute(&path).unwrap_or(path);
        planned.extend(grants::entry_paths(
            &grants::Entry::Path(path),
            home,
            "--allow",
        ));
    }
    Ok((planned, warnings.into_inner()))
}

/// A grant the session started with: its real path and where it came from.
#[derive(Clone, Debug)]
pub struct Started {
    pub path: PathBuf,
    pub from: String,
}

/// Grants what `planned` names, as `nd7 allow` would: each is resolved
/// without following a link the account could have placed
/// ([`kernel::real_path`]), so that no earlier session can choose what a
/// later one starts with (ADR-0068: `~/.cache/pip` swapped for a link to
/// `/` under a grant of `~/.cache`); a path that does not exist yet is
/// created (once it is known that it may be granted); each is pinned
/// (ADR-0028). One nd7 would never grant (under `~/.nd7`, in a credential
/// store, `/` or above the home, the home from `~/.nd7/grants`) stops the
/// run; one reached through such a link is left out, and said so.
pub fn grant_at_start(
    policy: &mut Policy,
    planned: &[grants::Planned],
) -> Result<(Vec<Started>, Vec<String>), StartGrantError> {
    let mut started = Vec::new();
    let mut warnings = Vec::new();
    let home = policy.roots.home.clone();
    for p in planned {
        let fail = |source| StartGrantError::Grant {
            path: p.path.clone(),
            from: p.from.clone(),
            source,
        };
        let not_granted = |why: &dyn std::fmt::Display| {
            format!("{} ({}) is not granted: {why}", p.path.display(), p.from)
        };
        let link_refused = |e: &kernel::RealPathError| {
            not_granted(&format_args!(
                "{e}; if the place it leads to is what you mean, name that real path in ~/{} (or to --allow)",
                grants::FILE
            ))
        };
        let mut real = match kernel::real_path(&p.path) {
            Ok(real) => real,
            Err(e) => {
                warnings.push(link_refused(&e));
                continue;
            }
        };
        if !real.exists {
            policy.check_grant(&real.path).map_err(fail)?;
            if let Err(e) = run_dir::create(&real.path, p.dir) {
                warnings.push(not_granted(&format_args!("it cannot be created ({e})")));
                continue;
            }
            real = match kernel::real_path(&p.path) {
                Ok(real) if real.exists => real,
                Ok(_) => {
                    warnings.push(not_granted(&"it is gone again once created"));
                    continue;
                }
                Err(e) => {
                    warnings.push(link_refused(&e));
                    continue;
                }
            };
        }
        let resolved = real.path;
        policy.check_grant(&resolved).map_err(fail)?;
        if resolved == home && p.from.starts_with("~/") {
            return Err(StartGrantError::LastingHome {
                path: p.path.clone(),
                from: p.from.clone(),
            });
        }
        match kernel::pin(&resolved) {
            Ok(id) => {
                policy.allow(&resolved).map_err(fail)?;
                policy.pin(&resolved, id);
                policy.alias(&p.path, &resolved);
                if resolved != p.path {
                    warnings.push(format!(
                        "{} ({}) leads to {}, which is what is granted",
                        p.path.display(),
                        p.from,
                        resolved.display()
                    ));
                }
                started.push(Started {
                    path: resolved,
                    from: p.from.clone(),
                });
            }
            Err(e) => warnings.push(format!(
                "{} ({}) is not granted: {e}",
                resolved.display(),
                p.from
            )),
        }
    }
    Ok((started, warnings))
}

/// The `grants` member of `run_start`: each grant's real path and origin.
pub fn entry(started: &[Started]) -> serde_json::Value {
    serde_json::json!(
        started
            .iter()
            .map(|g| serde_json::json!({"path": g.path, "from": g.from}))
            .collect::<Vec<_>>()
    )
}

/// The banner's line for the start grants, one group per origin (a
/// preset's places together); `None` when there are none.
pub fn banner(started: &[Started], home: &Path) -> Option<String> {
    if started.is_empty() {
        return None;
    }
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for g in started {
        let path = grants::tilde(&g.path, home);
        match groups.last_mut() {
            Some((from, paths)) if *from == g.from => paths.push(path),
            _ => groups.push((g.from.clone(), vec![path])),
        }
    }
    Some(format!(
        "nd7 run: commands may also write {}",
        groups
            .iter()
            .map(|(from, paths)| format!("{} ({from})", paths.join(", ")))
            .collect::<Vec<_>>()
            .join("; ")
    ))
}
