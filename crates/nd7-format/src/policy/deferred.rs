//! Deferred escape: files an agent could write inside the floor that run
//! later, outside it, without anyone choosing to run them — under the
//! user's own plain `git`, login shell, editor or next Claude Code session.
//! Pure: the file system is consulted through [`Tree`], which the caller
//! implements.
//!
//! # What is on the list, and why
//!
//! In the project (and, at any depth, in its subdirectories on macOS):
//!
//! - `.git` itself, and in every git directory (the project's, its
//!   submodules' under `modules/`, its worktrees' under `worktrees/`):
//!   `config` (fsmonitor, hooksPath, aliases, pagers, filter and diff
//!   drivers, `sshCommand`, credential helpers: all run by plain `git`),
//!   `config.worktree`, `hooks/`, `info/attributes` (names filter drivers),
//!   `commondir` (points git at another directory's config and hooks) and
//!   `branches/` and `remotes/` (a remote's URL, a local path's hooks).
//!   Both are untracked, so nothing shows them in `git diff`.
//! - `.gitattributes` and `.gitmodules`: which drivers run on which files,
//!   and where submodules come from.
//! - `.envrc` (direnv), mise's configurations (`mise.toml`, `.mise.toml`,
//!   `.mise/`, which mise trusts by path, not contents),
//!   `.vscode/` and `.idea/` (tasks and run configurations editors start
//!   on their own).
//! - `.mcp.json`, `.claude/settings.json`, `.claude/settings.local.json`,
//!   `.claude/commands`, `.claude/agents`, `.claude/skills`,
//!   `.claude/hooks`: servers, hooks and commands the next Claude Code
//!   session starts, which is not necessarily under nd7.
//! - The directory `core.hooksPath` names, when it lies in the project
//!   (husky and friends).
//! - The files the above make their tools read with no new trust, where
//!   the agent can write them (ADR-0093): what git includes
//!   (`include.path`, `includeIf.*.path`, followed from every git
//!   configuration, the user's and the system's too), what an `.envrc`
//!   sources and the scripts mise's `[env]` sources; the environment files
//!   `dotenv` and mise's `_.file` load are reported.
//!
//! The same, in each directory granted by path ([`grant_roots`]): another
//! repository the agent's commands may write is as dangerous as the
//! project. Not the places presets name: tools' caches, where the list's
//! names occur as data.
//!
//! In the home directory: Claude Code's user settings (which hold nd7's own
//! record hooks), commands, agents, skills, hook scripts, installed plugins
//! and local install, and the files its settings run ([`settings_programs`]);
//! Codex's settings, hooks, environment, rules, prompts, plugins and
//! standalone install; and what a grant of the home directory would
//! otherwise hand over: the shell, login, git, cargo, direnv, mise,
//! terminal and editor start-up files and the directories of programs
//! early on PATH ([`HOME_HELD`] says why each).
//!
//! Not on the list: the start-up files of the project's own environments
//! (a virtual environment's `*.pth`, `sitecustomize.py`): the interpreter
//! and every module beside them are as writable (ADR-0093). Nor the
//! project's build files (`package.json`, `Makefile`,
//! `build.rs`, `.npmrc`, `.cargo/config.toml`). They run only when the user
//! runs the project's own build, which the agent may change in any case:
//! the protection there is reading the diff before running it, and they
//! show in `git status`. Hook managers' configurations
//! ([`PROJECT_REPORTED`]) are ordinary tracked files an agent is often asked
//! to edit; changes to them are reported, not refused.
//!
//! # How the list is enforced
//!
//! macOS: Seatbelt denies beneath allows, so each profile denies writing
//! these names by regex, existing or not ([`super::seatbelt`]). Linux:
//! Landlock cannot deny beneath an allowed directory, so [`plan`] turns the
//! list into read-only bind mounts of what exists when the run starts
//! (held, [`Guard::Hold`]) and mounts of their parents onto themselves so
//! that nothing can rename them away (fixed in place, [`Guard::Fix`]);
//! everything on the list, existing or not, is also watched, and a change
//! is reported when the run ends. A grant made during the run is planned then
//! ([`plan_grant`]) and only watched: the namespaces cannot change by then.

use std::path::{Path, PathBuf};

use super::Policy;

/// Project-relative paths that run later. Each is refused (Seatbelt, and
/// Linux when it exists at the start) and watched.
pub const PROJECT_HELD: &[&str] = &[
    ".gitattributes",
    ".gitmodules",
    ".envrc",
    // mise, run on `cd` like direnv but trusting a config by its path, not
    // its contents: an edited trusted file runs its `[env]` and `[hooks]`.
    // (Its `.config/mise*` and `mise/config.toml` places are left out: on
    // macOS every `.config` or `mise` directory in the project would then
    // be refused to be made.)
    "mise.toml",
    ".mise.toml",
    "mise.local.toml",
    ".mise.local.toml",
    ".mise",
    ".mcp.json",
    ".vscode",
    ".idea",
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".claude/commands",
    ".claude/agents",
    ".claude/skills",
    ".claude/hooks",
    // Instructions every session in the project loads (ADR-0093).
    ".claude/output-styles",
    // Codex's project layer, read once the project is trusted: settings,
    // hooks, rules.
    ".codex/config.toml",
    ".codex/hooks.json",
    ".codex/rules",
];

/// Project-relative paths whose changes are reported but not refused: hook
/// managers' configurations, tracked files that decide what runs at the
/// user's next commit.
pub const PROJECT_REPORTED: &[&str] = &[
    ".pre-commit-config.yaml",
    ".lefthook.yml",
    "lefthook.yml",
    ".husky",
];

/// Paths inside a git directory that make plain `git` run something.
pub const GIT_DIR_HELD: &[&str] = &[
    "config",
    "config.worktree",
    "commondir",
    "hooks",
    "info/attributes",
    // A remote's URL where the configuration has none by that name (git's
    // old `branches/<name>` and `remotes/<name>` files): a local path
    // there makes the user's plain `git push` run that repository's hooks
    // (ADR-0138).
    "branches",
    "remotes",
];

/// Home-relative paths that run later.
pub const HOME_HELD: &[&str] = &[
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".claude/commands",
    ".claude/agents",
    ".claude/skills",
    ".claude/hooks",
    ".claude/plugins/cache",
    ".claude/plugins/marketplaces",
    ".claude/plugins/installed_plugins.json",
    ".claude/plugins/known_marketplaces.json",
    // The newer name of the installed plugins' list, which Claude Code
    // 2.1.332 reads beside the older one.
    ".claude/plugins/installed_plugins_v2.json",
    // Instructions every session loads, like commands and agents; and the
    // key bindings, which can make the key that answers "no" to a
    // permission prompt answer "yes" (ADR-0093).
    ".claude/output-styles",
    ".claude/keybindings.json",
    // Codex's home: its settings (hooks, `notify`, MCP servers, the trust
    // of every hook, nd7 run's included), its hooks, the environment it
    // loads at every start (`.env`: `LD_PRELOAD`, `PATH`), the rules that
    // let commands skip its approval, its prompts and plugins. (Not its
    // skills: Codex writes its own system skills there at start.)
    ".codex/config.toml",
    ".codex/hooks.json",
    ".codex/.env",
    ".codex/rules",
    ".codex/prompts",
    ".codex/plugins",
    // Where Codex's standalone installer keeps Codex itself (`packages/
    // standalone/current/bin/codex`, which `~/.local/bin/codex` leads to)
    // and the app-server daemon it starts: written, the user's next plain
    // `codex` runs the agent's program outside any floor (ADR-0062).
    ".codex/packages",
    // The marketplaces added from git: a later Codex reinstalls an
    // installed plugin from here into `plugins/` when the version named
    // here changes, then starts its MCP servers (ADR-0062).
    ".codex/.tmp/marketplaces",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".gitconfig",
    ".config/git",
    ".ripgreprc",
    // Claude Code itself where its local installer keeps it
    // (`~/.claude/local/claude`, which the user's `claude` alias runs),
    // inside the `~/.claude` the floor lets the agent write: as with
    // `.codex/packages`, the user's next `claude` would run the agent's
    // program.
    ".claude/local",
    // Directories of programs that come before the system's on a usual
    // PATH: a `git` or `claude` put there runs at the user's next use.
    ".local/bin",
    "bin",
    ".cargo/bin",
    // Sourced by the shell start-up files rustup writes.
    ".cargo/env",
    // Cargo's user configuration: `build.rustc-wrapper`, `target.*.runner`
    // and aliases run in every later build. (The cargo preset grants
    // `registry` and `git` beside it, never these.)
    ".cargo/config.toml",
    ".cargo/config",
    // What the user's login starts, and with which environment.
    ".config/systemd/user",
    ".config/autostart",
    ".config/environment.d",
    ".xprofile",
    ".xinitrc",
    ".xsession",
    ".xsessionrc",
    ".pam_environment",
    // direnv's allowed `.envrc` files (a hash of each path), its own rc and
    // configuration (`whitelist` allows whole trees).
    ".local/share/direnv/allow",
    ".config/direnv",
    ".direnvrc",
    // mise's global configuration (its `[env]` and `[hooks]` run on every
    // `cd`) and the configurations it trusts.
    ".config/mise",
    ".local/state/mise/trusted-configs",
    // Shells, terminals and editors, at their next start. (Not editors'
    // plugin trees, `.vim/pack` or `.emacs.d/elpa`: thousands of files.)
    ".bash_aliases",
    ".inputrc",
    ".config/fish",
    ".tmux.conf",
    ".config/tmux",
    ".screenrc",
    ".vimrc",
    ".gvimrc",
    ".exrc",
    ".vim/vimrc",
    ".vim/plugin",
    ".config/nvim",
    ".emacs",
    ".emacs.d/init.el",
    ".emacs.d/early-init.el",
    ".config/emacs/init.el",
    ".config/emacs/early-init.el",
];

/// Claude Code's settings files whose programs (hooks, `statusLine`,
/// `apiKeyHelper` and the other helpers) are read for the files they name
/// ([`named_programs`]): home-relative and project-relative.
pub const CLAUDE_SETTINGS: &[&str] = &[".claude/settings.json", ".claude/settings.local.json"];

