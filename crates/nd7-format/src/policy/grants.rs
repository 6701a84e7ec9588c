//! Grants a user gives once: the presets for the common toolchains' caches,
//! and `~/.nd7/grants`, which names what every session (or one project's)
//! may write beyond the floor. Pure: the file's text comes in, paths go out.
//!
//! The file lives under `~/.nd7`, which nothing inside a session can read or
//! write (as `~/.nd7/secrets`): an agent cannot widen its next session.
//! `nd7 run` reads it once, at start, and records what it granted.
//!
//! # The file
//!
//! ```text
//! # every project
//! preset cargo
//! ~/data
//!
//! [~/src/web]        # only when the project is ~/src/web or a directory under it
//! preset npm
//! /srv/build-cache
//! ```
//!
//! A line is `preset NAME`, `net RULE` (a host the agent may reach:
//! `policy::net`), or a path starting with `~/` or `/` (a directory,
//! or a single file). `[PATH]` starts the lines for one project; lines before
//! any section are for every project. `#` starts a comment.

use std::path::{Path, PathBuf};

use super::secrets::expand;

/// Where the file lives, under the home directory.
pub const FILE: &str = ".nd7/grants";

/// A named set of places one toolchain writes to keep its downloads, and
/// what a writable copy of them risks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preset {
    pub name: &'static str,
    /// The tools that use it.
    pub tools: &'static str,
    /// Words in a command that name the tool (`cargo`, `--user`), to tell
    /// which preset a refusal of a shared parent (`~/.cache`) is about.
    pub words: &'static [&'static str],
    /// Home-relative directories.
    pub dirs: &'static [&'static str],
    /// Home-relative single files (the tool writes them in a directory that
    /// is not granted whole).
    pub files: &'static [&'static str],
    /// What the tool checks when it reads the cache back, and so what an
    /// agent that wrote it could make a later build outside the floor run.
    pub risk: &'static str,
}

/// The presets. None is on by default; none grants a directory of programs
/// on PATH (`~/.cargo/bin`, `~/.local/bin`, `~/.npm-global/bin`).
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "npm",
        words: &["npm", "npx"],
        tools: "npm",
        dirs: &[".npm/_cacache", ".npm/_logs"],
        files: &[],
        risk: "npm checks each tarball against the integrity hash in package-lock.json; a package installed without a lock file can come from a poisoned cache entry. ~/.npm/_npx, the packages npx runs, is left out",
    },
    Preset {
        name: "pnpm",
        words: &["pnpm"],
        tools: "pnpm",
        dirs: &[".local/share/pnpm/store", ".cache/pnpm"],
        files: &[],
        risk: "pnpm checks the store's files against their integrity hashes when it links them (verify-store-integrity, on by default) and packages against pnpm-lock.yaml",
    },
    Preset {
        name: "yarn",
        words: &["yarn"],
        tools: "yarn (1 and berry)",
        dirs: &[".cache/yarn", ".yarn/berry/cache"],
        files: &[],
        risk: "yarn checks archives against the checksums in yarn.lock; without a lock file a poisoned cache entry is used",
    },
    Preset {
        name: "cargo",
        words: &["cargo"],
        tools: "cargo",
        dirs: &[".cargo/registry", ".cargo/git"],
        files: &[
            ".cargo/.package-cache",
            ".cargo/.package-cache-mutate",
            ".cargo/.global-cache",
        ],
        risk: "cargo checks each downloaded .crate against the checksum in the index and Cargo.lock, but uses the unpacked sources (registry/src, git/checkouts) as they stand: a changed build.rs there runs in later builds outside the floor. ~/.cargo/bin is left out",
    },
    Preset {
        name: "pip",
        words: &["pip", "pip3"],
        tools: "pip",
        dirs: &[".cache/pip"],
        files: &[],
        risk: "pip checks hashes only with --require-hashes; its wheel cache is keyed by where a package came from, not by its content, so a later pip outside the floor installs a poisoned wheel",
    },
    Preset {
        name: "uv",
        words: &["uv"],
        tools: "uv",
        dirs: &[".cache/uv"],
        files: &[],
        risk: "uv checks hashes from uv.lock when it installs from one; otherwise the cache's unpacked wheels are used as they stand",
    },
    Preset {
        name: "python-user",
        words: &["--user"],
        tools: "pip install --user",
        dirs: &[".local/lib"],
        files: &[],
        risk: "this is your account's Python, not a cache: every later Python outside the floor imports what is installed here, and a .pth file here runs at every Python start. ~/.local/bin is left out, so a package that installs commands fails",
    },
    Preset {
        name: "go",
        words: &["go"],
        tools: "go",
        dirs: &["go/pkg/mod", ".cache/go-build"],
        files: &[],
        risk: "go checks downloaded modules against go.sum and the checksum database, but not the unpacked module cache on each build (go mod verify does), and it trusts the build cache (~/.cache/go-build) as it stands: a poisoned entry is linked into later builds",
    },
    Preset {
        name: "maven",
        words: &["mvn", "mvnw"],
        tools: "mvn",
        dirs: &[".m2/repository"],
        files: &[],
        risk: "Maven checks checksums when it downloads (by default only warning) and never when it reads the local repository back",
    },
    Preset {
        name: "gradle",
        words: &["gradle", "gradlew"],
        tools: "gradle",
        dirs: &[".gradle/caches"],
        files: &[],
        risk: "Gradle checks dependencies only with dependency verification set up (gradle/verification-metadata.xml); ~/.gradle/wrapper, the Gradle it runs, is left out",
    },
];

