//! The command line's definition, in one place: the `nd7` binary parses it,
//! and completions are generated from it.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// What `nd7 self-update` says in a build without the `self-update` feature.
pub const NO_SELF_UPDATE: &str = "this nd7 was built without self-update (Nix, cargo install and Homebrew's --HEAD \
     build leave it off); update it the way it was installed: `brew upgrade nd7`, the flake input (or `nix profile upgrade nd7`), \
     or `cargo install --locked --path .` again in an up-to-date checkout; nothing was changed";

#[derive(Parser)]
#[command(name = "nd7", version, about = "Accountable, bounded AI coding agents")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Append one hook payload (read on stdin) to its session's log.
    ///
    /// Claude Code's hooks run it with no option, Codex's with `--agent
    /// codex`; `nd7-record`, which setup wires, is the same in a smaller
    /// binary. Always exits 0 and never writes to stdout, so it cannot change
    /// what the agent does. Problems are reported in one line on stderr. Under
    /// `nd7 run` the entry is handed to the run, which alone writes the log.
    Record {
        /// The agent whose hook this is [default: claude-code].
        #[arg(long, value_enum)]
        agent: Option<AgentName>,
        /// Set on the hooks `nd7 run` registers itself; under such a run,
        /// copies from hooks registered elsewhere are not recorded twice.
        #[arg(long, hide = true)]
        run_hook: bool,
    },
    /// Walk a session's hash chain and say what a clean chain does and does not prove.
    ///
    /// TARGET names a session as `nd7 show` takes one: an id (looked up under
    /// $XDG_STATE_HOME/nd7/sessions, default ~/.local/state/nd7/sessions), an
    /// unambiguous prefix of one (as `nd7 sessions` prints it), `last`, or a
    /// path to a session directory or its events.ndjson. Exits 0 when the chain is clean, 1 when it is
    /// broken, 2 when the log cannot be read.
    Verify {
        /// Session id, prefix, `last`, session directory or events.ndjson.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        target: Option<String>,
        /// Verify every session under the state directory.
        #[arg(long)]
        all: bool,
        /// Threads used to check a large log (default: available cores, at most 2).
        #[arg(long, value_name = "N")]
        threads: Option<usize>,
        /// Also hold Claude Code's transcripts against the session's anchors:
        /// exit 1 naming the first anchor a file contradicts (rewritten or
        /// truncated), 2 when one cannot be read or none is anchored.
        #[arg(long, conflicts_with = "all")]
        transcript: bool,
    },
    Sessions(SessionsArgs),
    Show(ShowArgs),
    Search(SearchArgs),
    /// Register the recorder (nd7-record) with the agents found here, and install completions.
    ///
    /// The hooks run the nd7-record beside this nd7 (`nd7 record` where there
    /// is none), and older `nd7 record` hooks are moved to it.
    /// Claude Code: one exec-form hook entry per recorded event (all but
    /// MessageDisplay and PostToolBatch) in its user settings. Codex, when
    /// `codex` is on PATH or $CODEX_HOME (~/.codex) exists: one command hook
    /// per event in $CODEX_HOME/hooks.json, or in config.toml's [hooks] where
    /// the user keeps them there; Codex runs them once trusted in /hooks.
    /// Every other key and hook is kept; running it again changes nothing.
    /// Exits 0 when done, 1 when a settings file is not valid JSON or TOML
    /// (it is left untouched), 2 on other errors.
    Setup {
        /// Set up this agent only [default: every agent found; Claude Code always].
        #[arg(long, value_enum)]
        agent: Option<AgentName>,
        #[command(flatten)]
        target: SetupTarget,
        /// Remove nd7's entries (and only those) and the completions setup installed.
        #[arg(long)]
        uninstall: bool,
    },
    /// Take out what `nd7 setup` put in: the same as `nd7 setup --uninstall`.
    ///
    /// nd7's hook entries (and only those), the completions, the ship timer,
    /// and `~/.claude.json` moved back. The logs stay. Exits as setup does.
    Uninstall {
        /// Take it out of this agent's settings only [default: every agent's].
        #[arg(long, value_enum)]
        agent: Option<AgentName>,
        #[command(flatten)]
        target: SetupTarget,
    },
    Run(RunArgs),
    /// Let a running nd7 run's Bash commands write under PATH, from the next command.
    ///
    /// PATH is resolved to its real form when it is granted, following no
    /// link in a directory your account can change (an agent could have
    /// placed it: name the real place instead); `~` stands for your home
    /// even when quoted, and a directory that does not exist yet is created.
    /// Nothing under ~/.nd7, in a credential store, / or above your home can
    /// be allowed. For every run, name it in ~/.nd7/grants instead. Exits 0
    /// when PATH is allowed (newly or already), 2 otherwise.
    Allow {
        /// The run: the pid `nd7 run` announced. Needed only when several
        /// run; they are listed then.
        #[arg(long, value_name = "PID", alias = "session")]
        run: Option<u32>,
        /// Allow a toolchain's caches instead of PATH (npm, pnpm, yarn, cargo, pip,
        /// uv, python-user, go, maven, gradle).
        #[arg(long, value_name = "NAME", conflicts_with = "path")]
        preset: Option<String>,
        /// Let the agent reach a host instead, from its next connection:
        /// HOST, *.DOMAIN, HOST:PORT or an IP address (docs/sandbox.md).
        #[arg(long, value_name = "HOST", conflicts_with_all = ["path", "preset"])]
        net: Option<String>,
        /// The directory (or file) commands may write.
        #[arg(required_unless_present_any = ["preset", "net"], allow_hyphen_values = false)]
        path: Option<PathBuf>,
    },
    /// Take back a grant of `nd7 allow` (or of ~/.nd7/grants), from the next command.
    ///
    /// PATH finds the grant by the name it was made with, the path it
    /// resolved to, or the directory it leads to now (through no link in a
    /// directory your account can change); a path that no longer resolves
    /// is taken as written. When PATH names no grant, the run's grants are
    /// listed. Exits 0 when PATH is not (or no longer) a grant, 2 otherwise.
    Deny {
        /// The run: the pid `nd7 run` announced. Needed only when several
        /// run; they are listed then.
        #[arg(long, value_name = "PID", alias = "session")]
        run: Option<u32>,
        /// Take back every path of a preset instead of PATH.
        #[arg(long, value_name = "NAME", conflicts_with = "path")]
        preset: Option<String>,
        /// Take back a host the agent may reach, from its next connection.
        #[arg(long, value_name = "HOST", conflicts_with_all = ["path", "preset"])]
        net: Option<String>,
        /// The grant to take back.
        #[arg(required_unless_present_any = ["preset", "net"])]
        path: Option<PathBuf>,
    },
    /// Tell the model when nd7's sandbox refused a tool call (a Claude Code hook).
    ///
    /// Reads a PostToolUse or PostToolUseFailure payload on stdin; under
    /// `nd7 run`, asks the run whether the floor refused a path the tool
    /// named and, if so, prints the hook reply that tells the model which,
    /// and the `nd7 allow` the user could run. Always exits 0. `nd7 run`
    /// registers it.
    #[command(hide = true)]
    HookExplain,
    /// Send a Codex shell call through nd7's exit (a Codex hook).
    ///
    /// Reads a PreToolUse payload on stdin; under `nd7 run codex`, for a shell
    /// call, prints the reply that runs the command as `nd7-exec '<command>'`,
    /// under the session's current grants. Always exits 0. `nd7 run` registers
    /// it.
    #[command(hide = true)]
    HookRoute,
    /// Say what is installed and working, and the command that fixes what is not.
    ///
    /// Checks each agent's hooks (for Codex, also whether they are trusted),
    /// the sandbox, the logs and the vault. Exits 0 when every check passes,
    /// 1 otherwise. Changes nothing.
    Doctor {
        /// Settings file to check [default: ~/.claude/settings.json].
        #[arg(long, value_name = "FILE")]
        settings: Option<PathBuf>,
    },
    /// Enrol this machine with a vault: make its key, register it, pin the admins.
    ///
    /// Fetches the vault's recipients document and refuses it unless the
    /// organisation key with fingerprint FP signed it, then makes an Ed25519
    /// machine key and has the one-time TOKEN endorse it. Writes
    /// $XDG_STATE_HOME/nd7/vault/ (machine.key, machine.id, server,
    /// recipients; every file 0600). Exits 0 when enrolled, 1 when the vault
    /// or its document was refused or refused us, 2 on other errors.
    /// (`nd7-vault team` prints this command whole for each machine.)
    #[command(alias = "enrol")]
    Enroll {
        /// The vault's base URL, e.g. https://vault.example.org.
        url: String,
        /// The enrolment token from `nd7 admin enroll-token`.
        #[arg(long, value_name = "T")]
        token: String,
        /// The organisation key's fingerprint (64 hex digits), from `nd7 admin org-key`.
        #[arg(long, value_name = "FP")]
        fingerprint: String,
        /// Trust only the CA certificate(s) in FILE (PEM) for the vault's
        /// HTTPS, now and for every ship after (kept as vault/ca.pem).
        /// Without it: SSL_CERT_FILE if set, else the Mozilla roots.
        #[arg(long, value_name = "FILE")]
        ca_cert: Option<PathBuf>,
    },
    /// Ship every session's unshipped entries to the vault, encrypted.
    ///
    /// Verifies the entries after each session's `shipped` mark, sends them in
    /// batches of at most 8 MiB, and moves the mark after each acknowledgement.
    /// A run that is interrupted resumes where the vault's copy ends. Exits 0
    /// when everything was shipped, 1 when some session was not (each is
    /// named on stderr), 2 when the machine is not enrolled or on other
    /// errors, 3 when the vault broke a receipt for some session.
    Ship {
        /// Ship again every DURATION (e.g. 30s, 5m, 1h) until killed.
        #[arg(long, value_name = "DURATION")]
        every: Option<String>,
    },
    /// Replace nd7, nd7-exec and nd7-record with a newer signed release (release builds).
    ///
    /// Fetches the release's manifest and signature, checks them against the
    /// release key built into nd7, the target and each binary's BLAKE3, and
    /// only then replaces nd7-exec, nd7-record and nd7 beside the running
    /// one. A release that is not newer than this nd7 replaces nothing unless
    /// --allow-downgrade is given. A build without self-update (Homebrew,
    /// Nix, cargo install) says how to update it instead. Exits 0 when every
    /// binary was replaced, 2 otherwise.
    SelfUpdate {
        /// Where the release is published [default: nd7's GitHub releases].
        #[arg(long, value_name = "URL")]
        from: Option<String>,
        /// Install the release even when it is not newer than this nd7 (an
        /// older signed release may bring back a fixed flaw).
        #[arg(long)]
        allow_downgrade: bool,
    },
    /// Admin tools: keys, the recipients document, and reading a vault back.
    #[command(subcommand)]
    Admin(Admin),
    /// Print a shell completion script.
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print nd7's manual page, nd7(1), in roff (`nd7 man | man -l -`).
    ///
    /// Generated from this command line; releases and packages install it as
    /// nd7.1.
    Man,
}