/// Claude Code's own state file, which it rewrites all the time and so can
/// be neither refused nor compared whole; only the parts of it that start
/// programs are watched ([`claude_state_risky`]).
pub const CLAUDE_STATE_FILE: &str = ".claude/claude.json";

/// What a path is, as `lstat` sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Link,
    /// A FIFO, socket or device: nothing on the list is one, and opening
    /// one can block or never end, so it is never read, only reported.
    Special,
}

/// The most the planner reads of one configuration (`.gitmodules`, a git
/// config, a `.git` file, Claude Code's settings).
pub const MAX_CONFIG: u64 = 256 * 1024;

/// The most the planner and the watch read of Claude Code's state file,
/// which grows with every project it remembers.
pub const MAX_STATE: u64 = 64 * 1024 * 1024;

/// The file system, as the planner needs it.
pub trait Tree {
    /// What `path` is, without following a final symbolic link.
    fn kind(&self, path: &Path) -> Option<Kind>;
    /// A regular file's text, following links, if it is at most `limit`
    /// bytes; `None` for anything else (missing, a FIFO or device, larger).
    fn read(&self, path: &Path, limit: u64) -> Option<String>;
    /// A directory's entries, as full paths.
    fn list(&self, path: &Path) -> Vec<PathBuf>;
    /// Where a symbolic link leads, resolved to a real path.
    fn resolve(&self, path: &Path) -> Option<PathBuf>;
}

/// What a mount does to a path on the list (Linux).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Guard {
    /// Fixed in place: stays writable, but is a mount point, so it cannot
    /// be renamed or removed and what lies beneath it cannot be swapped for
    /// another. (Not a *pin*, which is an identity checked later.)
    Fix,
    /// Held: read-only, and a mount point.
    Hold,
}

/// One path held by a mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guarded {
    pub path: PathBuf,
    pub guard: Guard,
}

/// What a run holds and watches on Linux.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The mounts, parents before what lies beneath them (a mount made
    /// later on a parent would hide the ones beneath).
    pub guarded: Vec<Guarded>,
    /// Every path on the list, existing or not, whose changes are reported.
    pub watched: Vec<PathBuf>,
    /// Claude Code's state files, of which only the risky parts are watched.
    pub claude_state: Vec<PathBuf>,
    /// The git directories found (the project's, its submodules' and
    /// worktrees'), below which new ones are searched for at the end.
    pub git_dirs: Vec<PathBuf>,
    /// The directories searched at the end for repositories and listed
    /// names that appeared: the project, then each grant covered
    /// ([`grant_roots`]).
    pub roots: Vec<PathBuf>,
}

impl Plan {
    /// Whether `path` is held read-only.
    pub fn held(&self, path: &Path) -> bool {
        self.guarded
            .iter()
            .any(|g| g.guard == Guard::Hold && path.starts_with(&g.path))
    }
}

/// How many symbolic links the planner follows from one name.
const MAX_LINKS: usize = 8;

/// How many git directories (submodules, worktrees) one project may add.
const MAX_GIT_DIRS: usize = 256;

struct Planner<'a> {
    tree: Cached<'a>,
    plan: Plan,
    git_dirs: Vec<PathBuf>,
    /// Where the agent can write (the floor's and the commands' write
    /// roots): a file another names (an include, a sourced file) is held
    /// only there.
    writable: Vec<PathBuf>,
    home: PathBuf,
    /// How many named files have been followed, against [`MAX_NAMED`].
    named: usize,
}

impl<'a> Planner<'a> {
    /// A planner with nothing planned yet, writing where `policy`'s
    /// commands write.
    fn new(policy: &Policy, tree: &'a dyn Tree) -> Planner<'a> {
        Planner {
            tree: Cached {
                tree,
                kinds: Default::default(),
            },
            plan: Plan::default(),
            git_dirs: Vec::new(),
            writable: policy.command_writes(),
            home: policy.roots.home.clone(),
            named: 0,
        }
    }
}

/// How deep git follows includes (its own bound).
const MAX_INCLUDE_DEPTH: usize = 10;

/// How many files named by others (includes, sourced files) one plan
/// follows at most.
const MAX_NAMED: usize = 1024;

/// A [`Tree`] whose `kind` answers are remembered: the lists share
/// parents (`.claude` above eight of them), each looked at once.
/// Keyed by the path's bytes, which hash in one pass where a `Path` hashes
/// component by component; a path spelt two ways is only asked twice.
struct Cached<'a> {
    tree: &'a dyn Tree,
    kinds: std::cell::RefCell<std::collections::HashMap<std::ffi::OsString, Option<Kind>>>,
}

impl Tree for Cached<'_> {
    fn kind(&self, path: &Path) -> Option<Kind> {
        if let Some(k) = self.kinds.borrow().get(path.as_os_str()) {
            return *k;
        }
        let k = self.tree.kind(path);
        self.kinds
            .borrow_mut()
            .insert(path.as_os_str().to_os_string(), k);
        k
    }
    fn read(&self, path: &Path, limit: u64) -> Option<String> {
        self.tree.read(path, limit)
    }
    fn list(&self, path: &Path) -> Vec<PathBuf> {
        self.tree.list(path)
    }
    fn resolve(&self, path: &Path) -> Option<PathBuf> {
        self.tree.resolve(path)
    }
}

/// The grants among `grants` that the list covers as it covers the
/// project: each directory granted by path (`nd7 allow DIR`, `--allow`, a
/// path line in `~/.nd7/grants`) that the project does not already hold.
/// Not the places a preset names: they are tools' caches (cargo's git
/// checkouts are repositories, unpacked packages carry `.gitattributes` and
/// `.vscode`), which no one runs git or an editor in, and what a poisoned
/// cache can do later is each preset's own, stated risk.
pub fn grant_roots(policy: &Policy, grants: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for g in grants {
        if g.starts_with(&policy.roots.project)
            || super::grants::Preset::covering(g, &policy.roots.home).is_some()
            || out.contains(g)
        {
            continue;
        }
        out.push(g.clone());
    }
    out
}

/// The places presets name under `home` (tools' caches, see
/// [`grant_roots`]), which the end-of-run search does not enter either
/// when they lie below a root: a granted home's cargo registry unpacks
/// crates with `.gitattributes` in every session.
pub fn caches(home: &Path) -> Vec<PathBuf> {
    super::grants::PRESETS
        .iter()
        .flat_map(|p| p.dirs.iter().map(|d| home.join(d)))
        .collect()
}

/// The mounts and watch list for `policy`'s project, home and the grants
/// it starts with, as `tree` stands now.
pub fn plan(policy: &Policy, tree: &dyn Tree) -> Plan {
    let mut p = Planner::new(policy, tree);
    let project = &policy.roots.project;
    let home = &policy.roots.home;
    p.root(project);
    for grant in grant_roots(policy, &policy.grants) {
        p.root(&grant);
    }
    for name in HOME_HELD {
        p.hold(home, &home.join(name), 0);
    }
    // The files Claude Code's settings run (a status line, a hook's script,
    // a helper), and those its user MCP servers start. One in the home is
    // held like the list; one in the project, an ordinary file the agent
    // may be asked to edit, is reported.
    for path in settings_programs(policy, &p.tree) {
        if path.starts_with(project) {
            p.watch(&path);
        } else {
            p.hold(home, &path, 0);
        }
    }
    // The home directory's `.claude.json` is a link to Claude Code's state
    // under `~/.claude` on Linux (ADR-0013): the link is held, the state
    // watched. Where it is the file itself, it is Claude Code's to write.
    let link = home.join(".claude.json");
    if p.tree.kind(&link) == Some(Kind::Link) {
        p.guard(&link, Guard::Hold);
        p.plan.watched.push(link.clone());
    }
    // Claude Code's state by the name it has under `~/.claude`, whatever
    // it is now (the watch reads it following a link, but only ever a
    // regular file); `~/.claude.json` too when it leads elsewhere.
    let own = home.join(CLAUDE_STATE_FILE);
    let at_home = match p.tree.kind(&link) {
        Some(Kind::Link) => p.tree.resolve(&link),
        _ => Some(link),
    };
    let own_real = p.tree.resolve(&own);
    p.plan.claude_state.push(own.clone());
    if let Some(state) = at_home.filter(|s| *s != own && Some(s) != own_real.as_ref()) {
        p.plan.claude_state.push(state);
    }
    for config in [
        home.join(".gitconfig"),
        home.join(".config/git/config"),
        PathBuf::from("/etc/gitconfig"),
    ] {
        let mut texts = Vec::new();
        p.git_config(&config, 0, &mut texts);
        if let Some(dir) = texts
            .iter()
            .rev()
            .find_map(|t| hooks_path(t))
            .and_then(|h| expand_home(&h, home))
            .filter(|d| d.is_absolute())
        {
            p.hold(home, &dir, 0);
        }
    }
    p.finish()
}

/// The files that Claude Code's settings (the user's and the project's)
/// and the user's MCP servers in its state run, as far as their commands
/// name them ([`named_programs`], [`mcp_programs`]): those in the home
/// directory or the project, and not directories (an MCP server's whole
/// project is its own).
pub fn settings_programs(policy: &Policy, tree: &dyn Tree) -> Vec<PathBuf> {
    let (home, project) = (&policy.roots.home, &policy.roots.project);
    let mut named = Vec::new();
    for settings in CLAUDE_SETTINGS {
        for base in [home, project] {
            if let Some(text) = tree.read(&base.join(settings), MAX_CONFIG) {
                named.extend(named_programs(&text, home, project));
            }
        }
    }
    if let Some(text) = tree.read(&home.join(CLAUDE_STATE_FILE), MAX_STATE) {
        named.extend(mcp_programs(&text, home, project));
    }
    named.retain(|p| {
        (p.starts_with(home) || p.starts_with(project)) && tree.kind(p) != Some(Kind::Dir)
    });
    named.sort();
    named.dedup();
    named
}