/// The preset called `name`.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The presets' names, for messages.
pub fn preset_names() -> String {
    PRESETS
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Preset {
    /// Its paths under `home`, each with whether it is a directory.
    pub fn paths(&self, home: &Path) -> Vec<(PathBuf, bool)> {
        let dirs = self.dirs.iter().map(|d| (home.join(d), true));
        let files = self.files.iter().map(|f| (home.join(f), false));
        dirs.chain(files).collect()
    }

    /// The preset whose paths hold `path` (under `home`), if one does.
    pub fn covering(path: &Path, home: &Path) -> Option<(&'static Preset, PathBuf)> {
        PRESETS.iter().find_map(|p| {
            p.paths(home)
                .into_iter()
                .find(|(at, dir)| {
                    if *dir {
                        path.starts_with(at)
                    } else {
                        path == at
                    }
                })
                .map(|(at, _)| (p, at))
        })
    }

    /// The preset a refusal of `path` is about: the one holding it, or, when
    /// `path` is a parent of presets' places that did not exist yet
    /// (`~/.cargo`, `~/.cache`), the one among them that `command` names
    /// (its words), or the only one.
    pub fn for_refusal(
        path: &Path,
        home: &Path,
        command: Option<&str>,
    ) -> Option<(&'static Preset, PathBuf)> {
        if let Some(found) = Preset::covering(path, home) {
            return Some(found);
        }
        let below: Vec<(&'static Preset, PathBuf)> = PRESETS
            .iter()
            .filter_map(|p| {
                let at = p
                    .paths(home)
                    .into_iter()
                    .find(|(at, _)| at.starts_with(path))?;
                Some((p, at.0))
            })
            .collect();
        // The command names the tool, or one of the preset's places.
        let named = |p: &Preset| {
            command.is_some_and(|c| {
                c.split(|ch: char| ch.is_whitespace() || ";&|()".contains(ch))
                    .map(|w| w.rsplit('/').next().unwrap_or(w))
                    .any(|w| p.words.contains(&w))
                    || p.dirs.iter().chain(p.files).any(|rel| c.contains(rel))
            })
        };
        let mut named_ones = below.iter().filter(|(p, _)| named(p));
        match (named_ones.next(), named_ones.next(), below.as_slice()) {
            (Some(one), None, _) => Some(one.clone()),
            (None, _, [only]) => Some(only.clone()),
            _ => None,
        }
    }
}

/// One thing to grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Preset(&'static Preset),
    Path(PathBuf),
    /// `net RULE`: a host the agent may reach (`policy::net`), not a path.
    Net(super::net::Rule),
}

/// A line of the file that grants something.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub number: usize,
    /// The project section it is in, as written (expanded); `None` for every project.
    pub project: Option<PathBuf>,
    pub entry: Entry,
}