/// nd7's manual page, nd7(1), in roff: every command's help, from [`Cli`].
pub fn man_page() -> Vec<u8> {
    use clap::CommandFactory;
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .expect("writing to a Vec cannot fail");
    out
}

/// List the recorded sessions, newest first: when, how long, how many
/// tool calls and failures, whether under `nd7 run`, the chain, shipped.
///
/// Reads no whole log: per-session summaries are kept in
/// $XDG_STATE_HOME/nd7/index, checked against each log's file facts and
/// brought up to date from what was appended. CHAIN is what the last
/// `nd7 verify` (or `nd7 show`, or --verify here) found while the log was
/// as it is now; when at most 200 sessions are listed, the newest
/// unchecked chains, up to 16 MiB of logs, are checked on the way
/// (--verify checks them all); "unchecked" otherwise.
/// Exits 0, or 2 when the state directory cannot be read or an argument is
/// wrong.
#[derive(clap::Args)]
pub struct SessionsArgs {
    /// Only sessions whose project (working directory) is DIR or under it.
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Only sessions that started at or after WHEN (2026-11-30, "2026-11-30 14:00", 2h, 3d, yesterday).
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only sessions that started at or before WHEN.
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,
    /// Only sessions with a failed tool call.
    #[arg(long)]
    pub failed: bool,
    /// Only sessions with a refused tool call (by nd7's sandbox or by
    /// Claude Code's permissions).
    #[arg(long)]
    pub refused: bool,
    /// Verify every listed session whose chain is unchecked first, however
    /// large (without it, only up to 16 MiB of logs are).
    #[arg(long)]
    pub verify: bool,
    /// Check no chain: CHAIN says only what earlier checks found.
    #[arg(long, conflicts_with = "verify")]
    pub no_verify: bool,
    /// Only the sessions' ids, one a line (what completion offers).
    #[arg(long, hide = true, conflicts_with = "json")]
    pub ids: bool,
    /// One JSON object per session (NDJSON).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub view: View,
}