/// The files on the home list that stay held read-only whatever is
/// granted: `path` itself when it is one or lies beneath one, else those
/// beneath `path` (home-relative, as [`HOME_HELD`] names them).
pub fn held_in_home(path: &Path, home: &Path) -> (bool, Vec<&'static str>) {
    let listed = |name: &&str| home.join(name);
    if HOME_HELD.iter().any(|n| path.starts_with(listed(n))) {
        return (true, Vec::new());
    }
    let beneath = HOME_HELD
        .iter()
        .filter(|n| listed(n).starts_with(path) && listed(n) != path)
        .copied()
        .collect();
    (false, beneath)
}

/// What a grant made during the run (`nd7 allow DIR`, learned when a
/// command first runs with it) adds to the watch: its directory planned as
/// the project is. The plan's mounts are not made: the run's
/// namespaces were built before `nd7 run` put itself under Landlock,
/// which refuses mounts from then on; the watch reports instead.
pub fn plan_grant(grant: &Path, policy: &Policy, tree: &dyn Tree) -> Plan {
    let mut p = Planner::new(policy, tree);
    p.writable.push(grant.to_path_buf());
    p.root(grant);
    p.finish()
}

impl Planner<'_> {
    /// A directory the agent can write as a whole (the project, a grant):
    /// the repository it is the work tree of, the project list's names in
    /// it, and, when it lies inside a git directory (a grant of
    /// `.git/hooks`), that directory's own entries.
    fn root(&mut self, root: &Path) {
        if self.tree.kind(root) != Some(Kind::Dir) {
            return;
        }
        self.plan.roots.push(root.to_path_buf());
        self.fix(root);
        self.work_tree(root, root, 0);
        for name in PROJECT_HELD {
            self.hold(root, &root.join(name), 0);
        }
        for name in PROJECT_REPORTED {
            self.watch(&root.join(name));
        }
        self.envrc(&root.join(".envrc"), 0);
        // Each place mise reads a configuration from, held where one
        // exists (mise trusts it by path): `PROJECT_HELD` leaves out
        // the ones under `.config` and `mise/` for Seatbelt's sake only.
        for name in MISE_CONFIGS {
            self.hold(root, &root.join(name), 0);
            self.mise(root, &root.join(name));
        }
        if let Some(git) = root
            .ancestors()
            .skip(1)
            .find(|a| a.file_name() == Some(std::ffi::OsStr::new(".git")))
            .filter(|g| self.tree.kind(g) == Some(Kind::Dir))
        {
            let (git, work) = (git.to_path_buf(), git.parent().unwrap_or(git).to_path_buf());
            self.git_dir(&git, &git, &work);
        }
    }

    fn finish(self) -> Plan {
        let mut plan = self.plan;
        plan.git_dirs = self.git_dirs;
        plan.guarded.sort_by(|a, b| {
            let depth = |p: &Path| p.components().count();
            depth(&a.path)
                .cmp(&depth(&b.path))
                .then(a.path.cmp(&b.path))
        });
        plan.guarded.dedup_by(|later, earlier| {
            if later.path == earlier.path {
                earlier.guard = earlier.guard.max(later.guard);
                true
            } else {
                false
            }
        });
        // By their bytes, not component by component (`Path`'s order), which
        // costs several times as much for the hundred names: the order only
        // needs to be the same on every run, and paths spelt the same are
        // then next to each other.
        plan.watched
            .sort_unstable_by(|a, b| a.as_os_str().cmp(b.as_os_str()));
        plan.watched.dedup();
        plan
    }

    fn watch(&mut self, path: &Path) {
        self.plan.watched.push(path.to_path_buf());
    }

    fn guard(&mut self, path: &Path, guard: Guard) {
        self.plan.guarded.push(Guarded {
            path: path.to_path_buf(),
            guard,
        });
    }

    fn fix(&mut self, dir: &Path) {
        if self.tree.kind(dir) == Some(Kind::Dir) {
            self.guard(dir, Guard::Fix);
        }
    }

    /// `path` (under `root`) is watched and, when it exists, held, with
    /// every directory between `root` and it fixed in place. A symbolic link on the
    /// way is held as itself and followed to where it leads.
    fn hold(&mut self, root: &Path, path: &Path, links: usize) {
        self.watch(path);
        let Ok(rel) = path.strip_prefix(root) else {
            // Outside the root (a hooks directory named elsewhere): held
            // on its own.
            if self.tree.kind(path).is_some_and(|k| k != Kind::Special) {
                self.guard(path, Guard::Hold);
            }
            return;
        };
        let mut at = root.to_path_buf();
        let parts: Vec<_> = rel.components().collect();
        for (i, part) in parts.iter().enumerate() {
            at.push(part);
            let last = i + 1 == parts.len();
            match self.tree.kind(&at) {
                None => return,
                Some(Kind::Link) => {
                    self.guard(&at, Guard::Hold);
                    if links < MAX_LINKS
                        && let Some(target) = self.tree.resolve(&at)
                    {
                        let rest: PathBuf = parts[i + 1..].iter().collect();
                        let beyond = target.join(rest);
                        let parent = target.parent().unwrap_or(&target).to_path_buf();
                        self.hold(&parent, &beyond, links + 1);
                    }
                    return;
                }
                Some(Kind::Dir) if !last => self.guard(&at, Guard::Fix),
                Some(_) if !last => return,
                // Nothing to hold: the watch reports it.
                Some(Kind::Special) => return,
                Some(_) => self.guard(&at, Guard::Hold),
            }
        }
    }

    /// A file another one names as part of itself (a git include, a file
    /// `.envrc` or mise sources): held like the list where the agent can
    /// write it, and watched.
    fn hold_named(&mut self, path: &Path) {
        if let Some(root) = self.writable.iter().find(|w| path.starts_with(w)).cloned() {
            self.hold(&root, path, 0);
        }
    }

    /// A file another one names for what it holds (an environment file
    /// `dotenv` or mise loads): watched where the agent can write it.
    fn watch_named(&mut self, path: &Path) {
        if self.writable.iter().any(|w| path.starts_with(w)) {
            self.watch(path);
        }
    }

    /// A git configuration file, followed through the files it includes
    /// as git follows them (every `include.path` and `includeIf.*.path`,
    /// whatever the condition, to git's depth), each held where the agent
    /// can write it; the texts read are added to `texts`, the including
    /// file before what it includes (ADR-0093).
    fn git_config(&mut self, file: &Path, depth: usize, texts: &mut Vec<String>) {
        if depth > MAX_INCLUDE_DEPTH || self.named >= MAX_NAMED {
            return;
        }
        let Some(text) = self.tree.read(file, MAX_CONFIG) else {
            return;
        };
        let includes = include_paths(&text);
        texts.push(text);
        for value in includes {
            let Some(target) = include_target(&value, file, &self.home) else {
                continue;
            };
            let target = self.real(&target);
            self.named += 1;
            self.hold_named(&target);
            self.git_config(&target, depth + 1, texts);
        }
    }

    /// `path` with `.` and `..` taken out as the system would: its parent
    /// resolved where it exists, lexically where it does not.
    fn real(&self, path: &Path) -> PathBuf {
        if let (Some(parent), Some(name)) = (path.parent(), path.file_name())
            && let Some(parent) = self.tree.resolve(parent)
        {
            return parent.join(name);
        }
        lexical(path)
    }

    /// An `.envrc` and what it sources, as direnv runs it: the files it
    /// sources (`source_env`, `source_env_if_exists`, `source_up`, bash's
    /// `source` and `.`) run with no new `direnv allow`, so each is held
    /// like `.envrc` and read for what it sources in turn; the environment
    /// files it loads (`dotenv`, `dotenv_if_exists`) are reported
    /// (ADR-0093).
    fn envrc(&mut self, file: &Path, depth: usize) {
        if depth > 4 || self.named >= MAX_NAMED {
            return;
        }
        let Some(text) = self.tree.read(file, MAX_CONFIG) else {
            return;
        };
        let dir = file.parent().unwrap_or(file).to_path_buf();
        for (command, arg) in envrc_commands(&text) {
            self.named += 1;
            match command {
                EnvrcCommand::Source => {
                    let Some(path) = arg.and_then(|a| shell_path(&a, &dir, &self.home)) else {
                        continue;
                    };
                    let path = self.real(&path);
                    let path = if self.tree.kind(&path) == Some(Kind::Dir) {
                        path.join(".envrc")
                    } else {
                        path
                    };
                    self.hold_named(&path);
                    self.envrc(&path, depth + 1);
                }
                EnvrcCommand::SourceUp => {
                    let name = arg.unwrap_or_else(|| ".envrc".into());
                    let found = dir
                        .ancestors()
                        .skip(1)
                        .map(|a| a.join(&name))
                        .find(|p| self.tree.kind(p).is_some());
                    if let Some(path) = found {
                        self.hold_named(&path);
                        self.envrc(&path, depth + 1);
                    }
                }
                EnvrcCommand::Nix => {
                    let files: &[&str] = if arg.as_deref() == Some("flake") {
                        &["flake.nix", "flake.lock"]
                    } else {
                        &["shell.nix", "default.nix"]
                    };
                    for f in files {
                        self.watch_named(&dir.join(f));
                    }
                }
                EnvrcCommand::Dotenv => {
                    let arg = arg.unwrap_or_else(|| ".env".into());
                    if let Some(path) = shell_path(&arg, &dir, &self.home) {
                        let path = self.real(&path);
                        self.watch_named(&path);
                    }
                }
            }
        }
    }

    /// A mise configuration's `[env]` directives: the scripts `_.source`
    /// names run in the user's shell with no new `mise trust`, so each is
    /// held; the files `_.file` loads are reported (ADR-0093).
    fn mise(&mut self, root: &Path, file: &Path) {
        let Some(text) = self.tree.read(file, MAX_CONFIG) else {
            return;
        };
        let (sources, files) = mise_env_files(&text);
        for s in sources {
            self.named += 1;
            if let Some(p) = mise_path(&s, root, &self.home) {
                let p = self.real(&p);
                self.hold_named(&p);
            }
        }
        for f in files {
            self.named += 1;
            if let Some(p) = mise_path(&f, root, &self.home) {
                let p = self.real(&p);
                self.watch_named(&p);
            }
        }
    }

    /// A working tree's `.git` (a directory, a `gitdir:` file, or a link),
    /// and the submodules `.gitmodules` names.
    fn work_tree(&mut self, root: &Path, tree_root: &Path, depth: usize) {
        let dot_git = tree_root.join(".git");
        match self.tree.kind(&dot_git) {
            Some(Kind::Dir) => {
                self.watch(&dot_git);
                self.pin_down(root, &dot_git);
                self.git_dir(root, &dot_git, tree_root);
            }
            Some(Kind::File) => {
                self.hold(root, &dot_git, MAX_LINKS);
                if let Some(dir) = self.tree.read(&dot_git, MAX_CONFIG).and_then(|t| {
                    gitdir_of(t.as_bytes()).and_then(|d| self.tree.resolve(&tree_root.join(d)))
                }) {
                    self.git_dir(&dir, &dir, tree_root);
                }
            }
            Some(Kind::Link) => {
                self.hold(root, &dot_git, MAX_LINKS);
                if let Some(dir) = self.tree.resolve(&dot_git) {
                    self.git_dir(&dir, &dir, tree_root);
                }
            }
            // Not a repository git would use, but reported.
            None | Some(Kind::Special) => self.watch(&dot_git),
        }
        if depth < 4
            && let Some(modules) = self.tree.read(&tree_root.join(".gitmodules"), MAX_CONFIG)
        {
            for path in submodule_paths(&modules) {
                let sub = tree_root.join(path);
                if sub.starts_with(tree_root) && self.tree.kind(&sub) == Some(Kind::Dir) {
                    self.work_tree(root, &sub, depth + 1);
                }
            }
        }
    }

    /// Every directory from `root` down to `dir`, both included, fixed in place.
    fn pin_down(&mut self, root: &Path, dir: &Path) {
        let Ok(rel) = dir.strip_prefix(root) else {
            return self.fix(dir);
        };
        let mut at = root.to_path_buf();
        self.fix(&at);
        for part in rel.components() {
            at.push(part);
            if self.tree.kind(&at) != Some(Kind::Dir) {
                return;
            }
            self.guard(&at, Guard::Fix);
        }
    }

    /// A git directory: its dangerous entries held, itself and the
    /// directories above it up to `root` fixed in place, and the git directories it
    /// leads to (common directory, submodules, worktrees) treated the same.
    fn git_dir(&mut self, root: &Path, dir: &Path, work_tree: &Path) {
        if self.git_dirs.len() >= MAX_GIT_DIRS
            || self.git_dirs.iter().any(|d| d == dir)
            || self.tree.kind(dir) != Some(Kind::Dir)
        {
            return;
        }
        self.git_dirs.push(dir.to_path_buf());
        self.pin_down(root, dir);
        for name in GIT_DIR_HELD {
            self.hold(dir, &dir.join(name), 0);
        }
        let mut texts = Vec::new();
        for name in ["config", "config.worktree"] {
            self.git_config(&dir.join(name), 0, &mut texts);
        }
        if let Some(hooks) = texts.iter().rev().find_map(|t| hooks_path(t)) {
            let hooks = PathBuf::from(hooks);
            let hooks = if hooks.is_absolute() {
                hooks
            } else {
                work_tree.join(hooks)
            };
            self.hold(work_tree, &hooks, 0);
        }
        if let Some(common) = self
            .tree
            .read(&dir.join("commondir"), MAX_CONFIG)
            .and_then(|t| self.tree.resolve(&dir.join(t.trim())))
        {
            self.git_dir(&common, &common, work_tree);
        }
        for sub in ["modules", "worktrees"] {
            let mut stack = vec![(dir.join(sub), 0usize)];
            while let Some((at, depth)) = stack.pop() {
                for entry in self.tree.list(&at) {
                    if self.tree.kind(&entry) != Some(Kind::Dir) {
                        continue;
                    }
                    if self.tree.kind(&entry.join("HEAD")).is_some() {
                        self.git_dir(dir, &entry, work_tree);
                    } else if depth < 8 {
                        stack.push((entry, depth + 1));
                    }
                }
            }
        }
    }
}