/// What is wrong with a line of the file.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {text:?}: {why}")]
pub struct GrantsError {
    pub line: usize,
    pub text: String,
    pub why: String,
}

/// `text`, the file, read: every bad line is an error naming it.
pub fn parse(text: &str, home: &Path) -> Result<Vec<Line>, GrantsError> {
    let mut out = Vec::new();
    let mut project = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let err = |why: String| GrantsError {
            line: i + 1,
            text: raw.trim().to_string(),
            why,
        };
        if let Some(section) = line.strip_prefix('[') {
            let section = section
                .strip_suffix(']')
                .ok_or_else(|| err("a project section is [PATH]".into()))?;
            project = Some(expand(section.trim(), home).map_err(|w| err(w.into()))?);
            continue;
        }
        let entry = if let Some(rule) = line.strip_prefix("net ") {
            Entry::Net(super::net::parse_rule(rule).map_err(|e| err(e.why.into()))?)
        } else if let Some(name) = line.strip_prefix("preset ") {
            let name = name.trim();
            Entry::Preset(preset(name).ok_or_else(|| {
                err(format!(
                    "no preset called {name:?}; the presets are {}",
                    preset_names()
                ))
            })?)
        } else {
            let path = expand(line, home).map_err(|w| err(w.into()))?;
            if home.starts_with(&path) {
                return Err(err(
                    "would grant the home directory itself (or one above it); name the directories commands need".into(),
                ));
            }
            Entry::Path(path)
        };
        out.push(Line {
            number: i + 1,
            project: project.clone(),
            entry,
        });
    }
    Ok(out)
}

/// A path to grant at start, and where the grant came from, for the banner,
/// `nd7 doctor` and the run's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// Absolute, as written (links not yet resolved).
    pub path: PathBuf,
    /// Whether it is a directory (else a single file).
    pub dir: bool,
    /// `~/.nd7/grants:3`, `--allow`, with `(preset cargo)` when a preset's.
    pub from: String,
}

/// What the file's `lines` grant a session whose project is `project`
/// (resolved): the lines for every project, and those of each section that
/// is the project or holds it. `resolve` gives a section's real path, or
/// `None` when it has none nd7 may take (a link an agent could have placed
/// on the way: ADR-0068); such a section is no project's.
pub fn plan(
    lines: &[Line],
    project: &Path,
    home: &Path,
    resolve: &dyn Fn(&Path) -> Option<PathBuf>,
) -> Vec<Planned> {
    let mut out = Vec::new();
    for line in for_project(lines, project, resolve) {
        let from = format!("~/{FILE}:{}", line.number);
        out.extend(entry_paths(&line.entry, home, &from));
    }
    out
}

/// The paths an entry grants, each marked with `from`.
pub fn entry_paths(entry: &Entry, home: &Path, from: &str) -> Vec<Planned> {
    match entry {
        Entry::Preset(p) => p
            .paths(home)
            .into_iter()
            .map(|(path, dir)| Planned {
                path,
                dir,
                from: if from.starts_with("--") {
                    format!("{from} {}", p.name)
                } else {
                    format!("{from}, preset {}", p.name)
                },
            })
            .collect(),
        Entry::Path(path) => vec![Planned {
            path: path.clone(),
            dir: true,
            from: from.to_string(),
        }],
        Entry::Net(_) => Vec::new(),
    }
}