/// Show a session as a timeline: prompts, each tool call with its result,
/// failures and refusals marked, subagents nested, the end, the chain.
///
/// SESSION is an id, an unambiguous prefix of one, `last` (the session
/// that started last), or a path to a session directory or its
/// events.ndjson (such as one written by `nd7 admin pull --out`). The
/// chain is verified as `nd7 verify` does while the timeline is read.
/// Exits 0 when the chain is clean, 1 when it is broken (the timeline is
/// still shown), 2 when the session cannot be found or read.
#[derive(clap::Args)]
pub struct ShowArgs {
    /// Session id, prefix, `last`, or a path.
    pub session: String,
    /// Every line of every output and prompt, and every entry nd7 wrote
    /// about a call (`exec`, `exec_end`, `floor_refused`, transcript anchors),
    /// which the default view folds into the call's row.
    #[arg(long)]
    pub full: bool,
    /// Every program the observer saw run (`nd7 run` on Linux), one line
    /// each with its arguments, beside the collapsed tree shown under each
    /// call.
    #[arg(long)]
    pub effects: bool,
    /// Only the calls that ended so: `failed`, `refused` (comma-separated).
    #[arg(
        long,
        value_name = "WHAT",
        value_delimiter = ',',
        conflicts_with = "html"
    )]
    pub only: Vec<Only>,
    /// The same timeline as NDJSON: a session object, one object per
    /// item, then the chain's verdict.
    #[arg(long, conflicts_with = "html")]
    pub json: bool,
    /// One self-contained HTML file (no scripts, nothing loaded) on stdout.
    #[arg(long)]
    pub html: bool,
    #[command(flatten)]
    pub view: View,
}

