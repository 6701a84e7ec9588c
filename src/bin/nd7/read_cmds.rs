//! `nd7 sessions`, `nd7 show` and `nd7 search`: arguments in, the library's
//! views out, and every exit status.
//!
//! - sessions: 0 listed (none is fine); 2 the state directory or an argument is wrong.
//! - show: 0 shown and the chain is clean; 1 shown and the chain is broken;
//!   2 not found, ambiguous, unreadable, or a bad argument.
//! - search: 0 something matched; 1 nothing did; 2 a bad pattern or argument,
//!   or a log that could not be read.
//!
//! A reader that goes away (a pager quit, `| head`) ends the output quietly,
//! with the status the command had reached.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use jiff::tz::TimeZone;
use nd7_core::cli::{Color, Only, SearchArgs, SessionsArgs, ShowArgs, View};
use nd7_core::read::ReadError;
use nd7_core::read::index::{Index, LogKeys};
use nd7_core::read::output::{ColourChoice, Output, Stopped};
use nd7_core::read::report::{Chain, SessionInfo};
use nd7_core::read::safe::Lines;
use nd7_core::read::search::{Filter, Hit, Options, Pattern};
use nd7_core::read::store::{self, Located, Store};
use nd7_core::read::text::{self, Style};
use nd7_core::read::timeline::{Item, ObservedClass, Status};
use nd7_core::read::{html, when};
use nd7_core::session_log::{SessionLog, Verified, VerifyError};

const USAGE_ERROR: u8 = 2;

/// How many bytes of unchecked logs `nd7 sessions` verifies on its own
/// (newest first): a few milliseconds' work, so CHAIN says clean or BROKEN
/// rather than "unchecked" for ordinary sessions.
const CHEAP_VERIFY: u64 = 16 * 1024 * 1024;
/// Above this many sessions listed, `nd7 sessions` checks none on its own.
const CHEAP_VERIFY_ROWS: usize = 200;

fn choice(view: &View) -> ColourChoice {
    match view.color {
        Color::Auto => ColourChoice::Auto,
        Color::Always => ColourChoice::Always,
        Color::Never => ColourChoice::Never,
    }
}

/// Prints a problem on stderr. Messages can quote session ids and paths,
/// which come from payloads, so they are made inert like everything else.
fn warn(cmd: &str, e: impl std::fmt::Display) {
    eprintln!(
        "nd7 {cmd}: {}",
        nd7_core::read::safe::term(&e.to_string(), Lines::One)
    );
}

/// [`warn`], and the exit status of a command that could not do its work.
pub(crate) fn fail(cmd: &str, e: impl std::fmt::Display) -> ExitCode {
    warn(cmd, e);
    ExitCode::from(USAGE_ERROR)
}

fn home() -> Option<String> {
    nd7_core::home::env_home().map(|h| h.display().to_string())
}

/// Writes `lines`; a reader gone is not an error.
fn finish(cmd: &str, out: Output, code: ExitCode) -> ExitCode {
    match out.finish() {
        Ok(()) | Err(Stopped::Gone) => code,
        Err(Stopped::Failed(e)) => fail(cmd, format!("cannot write the output: {e}")),
    }
}

/// `--since`/`--until` as nanoseconds.
fn when_arg(
    cmd: &str,
    flag: &str,
    text: Option<&str>,
    tz: &TimeZone,
) -> Result<Option<u64>, ExitCode> {
    text.map(|t| when::parse(t, jiff::Timestamp::now(), tz))
        .transpose()
        .map_err(|e| fail(cmd, format!("{flag}: {e}")))
}

/// `--since` and `--until` as [`when_arg`] reads them, each said when bad.
fn window(
    cmd: &str,
    since: Option<&str>,
    until: Option<&str>,
    tz: &TimeZone,
) -> Result<(Option<u64>, Option<u64>), ExitCode> {
    match (
        when_arg(cmd, "--since", since, tz),
        when_arg(cmd, "--until", until, tz),
    ) {
        (Ok(s), Ok(u)) => Ok((s, u)),
        (Err(code), _) | (_, Err(code)) => Err(code),
    }
}