/// The `net` rules the file's `lines` grant a session whose project is
/// `project`, as [`plan`] picks lines: each `net` line, and the hosts of
/// each preset a line names (`policy::net::NET_PRESETS`).
/// The lines that apply in `project`: the global ones, and those of the
/// sections whose directory (as `resolve` finds it) holds the project.
fn for_project<'a>(
    lines: &'a [Line],
    project: &'a Path,
    resolve: &'a dyn Fn(&Path) -> Option<PathBuf>,
) -> impl Iterator<Item = &'a Line> + 'a {
    lines.iter().filter(move |line| {
        line.project
            .as_ref()
            .is_none_or(|section| resolve(section).is_some_and(|real| project.starts_with(real)))
    })
}

pub fn net_rules(
    lines: &[Line],
    project: &Path,
    resolve: &dyn Fn(&Path) -> Option<PathBuf>,
) -> Vec<super::net::Granted> {
    let mut out = Vec::new();
    for line in for_project(lines, project, resolve) {
        let from = format!("~/{FILE}:{}", line.number);
        match &line.entry {
            Entry::Net(rule) => out.push(super::net::Granted {
                rule: rule.clone(),
                from,
            }),
            Entry::Preset(p) => {
                if let Some(np) = super::net::net_preset(p.name) {
                    out.extend(super::net::preset_rules(np).into_iter().map(|mut g| {
                        g.from = format!("{from}, {}", g.from);
                        g
                    }));
                }
            }
            Entry::Path(_) => {}
        }
    }
    out
}

/// `~` and `~/…` typed or quoted (`nd7 allow '~/.cache/pip'`) as a path
/// under `home`; anything else as it stands.
pub fn expand_tilde(typed: &Path, home: &Path) -> PathBuf {
    let text = typed.to_string_lossy();
    if text == "~" {
        home.to_path_buf()
    } else if let Some(rest) = text.strip_prefix("~/") {
        home.join(rest)
    } else {
        typed.to_path_buf()
    }
}