/// Settings members whose string value is a command Claude Code runs, at
/// any depth: a hook's `command`, `statusLine.command`, and the helpers.
const COMMAND_MEMBERS: &[&str] = &[
    "command",
    "apiKeyHelper",
    "awsAuthRefresh",
    "awsCredentialExport",
    "otelHeadersHelper",
];

/// The files that the commands in a Claude Code settings file name (a
/// status line's script, a hook's, a helper's), as absolute paths: each
/// word of a command that is a path from `/`, `~`, `$HOME` or
/// `$CLAUDE_PROJECT_DIR`, and each string of a hook's `args` that is one.
/// A settings file that is not JSON names none.
pub fn named_programs(text: &str, home: &Path, project: &Path) -> Vec<PathBuf> {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    commands_in(&value, home, project, &mut out);
    out.sort();
    out.dedup();
    out
}

/// The files the user's MCP servers in Claude Code's state start: each
/// server's `command` and `args` (at the top and under every project), read
/// as [`named_programs`] reads commands.
pub fn mcp_programs(text: &str, home: &Path, project: &Path) -> Vec<PathBuf> {
    use serde_json::Value;
    let Ok(state) = serde_json::from_str::<Value>(text) else {
        return Vec::new();
    };
    let mut servers: Vec<&Value> = state.get("mcpServers").into_iter().collect();
    if let Some(projects) = state.get("projects").and_then(Value::as_object) {
        servers.extend(projects.values().filter_map(|p| p.get("mcpServers")));
    }
    let mut out = Vec::new();
    for s in servers {
        commands_in(s, home, project, &mut out);
    }
    out.sort();
    out.dedup();
    out
}

fn commands_in(value: &serde_json::Value, home: &Path, project: &Path, out: &mut Vec<PathBuf>) {
    use serde_json::Value;
    match value {
        Value::Object(members) => {
            for (key, v) in members {
                match v {
                    Value::String(command) if COMMAND_MEMBERS.contains(&key.as_str()) => {
                        out.extend(command_paths(command, home, project));
                    }
                    Value::Array(args) if key == "args" => {
                        for a in args.iter().filter_map(Value::as_str) {
                            out.extend(word_path(a, home, project));
                        }
                    }
                    _ => commands_in(v, home, project, out),
                }
            }
        }
        Value::Array(items) => {
            for v in items {
                commands_in(v, home, project, out);
            }
        }
        _ => {}
    }
}

/// The paths a shell command's words name (split at blanks and the shell's
/// operators, quotes taken out, `NAME=` in front of a word dropped).
pub fn command_paths(command: &str, home: &Path, project: &Path) -> Vec<PathBuf> {
    command
        .split(|c: char| c.is_whitespace() || ";&|()<>`".contains(c))
        .filter_map(|w| {
            let w = w.replace(['"', '\''], "");
            let w = match w.split_once('=') {
                Some((name, rest)) if !name.contains('/') => rest,
                _ => &w,
            };
            word_path(w, home, project)
        })
        .collect()
}

/// How a word starts from the home.
const HOME_PREFIXES: &[&str] = &["~/", "$HOME/", "${HOME}/"];
/// How a hook's command starts from the project.
const PROJECT_PREFIXES: &[&str] = &["$CLAUDE_PROJECT_DIR/", "${CLAUDE_PROJECT_DIR}/"];
/// How a shell word starts from the working directory.
const PWD_PREFIXES: &[&str] = &["$PWD/", "${PWD}/"];

/// The directory a word starts from and the rest of it, for a word that
/// starts with one of the prefixes of `anchors` (tried in order).
fn anchored<'p, 'w>(word: &'w str, anchors: &[(&[&str], &'p Path)]) -> Option<(&'p Path, &'w str)> {
    anchors.iter().find_map(|&(prefixes, base)| {
        prefixes
            .iter()
            .find_map(|p| word.strip_prefix(p))
            .map(|rest| (base, rest))
    })
}

/// One word as an absolute path, when it is one: from `/`, or from `~`,
/// `$HOME` or `$CLAUDE_PROJECT_DIR` (with or without braces), `.` and `..`
/// taken out as written.
fn word_path(word: &str, home: &Path, project: &Path) -> Option<PathBuf> {
    let anchors = [(HOME_PREFIXES, home), (PROJECT_PREFIXES, project)];
    let (base, rest) = match anchored(word, &anchors) {
        Some(found) => found,
        None if word.starts_with('/') => (Path::new("/"), word.trim_start_matches('/')),
        None => return None,
    };
    if rest.contains('$') || rest.is_empty() {
        return None;
    }
    Some(super::push_lexically(base, Path::new(rest)))
}

/// Where mise reads a project's configuration, relative to the project
/// (its `config_root`, against which the paths in them are taken).
pub const MISE_CONFIGS: &[&str] = &[
    "mise.toml",
    ".mise.toml",
    "mise.local.toml",
    ".mise.local.toml",
    ".mise/config.toml",
    ".mise/config.local.toml",
    ".config/mise.toml",
    ".config/mise/config.toml",
    "mise/config.toml",
];

/// The values of every `include.path` and `includeIf.<condition>.path` in
/// a git configuration.
pub fn include_paths(text: &str) -> Vec<String> {
    config_entries(text)
        .filter(|(section, key, _)| {
            key == "path" && (section == "include" || section.starts_with("includeif."))
        })
        .map(|(_, _, value)| value)
        .collect()
}

/// Where git finds an included file: `~/` from the home directory, a
/// relative path from the including file's directory. (`~user/` and
/// `%(prefix)/` are not followed.)
pub fn include_target(value: &str, including: &Path, home: &Path) -> Option<PathBuf> {
    if value.is_empty() || value.starts_with("%(") {
        return None;
    }
    if value == "~" {
        return Some(home.to_path_buf());
    }
    if let Some(rest) = value.strip_prefix("~/") {
        return Some(home.join(rest));
    }
    if value.starts_with('~') {
        return None;
    }
    let path = Path::new(value);
    if path.is_absolute() {
        return Some(path.to_path_buf());
    }
    Some(including.parent()?.join(path))
}

