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
    #[error("{path} ({from}): {source}")]
    Grant {
        path: PathBuf,
        from: String,
        source: crate::policy::GrantError,
    },
}

/// What a session starts with beyond the floor: `~/.nd7/grants` (nothing
/// inside a session can write it), then `--preset` and `--allow`.
pub fn planned(
    home: &Path,
    project: &Path,
    options: &crate::run::Options,
) -> Result<Vec<grants::Planned>, StartGrantError> {
    let file = home.join(grants::FILE);
    let mut planned = match std::fs::read_to_string(&file) {
        Ok(text) => {
            let lines = grants::parse(&text, home).map_err(|source| StartGrantError::File {
                path: file.clone(),
                source,
            })?;
            let resolve = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
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
    for name in &options.presets {
        let preset = grants::preset(name).ok_or_else(|| StartGrantError::NoPreset(name.clone()))?;
        planned.extend(grants::entry_paths(
            &grants::Entry::Preset(preset),
            home,
            "--preset",
        ));
    }
    for dir in &options.allow {
        let path = grants::expand_tilde(dir, home);
        let path = std::path::absolute(&path).unwrap_or(path);
        planned.extend(grants::entry_paths(
            &grants::Entry::Path(path),
            home,
            "--allow",
        ));
    }
    Ok(planned)
}

/// A grant the session started with: its real path and where it came from.
#[derive(Clone, Debug)]
pub struct Started {
    pub path: PathBuf,
    pub from: String,
}

/// Grants what `planned` names, as `nd7 allow` would: a path that does not
/// exist yet is created (once it is known that it may be granted), each is
/// resolved and pinned without following links (ADR-0028). One nd7 would
/// never grant (under `~/.nd7`, in a credential store) stops the run; one
/// reached through a link is left out, and said so.
pub fn grant_at_start(
    policy: &mut Policy,
    planned: &[grants::Planned],
) -> Result<(Vec<Started>, Vec<String>), StartGrantError> {
    let mut started = Vec::new();
    let mut warnings = Vec::new();
    for p in planned {
        let fail = |source| StartGrantError::Grant {
            path: p.path.clone(),
            from: p.from.clone(),
            source,
        };
        if std::fs::symlink_metadata(&p.path).is_err() {
            let would_be = run_dir::with_real_places(std::slice::from_ref(&p.path))
                .pop()
                .unwrap_or_else(|| p.path.clone());
            policy.check_grant(&would_be).map_err(fail)?;
            if let Err(e) = run_dir::create(&p.path, p.dir) {
                warnings.push(format!(
                    "{} ({}) cannot be created ({e}), so it is not granted",
                    p.path.display(),
                    p.from
                ));
                continue;
            }
        }
        let resolved = match std::fs::canonicalize(&p.path) {
            Ok(r) => r,
            Err(e) => {
                warnings.push(format!(
                    "{} ({}) cannot be resolved ({e}), so it is not granted",
                    p.path.display(),
                    p.from
                ));
                continue;
            }
        };
        policy.check_grant(&resolved).map_err(fail)?;
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