/// DIR as an absolute path, resolved when it exists.
fn project_arg(dir: &Path) -> Vec<PathBuf> {
    let mut forms = Vec::new();
    if let Ok(abs) = std::path::absolute(dir) {
        forms.push(abs);
    }
    if let Ok(real) = std::fs::canonicalize(dir)
        && !forms.contains(&real)
    {
        forms.push(real);
    }
    forms
}

fn in_project(project: Option<&str>, dirs: &[PathBuf]) -> bool {
    project.is_some_and(|p| dirs.iter().any(|d| Path::new(p).starts_with(d)))
}

pub fn sessions(a: SessionsArgs) -> ExitCode {
    let cmd = "sessions";
    let tz = TimeZone::system();
    let window = match window(cmd, a.since.as_deref(), a.until.as_deref(), &tz) {
        Ok(w) => w,
        Err(code) => return code,
    };
    let store = match Store::open() {
        Ok(s) => s,
        Err(e) => return fail(cmd, e),
    };
    let mut index = Index::load(&store.state);
    let (mut rows, problems) = match store.list(&mut index) {
        Ok(r) => r,
        Err(e) => return fail(cmd, e),
    };
    for p in &problems {
        warn(cmd, p);
    }
    keep_asked(&mut rows, &a, window);
    rows.sort_by(|x, y| (y.summary.first_ts, &y.id).cmp(&(x.summary.first_ts, &x.id)));
    if a.ids {
        return list_ids(&rows, &mut index);
    }
    verify_cheap(&store, &mut rows, &mut index, &a);
    if let Err(e) = index.save() {
        warn(cmd, format!("warning: cannot keep the session index: {e}"));
    }
    let mut out = Output::open(!a.json && !a.view.no_pager, choice(&a.view));
    let written = write_sessions(&mut out, &a, &store, &tz, &rows);
    let code = if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(USAGE_ERROR)
    };
    match written {
        Ok(()) => finish(cmd, out, code),
        Err(Stopped::Gone) => code,
        Err(Stopped::Failed(e)) => fail(cmd, format!("cannot write the output: {e}")),
    }
}

/// The sessions as JSON lines, or as a table for a person.
fn write_sessions(
    out: &mut Output,
    a: &SessionsArgs,
    store: &Store,
    tz: &TimeZone,
    rows: &[SessionInfo],
) -> Result<(), Stopped> {
    let style = Style {
        colour: out.colour && !a.json,
    };
    if a.json {
        rows.iter()
            .try_for_each(|r| out.line(&r.json().to_string()))
    } else if rows.is_empty() {
        out.line(&format!("no sessions under {}", store.sessions.display()))
    } else {
        text::sessions_table(rows, tz, home().as_deref(), style)
            .iter()
            .try_for_each(|l| out.line(l))
    }
}

/// Keeps the sessions `nd7 sessions`' arguments ask for: in the project,
/// started within the window (`--since`, `--until`), with a failure or a
/// refusal if asked.
fn keep_asked(rows: &mut Vec<SessionInfo>, a: &SessionsArgs, window: (Option<u64>, Option<u64>)) {
    let (since, until) = window;
    let dirs = a.project.as_deref().map(project_arg);
    rows.retain(|r| {
        let s = &r.summary;
        dirs.as_ref()
            .is_none_or(|d| in_project(s.project.as_deref(), d))
            && since.is_none_or(|t| s.first_ts.is_some_and(|f| f >= t))
            && until.is_none_or(|t| s.first_ts.is_some_and(|f| f <= t))
            && (!a.failed || s.failures > 0)
            && (!a.refused || s.all_refusals() > 0)
    });
}