/// `path` with `.` and `..` taken out as written.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// What an `.envrc` line does with the file it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvrcCommand {
    /// Runs it: `source_env`, `source_env_if_exists`, `source`, `.`.
    Source,
    /// Runs the first one found above: `source_up`, `source_up_if_exists`.
    SourceUp,
    /// Loads its variables: `dotenv`, `dotenv_if_exists`.
    Dotenv,
    /// Has nix evaluate the directory's `flake.nix` (`use flake`,
    /// `use_flake`) or `shell.nix` and `default.nix` (`use nix`,
    /// `use_nix`), `shellHook` included; the word is `flake` or `nix`.
    Nix,
}

/// The files an `.envrc` sources or loads, as its commands name them
/// (the word after the command, quotes taken out; `None` when the command
/// is given none). Read a command at a time (split at `;`, `&&`, `||`,
/// `|`), from the first word that is one of direnv's, so `[ -f x ] &&
/// source_env x` and `if …; then dotenv y; fi` are found too.
pub fn envrc_commands(text: &str) -> Vec<(EnvrcCommand, Option<String>)> {
    let mut out = Vec::new();
    // A line continued with a backslash is one command to bash.
    let text = text.replace("\r\n", "\n").replace("\\\n", " ");
    for line in text.lines() {
        let line = line.split(" #").next().unwrap_or(line);
        if line.trim_start().starts_with('#') {
            continue;
        }
        for part in line.split([';', '&', '|']) {
            // Quotes and backslashes out (`\\source` is `source` to bash),
            // and a subshell's or group's brackets off the word.
            let words: Vec<String> = part
                .split_whitespace()
                .map(|w| {
                    w.replace(['"', '\'', '\\'], "")
                        .trim_start_matches("$(")
                        .trim_start_matches(['(', '{', '`'])
                        .trim_end_matches([')', '}', '`'])
                        .to_string()
                })
                .collect();
            let Some(at) = words.iter().position(|w| envrc_command(w).is_some()) else {
                continue;
            };
            let command = envrc_command(&words[at]).unwrap_or(EnvrcCommand::Source);
            if command == EnvrcCommand::Nix {
                let kind = match words[at].as_str() {
                    "use_flake" => Some("flake"),
                    "use_nix" => Some("nix"),
                    _ => words
                        .get(at + 1)
                        .map(String::as_str)
                        .filter(|w| ["flake", "nix"].contains(w)),
                };
                if let Some(kind) = kind {
                    out.push((command, Some(kind.to_string())));
                }
                continue;
            }
            let arg = words
                .get(at + 1)
                .filter(|w| !w.starts_with('-') && !w.is_empty())
                .cloned();
            out.push((command, arg));
        }
    }
    out
}

fn envrc_command(word: &str) -> Option<EnvrcCommand> {
    match word {
        "source_env" | "source_env_if_exists" | "source" | "." => Some(EnvrcCommand::Source),
        "source_up" | "source_up_if_exists" => Some(EnvrcCommand::SourceUp),
        "dotenv" | "dotenv_if_exists" => Some(EnvrcCommand::Dotenv),
        "use" | "use_flake" | "use_nix" => Some(EnvrcCommand::Nix),
        _ => None,
    }
}

/// A word of a shell script as a path: from `/`, from the home (`~/`,
/// `$HOME/`, `${HOME}/`), or from `dir` (relative, `$PWD/`, `${PWD}/`); a
/// word with another variable in it names nothing nd7 can know.
pub fn shell_path(word: &str, dir: &Path, home: &Path) -> Option<PathBuf> {
    let anchors = [(HOME_PREFIXES, home), (PWD_PREFIXES, dir)];
    let (base, rest) = match anchored(word, &anchors) {
        Some(found) => found,
        None if word.starts_with('/') => (Path::new("/"), word),
        None => (dir, word),
    };
    if rest.contains('$') || rest.contains('`') || rest.is_empty() {
        return None;
    }
    Some(lexical(&base.join(rest)))
}