/// `path` with the home written `~`, for messages a person reads.
pub fn tilde(path: &Path, home: &Path) -> String {
    match path.strip_prefix(home) {
        Ok(rest) if rest.as_os_str().is_empty() => "~".into(),
        Ok(rest) => format!("~/{}", rest.display()),
        Err(_) => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> PathBuf {
        PathBuf::from("/home/u")
    }

    #[test]
    fn no_preset_grants_programs_on_path_or_a_credential_store() {
        let home = home();
        let never = [
            ".cargo/bin",
            ".local/bin",
            ".npm-global/bin",
            ".npm/_npx",
            ".gradle/wrapper",
            "go/bin",
        ];
        let stores = super::super::secrets::defaults(&home);
        for p in PRESETS {
            for (path, _) in p.paths(&home) {
                for n in never {
                    assert!(!home.join(n).starts_with(&path), "{} grants {n}", p.name);
                }
                for s in &stores {
                    assert!(
                        !path.starts_with(s) && !s.starts_with(&path),
                        "{} touches {}",
                        p.name,
                        s.display()
                    );
                }
                assert!(path.starts_with(&home) && path != home);
            }
            assert!(!p.risk.is_empty());
        }
    }

    #[test]
    fn the_file_reads_per_project_and_says_what_is_wrong() {
        let home = home();
        let text = "# mine\npreset cargo\n~/data   # outputs\n\n[~/src/web]\npreset npm\n/srv/x\n[/other]\n~/only-other\n";
        let lines = parse(text, &home).expect("parses");
        assert_eq!(lines.len(), 5);
        let same = |p: &Path| Some(p.to_path_buf());
        let web = plan(&lines, Path::new("/home/u/src/web/sub"), &home, &same);
        let paths: Vec<String> = web.iter().map(|p| p.path.display().to_string()).collect();
        assert_eq!(
            paths,
            [
                "/home/u/.cargo/registry",
                "/home/u/.cargo/git",
                "/home/u/.cargo/.package-cache",
                "/home/u/.cargo/.package-cache-mutate",
                "/home/u/.cargo/.global-cache",
                "/home/u/data",
                "/home/u/.npm/_cacache",
                "/home/u/.npm/_logs",
                "/srv/x"
            ]
        );
        assert_eq!(web[0].from, "~/.nd7/grants:2, preset cargo");
        assert_eq!(web[5].from, "~/.nd7/grants:3");
        assert!(!web[2].dir && web[0].dir);
        let elsewhere = plan(&lines, Path::new("/home/u/src/webby"), &home, &same);
        assert_eq!(elsewhere.len(), 6, "{elsewhere:?}");
        // A section with no real path nd7 may take is no project's, not
        // even one it names as written.
        let none = |_: &Path| None;
        let web = plan(&lines, Path::new("/home/u/src/web"), &home, &none);
        assert_eq!(web.len(), 6, "{web:?}");

        for (bad, why) in [
            ("preset nope", "no preset called \"nope\""),
            ("data", "a path must start with ~/ or /"),
            ("~/a/../b", ". or .."),
            ("[~/src", "a project section is [PATH]"),
            ("~/", "home directory itself"),
            ("/home", "home directory itself"),
        ] {
            let e = parse(&format!("preset pip\n{bad}\n"), &home).expect_err(bad);
            assert_eq!(e.line, 2, "{bad}");
            assert!(e.why.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn tildes_typed_or_quoted_mean_the_home() {
        let home = home();
        assert_eq!(
            expand_tilde(Path::new("~/.cache/pip"), &home),
            home.join(".cache/pip")
        );
        assert_eq!(expand_tilde(Path::new("~"), &home), home);
        assert_eq!(expand_tilde(Path::new("~x/y"), &home), Path::new("~x/y"));
        assert_eq!(
            expand_tilde(Path::new("/a/~/b"), &home),
            Path::new("/a/~/b")
        );
        assert_eq!(tilde(&home.join(".npm"), &home), "~/.npm");
        assert_eq!(tilde(&home, &home), "~");
        assert_eq!(tilde(Path::new("/srv"), &home), "/srv");
    }

    #[test]
    fn a_path_under_a_preset_names_it() {
        let home = home();
        let (p, at) =
            Preset::covering(&home.join(".cargo/registry/cache/x.crate"), &home).expect("cargo");
        assert_eq!((p.name, at), ("cargo", home.join(".cargo/registry")));
        let (p, _) = Preset::covering(&home.join(".cargo/.package-cache"), &home).expect("file");
        assert_eq!(p.name, "cargo");
        assert_eq!(Preset::covering(&home.join(".cargo/bin/x"), &home), None);
        assert_eq!(Preset::covering(&home.join(".cache/other"), &home), None);
        // A parent that did not exist yet: the preset the command names.
        let name = |path: &str, command: Option<&str>| {
            Preset::for_refusal(&home.join(path), &home, command).map(|(p, _)| p.name)
        };
        assert_eq!(name(".cargo", Some("cargo add cfg-if")), Some("cargo"));
        assert_eq!(name(".cargo", None), Some("cargo"));
        assert_eq!(
            name(".cache", Some("cd x && /usr/bin/pip3 install six")),
            Some("pip")
        );
        assert_eq!(name(".cache", Some("make")), None);
        assert_eq!(
            name(".local", Some("python3 -m pip install --user six")),
            Some("python-user")
        );
        assert_eq!(name(".npm", Some("npm install is-number")), Some("npm"));
        assert_eq!(name(".cargo/bin", Some("cargo install x")), None);
        assert_eq!(
            name(".cache", Some("mkdir -p ~/.cache/go-build/00")),
            Some("go")
        );
    }
}