/// `nd7 sessions --ids`, for completion: ids only, checking nothing. Ids
/// come from payloads: one line each, inert.
fn list_ids(rows: &[SessionInfo], index: &mut Index) -> ExitCode {
    let mut out = Output::open(false, ColourChoice::Never);
    let written = rows
        .iter()
        .try_for_each(|r| out.line(&nd7_core::read::safe::term(&r.id, Lines::One)));
    let _ = index.save();
    match written {
        Ok(()) => finish("sessions", out, ExitCode::SUCCESS),
        Err(_) => ExitCode::SUCCESS,
    }
}

/// Unchecked chains are checked when that is cheap: all of them with
/// --verify, else the newest while their logs add up to CHEAP_VERIFY.
fn verify_cheap(store: &Store, rows: &mut [SessionInfo], index: &mut Index, a: &SessionsArgs) {
    let mut budget = match (a.verify, a.no_verify) {
        (true, _) => u64::MAX,
        (false, true) => 0,
        // A long list stays a list of stats (and its index is not
        // rewritten for verdicts on every listing).
        (false, false) if rows.len() > CHEAP_VERIFY_ROWS => 0,
        (false, false) => CHEAP_VERIFY,
    };
    for row in rows.iter_mut().filter(|r| r.chain == Chain::NotChecked) {
        let Ok(log) = store.log(&row.id) else {
            continue;
        };
        let size = std::fs::metadata(log.events_path()).map_or(u64::MAX, |m| m.len());
        if size > budget || budget == 0 {
            continue;
        }
        budget -= size;
        row.chain = store::verify(&log, default_threads(), Some(index));
    }
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
}

pub fn show(a: ShowArgs) -> ExitCode {
    let cmd = "show";
    let tz = TimeZone::system();
    let store = match Store::open() {
        Ok(s) => s,
        Err(e) => return fail(cmd, e),
    };
    let mut index = Index::load(&store.state);
    let at = match store.resolve(&a.session, &mut index) {
        Ok(at) => at,
        Err(e) => return fail(cmd, e),
    };
    let mut info = match store.info(&at, &mut index) {
        Ok(i) => i,
        Err(e) => return fail(cmd, e),
    };
    let page = !a.json && !a.html && !a.view.no_pager;
    let mut out = Output::open(page, choice(&a.view));
    let style = Style {
        colour: out.colour && !a.json && !a.html,
    };
    let result = if a.html {
        show_html(&at, &mut info, &tz, &mut out)
    } else if a.json {
        show_json(&at, &info, &a.only, &mut out)
    } else {
        show_text(&at, &info, &a, &tz, style, &mut out)
    };
    let (chain, keys, written) = match result {
        Err(e) => return fail(cmd, e),
        Ok(None) => return ExitCode::SUCCESS,
        Ok(Some(done)) => done,
    };
    if at.in_state
        && let Some(keys) = keys
    {
        index.remember(&at.log, keys, &chain);
    }
    let _ = index.save();
    let code = chain_status(&chain);
    match written {
        Ok(()) => finish(cmd, out, code),
        Err(Stopped::Gone) => code,
        Err(Stopped::Failed(e)) => fail(cmd, format!("cannot write the output: {e}")),
    }
}

/// What showing a session came to: the chain's verdict, the file facts it
/// was reached on, and whether the output was all written. `None` when the
/// reader went away before the chain's verdict.
type Shown = Option<(Chain, Option<LogKeys>, Result<(), Stopped>)>;

/// `nd7 show --html`: the page, written once the whole timeline is read
/// and the chain's verdict is in.
fn show_html(
    at: &Located,
    info: &mut SessionInfo,
    tz: &TimeZone,
    out: &mut Output,
) -> Result<Shown, ReadError> {
    let mut items = Vec::new();
    let read = store::read_timeline(&at.log, |item| {
        items.push(item);
        true
    });
    read.map(|done| {
        done.map(|(chain, keys)| {
            info.chain = chain.clone();
            let page = html::report(
                info,
                &items,
                tz,
                u64::try_from(jiff::Timestamp::now().as_nanosecond()).unwrap_or(0),
                env!("CARGO_PKG_VERSION"),
            );
            let written = out.bytes(page.as_bytes());
            (chain, keys, written)
        })
    })
}