/// Added to clap's bash script: session ids (and `last`) where `nd7 show`
/// and `nd7 verify` take a session, from `nd7 sessions --ids`; clap's own
/// completion everywhere else.
const BASH_SESSIONS: &str = r#"
# nd7's addition: session ids for `nd7 show` and `nd7 verify` (`nd7 sessions --ids`).
_nd7_sessions() {
    local i cmd=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in -*) ;; *) cmd="${COMP_WORDS[i]}"; break ;; esac
    done
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    case "$prev" in --only|--color|--threads) cmd="" ;; esac
    if [[ ( "$cmd" == show || "$cmd" == verify ) && "$cur" != -* ]]; then
        COMPREPLY=( $(compgen -W "last $("${COMP_WORDS[0]}" sessions --ids 2>/dev/null)" -- "$cur") )
        return 0
    fi
    _nd7 "$@"
}
complete -F _nd7_sessions -o bashdefault -o default nd7
"#;

/// What `nd7 show --only` keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Only {
    Failed,
    Refused,
}

/// Search what sessions say: commands, file paths, prompts, outputs and
/// messages (never the JSON around them), with each hit's session and time.
///
/// PATTERN is a regular expression (Rust regex syntax, as ripgrep's),
/// matched within one line of a field. Hits are printed oldest first.
/// Exits 0 when something matched, 1 when nothing did, 2 on a bad pattern
/// or a log that could not be read.
#[derive(clap::Args)]
pub struct SearchArgs {
    pub pattern: String,
    /// Only entries about this tool (Bash, Write, Read, ...), any case.
    #[arg(long, value_name = "NAME")]
    pub tool: Option<String>,
    /// Only sessions whose project (working directory) is DIR or under it.
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Only entries recorded at or after WHEN (2026-11-30, 2h, 3d, yesterday).
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only entries recorded at or before WHEN.
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,
    /// Match case-insensitively.
    #[arg(short = 'i', long)]
    pub ignore_case: bool,
    /// PATTERN is a literal string, not a regular expression.
    #[arg(short = 'F', long)]
    pub fixed_strings: bool,
    /// One JSON object per hit (NDJSON).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub view: View,
}