/// The scripts (`_.source`) and environment files (`_.file`) a mise
/// configuration's `[env]` names, in each form mise takes: a string, an
/// array of strings or of tables with `path`, a table with `path`, under
/// `[env]` or each `[[env]]`.
pub fn mise_env_files(text: &str) -> (Vec<String>, Vec<String>) {
    use toml_edit::{DocumentMut, Item, Value};
    let Ok(doc) = text.parse::<DocumentMut>() else {
        return (Vec::new(), Vec::new());
    };
    fn paths(item: Option<&Item>, out: &mut Vec<String>) {
        let value = |v: &Value, out: &mut Vec<String>| match v {
            Value::String(s) => out.push(s.value().clone()),
            Value::InlineTable(t) => {
                if let Some(p) = t.get("path").and_then(Value::as_str) {
                    out.push(p.to_string());
                }
            }
            Value::Array(a) => {
                for v in a.iter() {
                    match v {
                        Value::String(s) => out.push(s.value().clone()),
                        Value::InlineTable(t) => {
                            if let Some(p) = t.get("path").and_then(Value::as_str) {
                                out.push(p.to_string());
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        };
        match item {
            Some(Item::Value(v)) => value(v, out),
            Some(Item::Table(t)) => {
                if let Some(p) = t.get("path").and_then(Item::as_str) {
                    out.push(p.to_string());
                }
            }
            Some(Item::ArrayOfTables(a)) => {
                for t in a.iter() {
                    if let Some(p) = t.get("path").and_then(Item::as_str) {
                        out.push(p.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    let mut envs: Vec<&dyn toml_edit::TableLike> = Vec::new();
    match doc.get("env") {
        Some(Item::Table(t)) => envs.push(t),
        Some(Item::ArrayOfTables(a)) => {
            envs.extend(a.iter().map(|t| t as &dyn toml_edit::TableLike))
        }
        Some(Item::Value(Value::InlineTable(t))) => envs.push(t),
        _ => {}
    }
    let (mut sources, mut files) = (Vec::new(), Vec::new());
    for env in envs {
        let Some(directives) = env.get("_").and_then(Item::as_table_like) else {
            continue;
        };
        paths(directives.get("source"), &mut sources);
        paths(directives.get("file"), &mut files);
    }
    (sources, files)
}

/// A path in a mise configuration: `{{config_root}}` and `{{env.HOME}}`
/// put in, `~/` from the home, relative from the project (`root`); any
/// other template names nothing nd7 can know.
pub fn mise_path(value: &str, root: &Path, home: &Path) -> Option<PathBuf> {
    let home_text = home.to_string_lossy();
    let root_text = root.to_string_lossy();
    let value = value
        .replace("{{config_root}}", &root_text)
        .replace("{{ config_root }}", &root_text)
        .replace("{{env.HOME}}", &home_text)
        .replace("{{ env.HOME }}", &home_text);
    if value.contains("{{") || value.contains('$') {
        return None;
    }
    shell_path(&value, root, home)
}

/// The directory a `.git` file points at, read as git reads it (its
/// `read_gitfile_gently`): the file must start with `gitdir: ` (the space
/// included); the path is the rest, less the line ends at the very end of
/// the file, up to the first NUL. Spaces are part of it, and so are line
/// ends before the last: trimming or stopping at the first line would
/// follow a path git does not.
pub fn gitdir_of(bytes: &[u8]) -> Option<&Path> {
    use std::os::unix::ffi::OsStrExt;
    let mut end = bytes.len();
    while end > 0 && matches!(bytes[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    let dir = bytes[..end].strip_prefix(b"gitdir: ")?;
    let dir = dir.split(|b| *b == 0).next().unwrap_or(dir);
    (!dir.is_empty()).then(|| Path::new(std::ffi::OsStr::from_bytes(dir)))
}

/// The `path = …` of every submodule in a `.gitmodules`.
pub fn submodule_paths(text: &str) -> Vec<String> {
    config_entries(text)
        .filter(|(section, key, _)| section.starts_with("submodule") && key == "path")
        .map(|(_, _, value)| value)
        .collect()
}

/// `core.hooksPath` from a git configuration file, if it sets one.
pub fn hooks_path(text: &str) -> Option<String> {
    config_entries(text)
        .filter(|(section, key, _)| section == "core" && key == "hookspath")
        .map(|(_, _, value)| value)
        .last()
}

fn expand_home(path: &str, home: &Path) -> Option<PathBuf> {
    match path.strip_prefix("~/") {
        Some(rest) => Some(home.join(rest)),
        None if path == "~" => Some(home.to_path_buf()),
        None => Some(PathBuf::from(path)),
    }
}

/// A git configuration file's `(section, key, value)` entries, section and
/// key lower-cased, the subsection kept (`remote "origin"` becomes
/// `remote.origin`), read as git reads them ([`parse_config`]); a key
/// without a value is `true`.
pub fn config_entries(text: &str) -> impl Iterator<Item = (String, String, String)> {
    parse_config(text).entries.into_iter()
}

/// A git configuration file as git reads it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub entries: Vec<(String, String, String)>,
    /// The line at which git would refuse the file, if it would: entries
    /// are read up to it.
    pub refused_at: Option<usize>,
}

/// Reads `text` with git's own rules (its `config.c`), which are looser
/// than one entry a line: a key may follow its section's `]` on the same
/// line (`[core] fsmonitor = x`), values may be quoted in parts with
/// escapes and continued with a backslash at the end of a line, comments
/// start anywhere outside quotes, and section and key names are compared
/// without case.
pub fn parse_config(text: &str) -> Config {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let text = text.replace("\r\n", "\n");
    let mut p = ConfigReader {
        chars: text.chars().collect(),
        at: 0,
        line: 1,
    };
    let mut out = Config::default();
    let mut section: Option<String> = None;
    while let Some(c) = p.next() {
        let ok = match c {
            '\n' => true,
            c if c.is_ascii_whitespace() => true,
            '#' | ';' => {
                p.skip_line();
                true
            }
            '[' => p.section().map(|s| section = Some(s)).is_some(),
            c if c.is_ascii_alphabetic() => match (&section, p.entry(c)) {
                (Some(s), Some((key, value))) => {
                    out.entries.push((s.clone(), key, value));
                    true
                }
                _ => false,
            },
            _ => false,
        };
        if !ok {
            out.refused_at = Some(p.line);
            break;
        }
    }
    out
}

struct ConfigReader {
    chars: Vec<char>,
    at: usize,
    line: usize,
}

impl ConfigReader {
    fn next(&mut self) -> Option<char> {
        let c = *self.chars.get(self.at)?;
        self.at += 1;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    /// The next character, the end of the text reading as a line's end.
    fn next_or_end(&mut self) -> char {
        self.next().unwrap_or('\n')
    }

    fn skip_line(&mut self) {
        while !matches!(self.next(), None | Some('\n')) {}
    }

    /// After `[`: `name]`, `name "sub"]` or the old `name.sub]`.
    fn section(&mut self) -> Option<String> {
        let mut name = String::new();
        loop {
            match self.next()? {
                ']' => return Some(name),
                c if c.is_ascii_whitespace() && c != '\n' => break,
                c if c.is_ascii_alphanumeric() || c == '-' || c == '.' => {
                    name.push(c.to_ascii_lowercase())
                }
                _ => return None,
            }
        }
        let mut c = self.next()?;
        while c.is_ascii_whitespace() && c != '\n' {
            c = self.next()?;
        }
        if c != '"' {
            return None;
        }
        let mut sub = String::new();
        loop {
            match self.next()? {
                '\n' => return None,
                '"' => break,
                '\\' => match self.next()? {
                    '\n' => return None,
                    c => sub.push(c),
                },
                c => sub.push(c),
            }
        }
        (self.next()? == ']').then(|| format!("{name}.{sub}"))
    }

    /// A key starting with `first`, and its value.
    fn entry(&mut self, first: char) -> Option<(String, String)> {
        let mut key = String::from(first.to_ascii_lowercase());
        let mut c = self.next_or_end();
        while c.is_ascii_alphanumeric() || c == '-' {
            key.push(c.to_ascii_lowercase());
            c = self.next_or_end();
        }
        while c == ' ' || c == '\t' {
            c = self.next_or_end();
        }
        match c {
            '\n' => Some((key, "true".to_string())),
            '=' => Some((key, self.value()?)),
            _ => None,
        }
    }

    /// A value, to the end of its line (or of its last continued line).
    fn value(&mut self) -> Option<String> {
        let (mut quote, mut comment, mut space) = (false, false, 0usize);
        let mut out = String::new();
        loop {
            let c = self.next_or_end();
            if c == '\n' {
                return (!quote).then_some(out);
            }
            if comment {
                continue;
            }
            if c.is_ascii_whitespace() && !quote {
                if !out.is_empty() {
                    space += 1;
                }
                continue;
            }
            if !quote && (c == ';' || c == '#') {
                comment = true;
                continue;
            }
            out.extend(std::iter::repeat_n(' ', space));
            space = 0;
            match c {
                '\\' => match self.next_or_end() {
                    '\n' => {}
                    't' => out.push('\t'),
                    'b' => out.push('\u{8}'),
                    'n' => out.push('\n'),
                    c @ ('\\' | '"') => out.push(c),
                    _ => return None,
                },
                '"' => quote = !quote,
                c => out.push(c),
            }
        }
    }
}

/// What in a git configuration makes plain `git` run something or fetch
/// from somewhere the user did not choose: every entry outside a short list
/// of ones `git init`, `git clone` and everyday use write. For repositories
/// that appear during a run (a `git clone` into the project is fine; a
/// clone with an fsmonitor is not).
pub fn git_config_risky(text: &str) -> Vec<String> {
    const PLAIN: &[(&str, &str)] = &[
        ("core", "repositoryformatversion"),
        ("core", "filemode"),
        ("core", "bare"),
        ("core", "logallrefupdates"),
        ("core", "ignorecase"),
        ("core", "precomposeunicode"),
        ("core", "symlinks"),
        ("core", "autocrlf"),
        ("core", "safecrlf"),
        ("core", "eol"),
        ("core", "sparsecheckout"),
        ("core", "worktree"),
        ("init", "defaultbranch"),
        ("user", "name"),
        ("user", "email"),
        ("extensions", "objectformat"),
        ("extensions", "refstorage"),
        ("extensions", "worktreeconfig"),
        ("submodule", "active"),
        ("pull", "rebase"),
        ("pull", "ff"),
        ("push", "default"),
        ("push", "autosetupremote"),
        ("fetch", "prune"),
        ("gc", "auto"),
        ("maintenance", "auto"),
    ];
    const SUBSECTIONS: &[(&str, &[&str])] = &[
        (
            "remote",
            &[
                "url",
                "fetch",
                "pushurl",
                "tagopt",
                "prune",
                "promisor",
                "partialclonefilter",
            ],
        ),
        (
            "branch",
            &["remote", "merge", "rebase", "pushremote", "description"],
        ),
        ("submodule", &["url", "active", "path", "branch", "update"]),
        ("lfs", &["repositoryformatversion"]),
    ];
    let config = parse_config(text);
    let mut risky: Vec<String> = config
        .entries
        .into_iter()
        .filter(|(section, key, value)| {
            if PLAIN.contains(&(section.as_str(), key.as_str())) {
                return false;
            }
            let (name, sub) = match section.split_once('.') {
                Some((n, s)) => (n, Some(s)),
                None => (section.as_str(), None),
            };
            let allowed = sub.is_some()
                && SUBSECTIONS
                    .iter()
                    .any(|(n, keys)| *n == name && keys.contains(&key.as_str()));
            // A submodule's `update = !command` runs a command.
            let runs = key == "update" && value.trim_start().starts_with('!');
            !allowed || runs
        })
        .map(|(section, key, value)| format!("{section}.{key} = {value}"))
        .collect();
    // Where git itself would refuse the file nothing runs, but a reader
    // that parts from git there must not pass what follows unread.
    if let Some(line) = config.refused_at {
        risky.push(format!(
            "line {line} and what follows, which nd7 cannot read as git configuration"
        ));
    }
    risky
}

/// The parts of Claude Code's state file that start programs in a later
/// session: the user's MCP servers, and per project its MCP servers, which
/// of the project's `.mcp.json` servers are enabled, allowed tools, and the
/// folder trust that lets a project's own settings run. Returned as one
/// JSON value, so two can be compared and shown.
///
/// For the run's own project (`own`: the project and the repository
/// enclosing it, which is how Claude Code keys it), only its MCP servers
/// count: the rest is what the user answers in Claude Code's own dialogs
/// during the run (trusting the folder, approving the project's
/// `.mcp.json` servers), and what those answers act on is on the list.
/// Any other entry counts whole, a parent directory's above all (trust may
/// be inherited by what lies below it).
pub fn claude_state_risky(state: &serde_json::Value, own: &[PathBuf]) -> serde_json::Value {
    use serde_json::{Map, Value};
    const TOP: &[&str] = &["mcpServers"];
    const PER_PROJECT: &[&str] = &[
        "mcpServers",
        "enabledMcpjsonServers",
        "disabledMcpjsonServers",
        "enableAllProjectMcpServers",
        "allowedTools",
        "hasTrustDialogAccepted",
    ];
    let mut out = Map::new();
    for key in TOP {
        if let Some(v) = state.get(*key) {
            out.insert((*key).to_string(), v.clone());
        }
    }
    if let Some(projects) = state.get("projects").and_then(Value::as_object) {
        let mut kept = Map::new();
        for (path, entry) in projects {
            let own = own.iter().any(|o| o.as_os_str() == path.as_str());
            let mut risky = Map::new();
            for key in PER_PROJECT {
                if own && *key != "mcpServers" {
                    continue;
                }
                match entry.get(*key) {
                    None | Some(Value::Null) | Some(Value::Bool(false)) => {}
                    Some(Value::Array(a)) if a.is_empty() => {}
                    Some(Value::Object(o)) if o.is_empty() => {}
                    Some(v) => {
                        risky.insert((*key).to_string(), v.clone());
                    }
                }
            }
            if !risky.is_empty() {
                kept.insert(path.clone(), Value::Object(risky));
            }
        }
        if !kept.is_empty() {
            out.insert("projects".into(), Value::Object(kept));
        }
    }
    Value::Object(out)
}

/// Whether a file name (the last component) is one the end-of-run
/// search looks at anywhere below the project: a repository (`.git`, or the
/// `HEAD` of a bare one: `deferred::is_bare_repository`), or a name on the project
/// list.
pub fn searched_name(name: &str) -> bool {
    name == ".git"
        || name == "HEAD"
        || PROJECT_HELD
            .iter()
            .chain(PROJECT_REPORTED)
            .any(|p| p.split('/').next() == Some(name))
}

/// The paths on the project list that a name found below a root (one for
/// which [`searched_name`] holds, other than `.git`) stands for, in `dir`:
/// for `.claude`, its settings, commands, agents, skills and hooks, not
/// the rest of it.
pub fn listed_beneath(dir: &Path, name: &str) -> Vec<PathBuf> {
    PROJECT_HELD
        .iter()
        .chain(PROJECT_REPORTED)
        .filter(|p| p.split('/').next() == Some(name))
        .map(|p| dir.join(p))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Roots;
    use std::collections::BTreeMap;
    use std::os::unix::ffi::OsStrExt;

    /// A file tree in memory: path -> (kind, content or link target).
    #[derive(Default)]
    struct Mem(BTreeMap<PathBuf, (Kind, String)>);

    impl Mem {
        fn file(mut self, path: &str, content: &str) -> Mem {
            self.parents(path);
            self.0.insert(path.into(), (Kind::File, content.into()));
            self
        }
        fn dir(mut self, path: &str) -> Mem {
            self.parents(path);
            self.0.insert(path.into(), (Kind::Dir, String::new()));
            self
        }
        fn link(mut self, path: &str, to: &str) -> Mem {
            self.parents(path);
            self.0.insert(path.into(), (Kind::Link, to.into()));
            self
        }
        fn parents(&mut self, path: &str) {
            for a in Path::new(path).ancestors().skip(1) {
                self.0
                    .entry(a.to_path_buf())
                    .or_insert((Kind::Dir, String::new()));
            }
        }
    }

    impl Tree for Mem {
        fn kind(&self, path: &Path) -> Option<Kind> {
            self.0.get(path).map(|(k, _)| *k)
        }
        fn read(&self, path: &Path, limit: u64) -> Option<String> {
            match self.0.get(path)? {
                (Kind::File, c) if c.len() as u64 <= limit => Some(c.clone()),
                (Kind::Link, _) => self.read(&self.resolve(path)?, limit),
                _ => None,
            }
        }
        fn list(&self, path: &Path) -> Vec<PathBuf> {
            self.0
                .keys()
                .filter(|p| p.parent() == Some(path))
                .cloned()
                .collect()
        }
        fn resolve(&self, path: &Path) -> Option<PathBuf> {
            let clean = lexical(path);
            match self.0.get(&clean)? {
                (Kind::Link, to) => self.resolve(&clean.parent()?.join(to)),
                _ => Some(clean),
            }
        }
    }

    fn policy() -> Policy {
        Policy::new(Roots {
            project: "/h/u/p".into(),
            temp: "/tmp".into(),
            home: "/h/u".into(),
            state: "/h/u/.local/state/nd7".into(),
            exit: "/usr/bin/nd7-exec".into(),
        })
    }

    fn held(plan: &Plan, guard: Guard) -> Vec<String> {
        plan.guarded
            .iter()
            .filter(|g| g.guard == guard)
            .map(|g| g.path.display().to_string())
            .collect()
    }

    #[test]
    fn an_ordinary_repository_is_locked_where_it_runs_things_and_pinned_above() {
        let tree = Mem::default()
            .file("/h/u/p/.git/config", "[core]\n\tbare = false\n")
            .file("/h/u/p/.git/HEAD", "ref: refs/heads/main\n")
            .file("/h/u/p/.git/hooks/pre-commit.sample", "")
            .file("/h/u/p/.git/info/exclude", "")
            .file("/h/u/p/.gitattributes", "")
            .file("/h/u/p/.claude/settings.json", "{}")
            .file("/h/u/p/src/main.rs", "")
            .file("/h/u/.claude/settings.json", "{}")
            .file("/h/u/.claude/claude.json", "{}")
            .link("/h/u/.claude.json", ".claude/claude.json")
            .file("/h/u/.bashrc", "");
        let plan = plan(&policy(), &tree);
        assert_eq!(
            held(&plan, Guard::Hold),
            [
                "/h/u/.bashrc",
                "/h/u/.claude.json",
                "/h/u/.claude/settings.json",
                "/h/u/p/.gitattributes",
                "/h/u/p/.claude/settings.json",
                "/h/u/p/.git/config",
                "/h/u/p/.git/hooks",
            ]
        );
        assert_eq!(
            held(&plan, Guard::Fix),
            [
                "/h/u/.claude",
                "/h/u/p",
                "/h/u/p/.claude",
                "/h/u/p/.git",
                "/h/u/p/.git/info"
            ]
        );
        // Parents come before what lies beneath them.
        let pos = |p: &str| plan.guarded.iter().position(|g| g.path == Path::new(p));
        assert!(pos("/h/u/p/.git") < pos("/h/u/p/.git/config"));
        assert!(pos("/h/u/p") < pos("/h/u/p/.git"));
        for missing in [
            "/h/u/p/.envrc",
            "/h/u/p/.mcp.json",
            "/h/u/p/.git/commondir",
            "/h/u/p/.git/info/attributes",
            "/h/u/.claude/commands",
            "/h/u/.zshrc",
        ] {
            assert!(plan.watched.contains(&missing.into()), "{missing}");
            assert!(!plan.held(Path::new(missing)), "{missing}");
        }
        assert!(plan.held(Path::new("/h/u/p/.git/hooks/post-checkout")));
        assert!(!plan.held(Path::new("/h/u/p/src/main.rs")));
        assert_eq!(
            plan.claude_state,
            [PathBuf::from("/h/u/.claude/claude.json")]
        );
    }

    #[test]
    fn submodules_worktrees_and_a_common_dir_are_followed() {
        let tree = Mem::default()
            .file("/h/u/p/.git/config", "")
            .file("/h/u/p/.git/HEAD", "")
            .file(
                "/h/u/p/.gitmodules",
                "[submodule \"lib\"]\n\tpath = libs/lib\n\turl = ../lib\n",
            )
            .file(
                "/h/u/p/libs/lib/.git",
                "gitdir: ../../.git/modules/libs/lib\n",
            )
            .file("/h/u/p/.git/modules/libs/lib/HEAD", "")
            .file("/h/u/p/.git/modules/libs/lib/config", "")
            .dir("/h/u/p/.git/modules/libs/lib/hooks")
            .file("/h/u/p/.git/worktrees/wt/HEAD", "")
            .file("/h/u/p/.git/worktrees/wt/commondir", "../..\n");
        let plan = plan(&policy(), &tree);
        let holds = held(&plan, Guard::Hold);
        for want in [
            "/h/u/p/.gitmodules",
            "/h/u/p/libs/lib/.git",
            "/h/u/p/.git/config",
            "/h/u/p/.git/modules/libs/lib/config",
            "/h/u/p/.git/modules/libs/lib/hooks",
            "/h/u/p/.git/worktrees/wt/commondir",
        ] {
            assert!(holds.contains(&want.to_string()), "{want}: {holds:?}");
        }
        let fixes = held(&plan, Guard::Fix);
        for want in [
            "/h/u/p/.git/modules/libs/lib",
            "/h/u/p/.git/worktrees/wt",
            "/h/u/p/libs",
            "/h/u/p/libs/lib",
        ] {
            assert!(fixes.contains(&want.to_string()), "{want}: {fixes:?}");
        }
    }

    #[test]
    fn a_worktree_file_and_links_are_held_as_themselves_and_followed() {
        let tree = Mem::default()
            .file("/h/u/p/.git", "gitdir: /h/u/main/.git/worktrees/p\n")
            .file("/h/u/main/.git/worktrees/p/HEAD", "")
            .file("/h/u/main/.git/worktrees/p/commondir", "../..")
            .file("/h/u/main/.git/HEAD", "")
            .file("/h/u/main/.git/config", "[core]\n\thooksPath = .husky/_\n")
            .link("/h/u/p/.claude", "../shared/claude")
            .file("/h/u/shared/claude/settings.json", "{}")
            .dir("/h/u/p/.husky/_");
        let plan = plan(&policy(), &tree);
        let holds = held(&plan, Guard::Hold);
        for want in [
            "/h/u/p/.git",
            "/h/u/main/.git/worktrees/p/commondir",
            "/h/u/main/.git/config",
            "/h/u/p/.claude",
            "/h/u/shared/claude/settings.json",
            "/h/u/p/.husky/_",
        ] {
            assert!(holds.contains(&want.to_string()), "{want}: {holds:?}");
        }
    }

    #[test]
    fn hooks_path_and_submodule_paths_are_read_as_git_reads_them() {
        let config = "[core]\n\trepositoryformatversion = 0\n\thooksPath = \"one\"\n[Core]\n  HOOKSPATH=two\n[remote \"o\"]\n\turl = x\n";
        assert_eq!(hooks_path(config).as_deref(), Some("two"));
        assert_eq!(hooks_path("[core]\nbare = true\n"), None);
        assert_eq!(
            submodule_paths("[submodule \"a\"]\n path = x/y\n[submodule \"b\"]\n\tpath=z\n"),
            ["x/y", "z"]
        );
        assert_eq!(
            gitdir_of(b"gitdir: ../.git/modules/a\n"),
            Some(Path::new("../.git/modules/a"))
        );
        assert_eq!(gitdir_of(b"nothing"), None);
        assert_eq!(gitdir_of(b"gitdir: /a \r\n"), Some(Path::new("/a ")));
        assert_eq!(gitdir_of(b"gitdir: /a\0/b\n"), Some(Path::new("/a")));
        assert_eq!(gitdir_of(b"gitdir: /a\n/b\n"), Some(Path::new("/a\n/b")));
        assert_eq!(
            gitdir_of(b"gitdir: /\xe9\n"),
            Some(std::ffi::OsStr::from_bytes(b"/\xe9").as_ref())
        );
        assert_eq!(gitdir_of(b"gitdir:/a\n"), None);
    }

    #[test]
    fn git_configuration_is_read_with_gits_own_syntax() {
        let entries = |t: &str| -> Vec<String> {
            config_entries(t)
                .map(|(s, k, v)| format!("{s}.{k}={v}"))
                .collect()
        };
        assert_eq!(entries("[core] fsmonitor = a b"), ["core.fsmonitor=a b"]);
        assert_eq!(entries("[core]fsmonitor=x"), ["core.fsmonitor=x"]);
        assert_eq!(entries("[CoRe]\n\tFsMonitor = x"), ["core.fsmonitor=x"]);
        assert_eq!(
            entries("[core]\n x = \"a ; b\" ; c\n y = one\\\n two\n z\n"),
            ["core.x=a ; b", "core.y=one two", "core.z=true"]
        );
        assert_eq!(
            entries("[remote \"O \\\"x\\\"\"]\nurl = \"a\\tb\"\n"),
            ["remote.O \"x\".url=a\tb"]
        );
        assert_eq!(
            entries("[includeIf \"gitdir:~/w/\"] path = ../x\n[include]\npath=~/y"),
            ["includeif.gitdir:~/w/.path=../x", "include.path=~/y"]
        );
        let bad = parse_config("[core]\n x = ok\n y = \"open\n[alias] z = !sh\n");
        assert_eq!(bad.entries.len(), 1);
        assert_eq!(bad.refused_at, Some(4));
        assert!(
            git_config_risky("[core]\n y = \"open\n[alias] z = !sh\n")
                .iter()
                .any(|r| r.contains("cannot read")),
        );
    }

    #[test]
    fn includes_sourced_files_and_mises_env_are_found_where_their_tools_look() {
        let (home, cfg) = (Path::new("/h/u"), Path::new("/h/u/p/.git/config"));
        assert_eq!(
            include_target("../.gitshared", cfg, home),
            Some(PathBuf::from("/h/u/p/.git/../.gitshared"))
        );
        assert_eq!(
            include_target("~/d/x", cfg, home),
            Some(PathBuf::from("/h/u/d/x"))
        );
        assert_eq!(include_target("~other/x", cfg, home), None);
        assert_eq!(include_target("%(prefix)/x", cfg, home), None);
        let envrc = "source_env_if_exists .envrc.local\n[ -f x ] && source ./x.sh # hi\nif true; then dotenv; fi\nsource_up\nPATH_add bin\n";
        assert_eq!(
            envrc_commands(envrc),
            [
                (EnvrcCommand::Source, Some(".envrc.local".into())),
                (EnvrcCommand::Source, Some("./x.sh".into())),
                (EnvrcCommand::Dotenv, None),
                (EnvrcCommand::SourceUp, None),
            ]
        );
        let bash = "\\source .a\n(source_env .b)\nsource_env \\\n  .c\nuse flake\nuse node\nuse_nix\nsource $HOME/d\n";
        assert_eq!(
            envrc_commands(bash),
            [
                (EnvrcCommand::Source, Some(".a".into())),
                (EnvrcCommand::Source, Some(".b".into())),
                (EnvrcCommand::Source, Some(".c".into())),
                (EnvrcCommand::Nix, Some("flake".into())),
                (EnvrcCommand::Nix, Some("nix".into())),
                (EnvrcCommand::Source, Some("$HOME/d".into())),
            ]
        );
        assert_eq!(
            shell_path("$HOME/a", Path::new("/h/u/p"), home),
            Some(PathBuf::from("/h/u/a"))
        );
        assert_eq!(shell_path("$X/a", Path::new("/h/u/p"), home), None);
        let mise = "[env]\n_.source = \"./s.sh\"\n_.file = [\".env\", {path = \"{{config_root}}/b.env\"}]\n";
        assert_eq!(
            mise_env_files(mise),
            (
                vec!["./s.sh".to_string()],
                vec![".env".to_string(), "{{config_root}}/b.env".to_string()]
            )
        );
        assert_eq!(
            mise_path("{{config_root}}/b.env", Path::new("/h/u/p"), home),
            Some(PathBuf::from("/h/u/p/b.env"))
        );
        let planned = plan(
            &policy(),
            &Mem::default()
                .file("/h/u/p/.git/config", "[include]\n\tpath = ../.gitshared\n")
                .file("/h/u/p/.git/HEAD", "")
                .file("/h/u/p/.gitshared", "[include] path = /etc/outside\n")
                .file("/h/u/p/.envrc", "source_env .envrc.local\ndotenv\n")
                .file("/h/u/p/.envrc.local", "")
                .file("/h/u/p/mise.toml", "[env]\n_.source = \"s.sh\"\n")
                .file("/h/u/p/s.sh", ""),
        );
        let holds = held(&planned, Guard::Hold);
        for want in ["/h/u/p/.gitshared", "/h/u/p/.envrc.local", "/h/u/p/s.sh"] {
            assert!(holds.contains(&want.to_string()), "{want}: {holds:?}");
        }
        assert!(!holds.iter().any(|l| l == "/etc/outside"), "{holds:?}");
        assert!(planned.watched.contains(&PathBuf::from("/h/u/p/.env")));
        assert!(!planned.held(Path::new("/h/u/p/.env")));
    }

    #[test]
    fn a_fresh_clones_configuration_is_plain_and_an_fsmonitor_is_not() {
        let clone = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n[remote \"origin\"]\n\turl = https://example.org/x.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n";
        assert!(
            git_config_risky(clone).is_empty(),
            "{:?}",
            git_config_risky(clone)
        );
        let planted = format!(
            "{clone}[core]\n\tfsmonitor = touch /tmp/x\n[alias]\n\tst = !sh\n[remote \"origin\"]\n\tuploadpack = sh -c x\n[submodule \"s\"]\n\tupdate = !rm -rf /\n"
        );
        assert_eq!(
            git_config_risky(&planted),
            [
                "core.fsmonitor = touch /tmp/x",
                "alias.st = !sh",
                "remote.origin.uploadpack = sh -c x",
                "submodule.s.update = !rm -rf /",
            ]
        );
    }

    #[test]
    fn only_the_parts_of_claude_state_that_start_programs_are_compared() {
        let p = &[PathBuf::from("/h/u/repo/p"), PathBuf::from("/h/u/repo")];
        let before = serde_json::json!({
            "numStartups": 3,
            "projects": {"/h/u/repo": {"allowedTools": [], "lastCost": 1}},
        });
        // The user trusts the folder and approves the project's servers in
        // Claude Code's dialogs: its own state, not a plant.
        let after_use = serde_json::json!({
            "numStartups": 4,
            "projects": {"/h/u/repo": {"allowedTools": [], "lastCost": 2,
                                       "hasTrustDialogAccepted": true,
                                       "enabledMcpjsonServers": ["db"]}},
        });
        assert_eq!(
            claude_state_risky(&before, p),
            claude_state_risky(&after_use, p)
        );
        let planted = serde_json::json!({
            "numStartups": 4,
            "mcpServers": {"x": {"command": "sh"}},
            "projects": {"/h/u/repo": {"hasTrustDialogAccepted": true,
                                       "mcpServers": {"y": {"command": "sh"}}},
                         "/h/u/other": {"enableAllProjectMcpServers": true,
                                        "hasTrustDialogAccepted": true},
                         "/h/u": {"hasTrustDialogAccepted": true}},
        });
        assert_eq!(
            claude_state_risky(&planted, p),
            serde_json::json!({
                "mcpServers": {"x": {"command": "sh"}},
                "projects": {"/h/u/repo": {"mcpServers": {"y": {"command": "sh"}}},
                             "/h/u/other": {"enableAllProjectMcpServers": true,
                                            "hasTrustDialogAccepted": true},
                             "/h/u": {"hasTrustDialogAccepted": true}},
            })
        );
    }

    #[test]
    fn the_files_claude_codes_settings_run_are_read_from_its_commands() {
        let (home, project) = (Path::new("/h/u"), Path::new("/h/u/p"));
        let settings = r#"{
            "statusLine": {"type": "command", "command": "bash ~/.claude/statusline.sh --x"},
            "apiKeyHelper": "$HOME/bin/key",
            "hooks": {"PostToolUse": [{"matcher": "Edit", "hooks": [
                {"type": "command", "command": "FOO=1 \"$CLAUDE_PROJECT_DIR\"/scripts/fmt.sh && /usr/bin/true; ${HOME}/.claude/../x/y"},
                {"type": "command", "command": "nd7", "args": ["record", "/h/u/.local/bin/hook"]}
            ]}]},
            "model": "/not/a/command"
        }"#;
        let found: Vec<String> = named_programs(settings, home, project)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            found,
            [
                "/h/u/.claude/statusline.sh",
                "/h/u/.local/bin/hook",
                "/h/u/bin/key",
                "/h/u/p/scripts/fmt.sh",
                "/h/u/x/y",
                "/usr/bin/true",
            ]
        );
        assert!(named_programs("not json", home, project).is_empty());
        let state = r#"{"mcpServers": {"a": {"command": "node", "args": ["/h/u/mcp/a.js"]}},
                        "projects": {"/h/u/p": {"mcpServers": {"b": {"command": "~/mcp/b"}}}}}"#;
        assert_eq!(
            mcp_programs(state, home, project),
            [PathBuf::from("/h/u/mcp/a.js"), PathBuf::from("/h/u/mcp/b")]
        );
    }

    #[test]
    fn grants_by_path_are_planned_as_the_project_and_presets_are_not() {
        let tree = Mem::default()
            .file("/h/u/lib/.git/config", "")
            .file("/h/u/lib/.git/HEAD", "")
            .dir("/h/u/lib/.git/hooks")
            .file("/h/u/lib/.envrc", "")
            .file("/h/u/other/.git/HEAD", "")
            .dir("/h/u/other/.git/hooks")
            .dir("/h/u/.cargo/registry/src/x/.vscode")
            .file("/h/u/.claude/statusline.sh", "")
            .file(
                "/h/u/.claude/settings.json",
                r#"{"statusLine": {"command": "~/.claude/statusline.sh"}}"#,
            )
            .dir("/h/u/p");
        let mut policy = policy();
        policy.grants = vec![
            "/h/u/lib".into(),
            "/h/u/.cargo/registry".into(),
            "/h/u/p/sub".into(),
        ];
        assert_eq!(
            grant_roots(&policy, &policy.grants),
            [PathBuf::from("/h/u/lib")]
        );
        let plan = plan(&policy, &tree);
        assert_eq!(
            plan.roots,
            [PathBuf::from("/h/u/p"), PathBuf::from("/h/u/lib")]
        );
        let holds = held(&plan, Guard::Hold);
        for want in [
            "/h/u/lib/.git/config",
            "/h/u/lib/.git/hooks",
            "/h/u/lib/.envrc",
            "/h/u/.claude/statusline.sh",
        ] {
            assert!(holds.contains(&want.to_string()), "{want}: {holds:?}");
        }
        assert!(
            !holds.iter().any(|l| l.contains(".cargo/registry")),
            "{holds:?}"
        );
        // A grant made later: planned alone, inside a git directory too.
        let later = plan_grant(Path::new("/h/u/other/.git/hooks"), &policy, &tree);
        assert_eq!(later.roots, [PathBuf::from("/h/u/other/.git/hooks")]);
        assert!(later.held(Path::new("/h/u/other/.git/hooks/pre-commit")));
        assert!(
            later
                .watched
                .contains(&PathBuf::from("/h/u/other/.git/config"))
        );
    }

    #[test]
    fn the_search_looks_for_repositories_and_listed_names() {
        for yes in [
            ".git",
            ".envrc",
            ".claude",
            ".vscode",
            ".husky",
            ".mcp.json",
        ] {
            assert!(searched_name(yes), "{yes}");
        }
        assert!(searched_name("HEAD"));
        for no in ["src", "settings.json", "claude", ".gitignore"] {
            assert!(!searched_name(no), "{no}");
        }
    }
}