/// `nd7 show --json`: the session's facts, each item kept, then the
/// chain's verdict, one JSON object a line.
fn show_json(
    at: &Located,
    info: &SessionInfo,
    only: &[Only],
    out: &mut Output,
) -> Result<Shown, ReadError> {
    let mut head = info.json();
    if let Some(o) = head.as_object_mut() {
        o.remove("chain");
    }
    let mut written = out.line(&head.to_string());
    let read = store::read_timeline(&at.log, |item| {
        if !kept(only, &item) {
            return true;
        }
        written = written
            .take_ok()
            .and_then(|()| match serde_json::to_string(&item) {
                Ok(line) => out.line(&line),
                Err(e) => Err(Stopped::Failed(std::io::Error::other(e))),
            });
        written.is_ok()
    });
    read.map(|done| match done {
        Some((chain, keys)) => {
            let mut verdict = chain.json();
            if let Some(o) = verdict.as_object_mut() {
                o.insert("type".into(), "chain".into());
            }
            let written = written.and_then(|()| out.line(&verdict.to_string()));
            Some((chain, keys, written))
        }
        // Writing stopped: `written` says why.
        None => Some((Chain::NotChecked, None, written)),
    })
}

/// `nd7 show`: the header, each item kept as the terminal view draws it,
/// then the chain's verdict.
fn show_text(
    at: &Located,
    info: &SessionInfo,
    a: &ShowArgs,
    tz: &TimeZone,
    style: Style,
    out: &mut Output,
) -> Result<Shown, ReadError> {
    let home = home();
    let mut written = text::header(info, tz, home.as_deref(), style)
        .iter()
        .try_for_each(|l| out.line(l))
        .and_then(|()| out.line(""));
    let mut view = text::Timeline::new(tz, style, a.full);
    view.effects = a.effects;
    let read = store::read_timeline(&at.log, |item| {
        if !kept(&a.only, &item) {
            return true;
        }
        written = written
            .take_ok()
            .and_then(|()| view.item(&item).iter().try_for_each(|l| out.line(l)));
        written.is_ok()
    });
    read.map(|done| match done {
        Some((chain, keys)) => {
            let written = written.and_then(|()| {
                out.line("")?;
                text::verdict(&chain, style)
                    .iter()
                    .try_for_each(|l| out.line(l))
            });
            Some((chain, keys, written))
        }
        None => Some((Chain::NotChecked, None, written)),
    })
}

/// `nd7 show`'s exit status for the chain's verdict; an unreadable chain
/// is said on stderr.
fn chain_status(chain: &Chain) -> ExitCode {
    match chain {
        Chain::Clean { .. } | Chain::NotChecked => ExitCode::SUCCESS,
        Chain::Broken { .. } => ExitCode::from(1),
        Chain::Unreadable { detail } => {
            warn("show", format!("the chain could not be checked: {detail}"));
            ExitCode::from(USAGE_ERROR)
        }
    }
}

/// Whether `nd7 show --only` keeps `item`: with nothing asked for, all.
fn kept(only: &[Only], item: &Item) -> bool {
    let failed = only.contains(&Only::Failed);
    let refused = only.contains(&Only::Refused);
    only.is_empty()
        || match item {
            Item::Tool(t) => match t.status {
                Status::Failed | Status::Interrupted => failed,
                Status::Refused => refused,
                Status::Ok | Status::NoResult => false,
            },
            Item::Refusal(_) => refused,
            Item::Observed(o) => refused && o.class == ObservedClass::Refusal && !o.folded,
            _ => false,
        }
}