/// How the reading commands show what they print.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct View {
    /// Colour: auto (on a terminal, unless NO_COLOR is set), always, never.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = Color::Auto)]
    pub color: Color,
    /// Never page (by default a terminal gets $ND7_PAGER, $PAGER or `less -FRX`).
    #[arg(long)]
    pub no_pager: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Color {
    Auto,
    Always,
    Never,
}

/// `nd7 admin ...`. Exit status: 0 success; 1 the machine rewrote its log;
/// 2 bad usage or errors; 3 the vault's copy is forged or incomplete.
#[derive(Subcommand)]
pub enum Admin {
    /// Make the organisation's Ed25519 key; prints its fingerprint.
    ///
    /// The key signs recipients documents; machines pin its fingerprint at
    /// enrolment. Keep it offline.
    OrgKey {
        /// Where to write the key (0600; refuses to overwrite).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Make an admin's age identity; prints its age1... recipient.
    ///
    /// The file is what `age -d -i FILE` and `nd7 admin pull --identity` read.
    AgeKey {
        /// Where to write the identity (0600; refuses to overwrite).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Print a recipients document listing RECIPIENTS, signed by the organisation key.
    SignRecipients {
        /// The organisation key from `nd7 admin org-key`.
        #[arg(long, value_name = "FILE")]
        org_key: PathBuf,
        /// The document's version: machines take only a higher one than they hold.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        version: u64,
        /// Days the document stays valid: after that, machines start no new
        /// chain key under it, so sign and install a newer version before.
        #[arg(long, value_name = "DAYS", default_value_t = 90, value_parser = clap::value_parser!(u64).range(1..=3660))]
        valid_days: u64,
        /// Valid until this Unix time instead of for --valid-days.
        #[arg(long, value_name = "SECS", conflicts_with = "valid_days")]
        valid_until: Option<u64>,
        /// The vault's public key, as `nd7-vault key` printed it.
        #[arg(long, value_name = "HEX")]
        vault_key: String,
        /// age1... recipients, one per admin.
        #[arg(required = true)]
        recipients: Vec<String>,
    },
    /// Print a one-time enrolment token for `nd7 enroll`, signed by the organisation key.
    ///
    /// The token names the version of the recipients document given, so a
    /// machine enrolling with it refuses any older one the vault might serve.
    /// (`enrol-token`, its older spelling, still works.)
    #[command(name = "enroll-token", alias = "enrol-token")]
    EnrolToken {
        /// The organisation key from `nd7 admin org-key`.
        #[arg(long, value_name = "FILE")]
        org_key: PathBuf,
        /// The recipients document currently installed on the vault (from
        /// `nd7 admin sign-recipients`).
        #[arg(long, value_name = "FILE")]
        recipients: PathBuf,
        /// Hours until it expires.
        #[arg(long, default_value_t = 24)]
        hours: u64,
        /// Whom the token is for (a host, a person): kept in the register.
        #[arg(long, value_name = "TEXT", default_value = "")]
        label: String,
        /// The organisation's register of tokens, which this one is added to
        /// (`nd7 admin machines --register` holds the vault's machines to it)
        /// [default: the organisation key's file with `.tokens` added].
        #[arg(long, value_name = "FILE")]
        register: Option<PathBuf>,
    },
    /// List the machines a vault enrolled, by the token each used, held to
    /// the organisation's register of tokens.
    ///
    /// Each machine's enrolment record must verify against the organisation
    /// key, its token must be one the register lists (the label says whom
    /// it was for), and no token may have let in two machines. Exits 0 when
    /// every machine is accounted for, 3 when one is not.
    Machines {
        url: String,
        #[arg(long, value_name = "T")]
        read_token: String,
        /// Trust only the CA certificate(s) in FILE (PEM) for the vault's HTTPS.
        #[arg(long, value_name = "FILE")]
        ca_cert: Option<PathBuf>,
        /// The organisation key's fingerprint, from `nd7 admin org-key`.
        #[arg(long, value_name = "FP")]
        fingerprint: String,
        /// The register `nd7 admin enroll-token` wrote.
        #[arg(long, value_name = "FILE")]
        register: PathBuf,
    },
    /// List the sessions a vault holds: machine, session, last entry, held
    /// to the machines' tallies.
    ///
    /// Each machine signs a tally as it enrols and on every ship: the
    /// sessions the vault acknowledged to it, each with the vault's receipt.
    /// The list must show every session a tally's receipts acknowledge, up
    /// to the entry they name, and every enrolled machine must have a
    /// tally; the vault's key cannot sign for a machine, nor a machine's for
    /// the vault. Exits 0 when the list agrees with every tally, 3 when the
    /// vault hid or withheld something, 1 when a machine claims what the
    /// vault never signed or the list shows a session its machine's tally
    /// does not name (the findings say which).
    Sessions {
        url: String,
        /// A read token from `nd7-vault read-token`.
        #[arg(long, value_name = "T")]
        read_token: String,
        /// Trust only the CA certificate(s) in FILE (PEM) for the vault's HTTPS.
        #[arg(long, value_name = "FILE")]
        ca_cert: Option<PathBuf>,
        /// The organisation key's fingerprint, from `nd7 admin org-key`.
        #[arg(long, value_name = "FP")]
        fingerprint: String,
        /// Remember in FILE each machine and its latest tally verified, and
        /// hold the vault to it next time: a machine it stops listing, or an
        /// older tally than one seen, is the vault's doing (exit 3). Keep one
        /// per vault, in your own state directory.
        #[arg(long, value_name = "FILE")]
        seen: Option<PathBuf>,
    },
    /// Fetch a session (or every one) from the vault, decrypt it, verify it, and compare it.
    ///
    /// Checks that the machine was enrolled with a token the organisation
    /// signed and that it signed every batch, writes the decrypted log to
    /// OUT/<session>/events.ndjson and verifies its chain as `nd7 verify`
    /// does. Given --compare, checks the machine's session directory (its log
    /// and the vault's receipts it kept) against the vault's copy, and says
    /// whether the vault dropped or rewrote what it acknowledged or the
    /// machine rewrote its log, naming the entry.
    Pull {
        url: String,
        #[arg(long, value_name = "T")]
        read_token: String,
        /// Trust only the CA certificate(s) in FILE (PEM) for the vault's HTTPS.
        #[arg(long, value_name = "FILE")]
        ca_cert: Option<PathBuf>,
        /// An age identity file (`nd7 admin age-key`, or age-keygen's).
        #[arg(long, value_name = "FILE")]
        identity: PathBuf,
        /// The organisation key's fingerprint, from `nd7 admin org-key`.
        #[arg(long, value_name = "FP")]
        fingerprint: String,
        /// The machine whose sessions to pull [default: every machine's].
        #[arg(long, value_name = "ID")]
        machine: Option<String>,
        /// The session to pull [default: every session `nd7 admin sessions`
        /// lists, of --machine if given, each into OUT/<session>; the exit
        /// status is the worst of theirs and the listing's].
        #[arg(long, value_name = "ID", requires = "machine")]
        session: Option<String>,
        /// Directory to write the decrypted session into.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// A local copy (session directory or events.ndjson) to compare with.
        #[arg(long, value_name = "PATH", requires = "session")]
        compare: Option<PathBuf>,
    },
}

/// What `nd7 setup` and `nd7 uninstall` change, and whether they only say
/// what they would.
#[derive(clap::Args)]
pub struct SetupTarget {
    /// Claude Code settings file to change [default: ~/.claude/settings.json].
    #[arg(long, value_name = "FILE")]
    pub settings: Option<PathBuf>,
    /// Print what would change and write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

impl SetupTarget {
    /// The options of a setup (`uninstall`: of taking it out) for `agent`.
    pub fn options(self, agent: Option<AgentName>, uninstall: bool) -> crate::setup::Options {
        crate::setup::Options {
            agent: agent.map(AgentName::agent),
            settings: self.settings,
            dry_run: self.dry_run,
            uninstall,
        }
    }
}

/// The agents nd7 records, as `--agent` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentName {
    ClaudeCode,
    Codex,
}

impl AgentName {
    pub fn agent(self) -> crate::hook::Agent {
        match self {
            AgentName::ClaudeCode => crate::hook::Agent::ClaudeCode,
            AgentName::Codex => crate::hook::Agent::Codex,
        }
    }
}

/// Shells nd7 ships completions for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

impl Shell {
    pub const ALL: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

    /// The completion script for this shell.
    pub fn completions(self) -> Vec<u8> {
        use clap::CommandFactory;
        let mut out = Vec::new();
        let mut cmd = Cli::command();

        match self {
            Shell::Bash => {
                clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, "nd7", &mut out);
                out.extend_from_slice(BASH_SESSIONS.as_bytes());
            }
            Shell::Zsh => {
                clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, "nd7", &mut out)
            }
            Shell::Fish => {
                clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, "nd7", &mut out)
            }
        }
        out
    }

    /// The file name the script is committed under in completions/.
    /// (Bash's script ends with [`BASH_SESSIONS`].)
    pub fn file_name(self) -> &'static str {
        match self {
            Shell::Bash => "nd7.bash",
            Shell::Zsh => "_nd7",
            Shell::Fish => "nd7.fish",
        }
    }
}

/// Run PROGRAM and everything it starts under the sandbox floor.
///
/// Reads everywhere but the credential stores and ~/.nd7; writes only to
/// the working directory (the project), the temp directory and Claude
/// Code's own state. Bash commands may also write what ~/.nd7/grants,
/// --allow and --preset grant, and what `nd7 allow` adds. For `claude`,
/// nd7-exec is Claude Code's shell prefix, so every Bash command runs under
/// the session's current rules while Claude Code's own permissions still
/// judge it, and Claude Code's own sandbox is turned off. Refuses to start
/// when the kernel cannot enforce the floor in full, when nd7's binaries
/// are writable by others, or when $HOME is not your account's home.
/// Exits with the program's status (128+N for signal N), or 2 when it did
/// not start the program.
#[derive(clap::Args)]
pub struct RunArgs {
    /// Let commands write DIR (created if it does not exist), as `nd7 allow DIR` would.
    #[arg(long = "allow", value_name = "DIR")]
    pub allow: Vec<PathBuf>,
    /// Let commands write a toolchain's caches (npm, pnpm, yarn, cargo, pip, uv,
    /// python-user, go, maven, gradle; docs/sandbox.md says what each risks), and
    /// reach its registry's hosts (npm, cargo, pip, uv, python-user, go; github
    /// brings only hosts).
    #[arg(long = "preset", value_name = "NAME")]
    pub preset: Vec<String>,
    /// `strict`: refuse to start where the kernel cannot keep the agent's
    /// network to nd7's egress proxy (`nd7 doctor` says whether it can).
    #[arg(long = "net", value_name = "MODE", value_parser = ["strict"])]
    pub net: Option<String>,
    /// The program, then its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM [ARGS]"
    )]
    pub command: Vec<OsString>,
}