/// `Result::take` for the write status carried through a closure.
trait TakeOk {
    fn take_ok(&mut self) -> Result<(), Stopped>;
}

impl TakeOk for Result<(), Stopped> {
    fn take_ok(&mut self) -> Result<(), Stopped> {
        std::mem::replace(self, Ok(()))
    }
}

pub fn search(a: SearchArgs) -> ExitCode {
    let cmd = "search";
    let tz = TimeZone::system();
    let (since, until) = match window(cmd, a.since.as_deref(), a.until.as_deref(), &tz) {
        Ok(w) => w,
        Err(code) => return code,
    };
    let pattern = match search_pattern(&a) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let store = match Store::open() {
        Ok(s) => s,
        Err(e) => return fail(cmd, e),
    };
    let (ids, _) = match store.ids() {
        Ok(ids) => ids,
        Err(e) => return fail(cmd, e),
    };
    let logs: Vec<SessionLog> = ids.iter().filter_map(|id| store.log(id).ok()).collect();
    let (logs, mut errors) = match &a.project {
        Some(dir) => logs_in_project(&store, logs, dir),
        None => (logs, 0),
    };
    let filter = Filter {
        tool: a.tool.clone(),
        since,
        until,
    };
    let (hits, unread) = search_hits(&logs, &pattern, &filter);
    errors += unread;
    let mut out = Output::open(!a.json && !a.view.no_pager, choice(&a.view));
    let written = write_hits(&mut out, &a, &tz, &ids, &hits);
    let code = if errors > 0 {
        ExitCode::from(USAGE_ERROR)
    } else if hits.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    };
    match written {
        Ok(()) => finish(cmd, out, code),
        Err(Stopped::Gone) => code,
        Err(Stopped::Failed(e)) => fail(cmd, format!("cannot write the output: {e}")),
    }
}

/// Each hit on a line of its own: as JSON, or for a person, its session
/// named by the shortest id that tells it from the others in `ids`.
fn write_hits(
    out: &mut Output,
    a: &SearchArgs,
    tz: &TimeZone,
    ids: &[String],
    hits: &[(String, Hit)],
) -> Result<(), Stopped> {
    let short = short_ids(ids);
    let style = Style {
        colour: out.colour && !a.json,
    };
    hits.iter().try_for_each(|(session, hit)| {
        if a.json {
            return out.line(&hit_json(session, hit));
        }
        let session = short
            .get(session.as_str())
            .map_or(session.as_str(), String::as_str);
        out.line(&hit_line(style, tz, session, hit))
    })
}

/// `nd7 search`'s pattern; a bad one said on one line, with the exit status.
fn search_pattern(a: &SearchArgs) -> Result<Pattern, ExitCode> {
    let options = Options {
        ignore_case: a.ignore_case,
        fixed: a.fixed_strings,
    };
    Pattern::new(&a.pattern, options).map_err(|e| {
        // The regex crate draws the pattern and a caret over several
        // lines; a one-line message keeps its last line, the reason.
        let text = e.to_string();
        let why = text.lines().last().unwrap_or(&text);
        let why = why.trim().trim_start_matches("error: ");
        fail("search", format!("bad pattern {:?}: {why}", a.pattern))
    })
}

/// The logs of sessions in the project `dir` (or below it), with how many
/// logs could not be read (each said on stderr).
fn logs_in_project(store: &Store, logs: Vec<SessionLog>, dir: &Path) -> (Vec<SessionLog>, usize) {
    let dirs = project_arg(dir);
    let mut index = Index::load(&store.state);
    let summaries = index.refresh_all(&logs, store::threads());
    let _ = index.save();
    let mut kept = Vec::new();
    let mut errors = 0;
    for (log, s) in logs.into_iter().zip(summaries) {
        match s {
            Ok((summary, _)) if in_project(summary.project.as_deref(), &dirs) => kept.push(log),
            Ok(_) => {}
            Err(e) => {
                warn("search", e);
                errors += 1;
            }
        }
    }
    (kept, errors)
}

/// Every hit in `logs`, by time, then session, then entry, each with its
/// session's id; and how many logs could not be read (each said on stderr).
fn search_hits(
    logs: &[SessionLog],
    pattern: &Pattern,
    filter: &Filter,
) -> (Vec<(String, Hit)>, usize) {
    let results = store::search(logs, pattern, filter, store::threads());
    let mut hits = Vec::new();
    let mut errors = 0;
    for (log, result) in logs.iter().zip(results) {
        match result {
            Ok(found) => hits.extend(found.into_iter().map(|h| (log.session_id().to_string(), h))),
            Err(e) => {
                warn("search", e);
                errors += 1;
            }
        }
    }
    hits.sort_by(|(s1, h1), (s2, h2)| (h1.ts, s1, h1.seq).cmp(&(h2.ts, s2, h2.seq)));
    (hits, errors)
}

/// Each session's id shortened to the fewest characters (at least 8) that
/// tell it from the others.
fn short_ids(ids: &[String]) -> HashMap<&str, String> {
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    id_refs
        .iter()
        .copied()
        .zip(text::short_ids(&id_refs, 8))
        .collect()
}

/// A hit as one JSON object, with its session and its time.
fn hit_json(session: &str, hit: &Hit) -> String {
    let mut v = serde_json::to_value(hit).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("session".into(), session.into());
        o.insert("time".into(), when::rfc3339(hit.ts).into());
    }
    v.to_string()
}

/// A hit as one line: when, the session, the entry, what matched, and the
/// line with the match marked.
fn hit_line(style: Style, tz: &TimeZone, session: &str, hit: &Hit) -> String {
    let what = match (&hit.tool, hit.field.as_str()) {
        (Some(tool), field) => format!("{tool} {field}"),
        (None, field) => field.to_string(),
    };
    let line_no = if hit.line > 1 {
        format!(":{}", hit.line)
    } else {
        String::new()
    };
    let text = format!(
        "{}{}{}",
        style.safe(&hit.text[..hit.start], Lines::One),
        style.red(&style.safe(&hit.text[hit.start..hit.end], Lines::One)),
        style.safe(&hit.text[hit.end..], Lines::One)
    );
    format!(
        "{}  {}  {}  {}  {text}",
        style.dim(&when::date_time(hit.ts, tz)),
        style.cyan(&style.safe(session, Lines::One)),
        style.dim(&format!("#{}", hit.seq)),
        style.dim(&format!("{}{line_no}", style.safe(&what, Lines::One))),
    )
}

/// Keeps the verdicts `nd7 verify` reaches for sessions in the user's state
/// directory, so `nd7 sessions` can show them.
pub struct Verdicts {
    sessions: Option<PathBuf>,
    index: Option<Index>,
}

impl Verdicts {
    pub fn new() -> Verdicts {
        match Store::open() {
            Ok(store) => Verdicts {
                sessions: std::fs::canonicalize(&store.sessions).ok(),
                index: Some(Index::load(&store.state)),
            },
            Err(_) => Verdicts {
                sessions: None,
                index: None,
            },
        }
    }

    /// The facts of `log` to take before verifying it.
    pub fn before(log: &SessionLog) -> Option<LogKeys> {
        LogKeys::of(log).ok()
    }

    pub fn note(
        &mut self,
        log: &SessionLog,
        keys: Option<LogKeys>,
        result: &Result<Verified, VerifyError>,
    ) {
        let in_state = std::fs::canonicalize(log.dir())
            .ok()
            .and_then(|d| d.parent().map(Path::to_path_buf))
            == self.sessions;
        if let (true, Some(keys), Some(index)) = (in_state, keys, self.index.as_mut()) {
            index.remember(log, keys, &store::chain_of(result));
        }
    }

    pub fn save(mut self) {
        if let Some(index) = self.index.as_mut() {
            let _ = index.save();
        }
    }
}