/// The command line when its first word is `run`: the same program name,
/// version and `run` subcommand as [`Cli`], without the twenty other
/// subcommands clap would build before parsing (a few hundred microseconds
/// of every `nd7 run`'s start). `nd7` parses it instead of [`Cli`] then.
#[derive(Parser)]
#[command(name = "nd7", version, about = "Accountable, bounded AI coding agents")]
pub struct RunLine {
    #[command(subcommand)]
    pub command: RunOnly,
}

/// [`RunLine`]'s one subcommand.
#[derive(Subcommand)]
pub enum RunOnly {
    Run(RunArgs),
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Guards `nd7`'s parsing of a `run` line by [`RunLine`]: its `run` is
    /// [`Cli`]'s, in help (short and long), usage and version, and every
    /// line parses, or fails with the same message, alike.
    #[test]
    fn the_run_line_alone_is_the_full_lines_run() {
        let mut full = Cli::command();
        let mut alone = RunLine::command();
        full.build();
        alone.build();
        let run = |c: &mut clap::Command| c.find_subcommand_mut("run").expect("run").clone();
        let (mut f, mut a) = (run(&mut full), run(&mut alone));
        assert!(
            f.get_about()
                .is_some_and(|t| t.to_string().starts_with("Run PROGRAM"))
        );
        assert_eq!(
            f.render_long_help().to_string(),
            a.render_long_help().to_string()
        );
        assert_eq!(f.render_help().to_string(), a.render_help().to_string());
        assert_eq!(f.render_usage().to_string(), a.render_usage().to_string());
        assert_eq!(full.render_version(), alone.render_version());
        let lines: &[&[&str]] = &[
            &["nd7", "run", "claude"],
            &[
                "nd7", "run", "--allow", "/d", "--preset", "npm", "claude", "--allow", "-x",
            ],
            &["nd7", "run", "--", "--allow"],
            &["nd7", "run"],
            &["nd7", "run", "--allow"],
            &["nd7", "run", "--bogus", "x"],
            &["nd7", "run", "--help"],
            &["nd7", "run", "-h"],
        ];
        for line in lines {
            let f = Cli::try_parse_from(*line).map(|c| match c.command {
                Command::Run(r) => format!("{:?} {:?} {:?}", r.allow, r.preset, r.command),
                _ => "another subcommand".to_string(),
            });
            let a = RunLine::try_parse_from(*line).map(|c| {
                let RunOnly::Run(r) = c.command;
                format!("{:?} {:?} {:?}", r.allow, r.preset, r.command)
            });
            match (f, a) {
                (Ok(f), Ok(a)) => assert_eq!(f, a, "{line:?}"),
                (Err(f), Err(a)) => {
                    assert_eq!(f.kind(), a.kind(), "{line:?}");
                    assert_eq!(f.render().to_string(), a.render().to_string(), "{line:?}");
                }
                (f, a) => panic!("{line:?}: {:?} against {:?}", f.is_ok(), a.is_ok()),
            }
        }
    }
}
