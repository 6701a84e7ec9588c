//! The terminal views: the session list, a session's header and timeline,
//! and search hits, as lines of text. Pure: every string from a log goes
//! through [`super::safe`], colour is an argument, and the time zone too.

use jiff::tz::TimeZone;

use super::report::{CAVEAT, Chain, SessionInfo};
use super::safe::{self, Lines};
use super::timeline::{
    At, Event, Item, Observed, ObservedClass, Processes, Prompt, Refusal, RefusedBy, RefusedPath,
    SessionEnd, SessionStart, Status, Subagent, SubagentEvent, Tool, TurnEnd, UnreadableLine,
};
use super::when;

/// Lines of a tool's output shown without `--full`.
pub const OUTPUT_LINES: usize = 6;
/// Characters of one output line shown without `--full`.
pub const LINE_CHARS: usize = 240;

/// Colour, or none. The only escape sequences nd7 writes are these SGR
/// codes; nothing from a log is ever passed through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    pub colour: bool,
}

impl Style {
    pub const PLAIN: Style = Style { colour: false };

    fn paint(&self, sgr: &str, text: &str) -> String {
        if self.colour && !text.is_empty() {
            format!("\x1b[{sgr}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub fn dim(&self, t: &str) -> String {
        self.paint("2", t)
    }
    pub fn bold(&self, t: &str) -> String {
        self.paint("1", t)
    }
    pub fn red(&self, t: &str) -> String {
        self.paint("1;31", t)
    }
    pub fn yellow(&self, t: &str) -> String {
        self.paint("1;33", t)
    }
    pub fn green(&self, t: &str) -> String {
        self.paint("32", t)
    }
    pub fn cyan(&self, t: &str) -> String {
        self.paint("36", t)
    }

    /// Untrusted text, made safe; escapes shown in reverse video.
    pub fn safe(&self, text: &str, lines: Lines) -> String {
        let mark = self.colour.then_some(("\x1b[7m", "\x1b[27m"));
        safe::term_marked(text, lines, mark)
    }
}

/// One path nd7's sandbox refused, in a line: what, who, why, the fix.
pub fn refused_path(p: &RefusedPath) -> String {
    format!(
        "refused by nd7's sandbox: {} ({}); {}",
        p.path,
        p.why_words(),
        p.fix_words()
    )
}

/// `text` when it fits on the item's own line: one line, not too long.
fn single_line(text: &str) -> Option<&str> {
    let t = text.trim_end_matches('\n');
    (!t.contains('\n') && t.chars().count() <= 120).then_some(t)
}

/// `n thing` or `n things` (`entry`, `entries`).
/// What a tool call's line says after its command or paths, in every view:
/// a failing exit code, the duration, the way it ran, what it is the result
/// of, and a call or result the log does not hold.
pub fn tool_facts(t: &Tool) -> Vec<String> {
    let mut facts = Vec::new();
    if let Some(code) = t.exit_code
        && (code != 0 || t.status != Status::Ok)
    {
        facts.push(format!("exit {code}"));
    }
    if let Some(ms) = t.duration_ms {
        facts.push(when::duration((ms.max(0.0) * 1e6) as u64));
    }
    if t.routed {
        facts.push("via nd7-exec".into());
    }
    if let Some(of) = t.result_of {
        facts.push(format!("result of #{of}"));
    }
    if t.call_seq.is_none() {
        facts.push("no call in the log".into());
    }
    if t.status == Status::NoResult {
        facts.push("no result in the log".into());
    }
    facts
}

pub fn count(n: u64, thing: &str) -> String {
    match (n, thing.strip_suffix('y')) {
        (1, _) => format!("1 {thing}"),
        (_, Some(stem)) => format!("{n} {stem}ies"),
        (_, None) => format!("{n} {thing}s"),
    }
}

/// The text of `text` cut to `chars` characters, with `…` when cut.
fn cut_chars(text: &str, chars: usize) -> (String, bool) {
    match text.char_indices().nth(chars) {
        Some((i, _)) => (format!("{}…", &text[..i]), true),
        None => (text.to_string(), false),
    }
}

/// `~` for the home directory at the start of a path.
pub fn tilde(path: &str, home: Option<&str>) -> String {
    match home {
        Some(h) if !h.is_empty() && h != "/" => match path.strip_prefix(h) {
            Some("") => "~".into(),
            Some(rest) if rest.starts_with('/') => format!("~{rest}"),
            _ => path.to_string(),
        },
        _ => path.to_string(),
    }
}

/// The shortest prefix of each id, at least `min` characters, that no other
/// id in `ids` shares.
pub fn short_ids(ids: &[&str], min: usize) -> Vec<String> {
    let mut sorted: Vec<(usize, &str)> = ids.iter().copied().enumerate().collect();
    sorted.sort_by(|a, b| a.1.cmp(b.1));
    let common = |a: &str, b: &str| a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    let mut out = vec![String::new(); ids.len()];
    for (k, (i, id)) in sorted.iter().enumerate() {
        let before = k.checked_sub(1).map_or(0, |p| common(sorted[p].1, id));
        let after = sorted.get(k + 1).map_or(0, |n| common(n.1, id));
        let len = (before.max(after) + 1).max(min);
        out[*i] = id.chars().take(len).collect();
    }
    out
}

/// How many calls were refused, and by whom: `3 refused (2 by Claude
/// Code's permissions, 1 by nd7)`.
pub fn refused_words(s: &super::summary::Summary) -> String {
    let all = s.all_refusals();
    let mut by = Vec::new();
    if s.permission_refusals() > 0 {
        by.push(format!(
            "{} by Claude Code's permissions",
            s.permission_refusals()
        ));
    }
    if s.nd7_refusals > 0 {
        by.push(format!("{} by nd7", s.nd7_refusals));
    }
    if by.is_empty() {
        format!("{all} refused")
    } else {
        format!("{all} refused ({})", by.join(", "))
    }
}

/// The session list's columns before the project, and which are flush right.
const SESSION_HEAD: [&str; 10] = [
    "STARTED", "DURATION", "CALLS", "FAILED", "REFUSED", "RUN", "CHAIN", "SHIPPED", "AGENT",
    "SESSION",
];
const SESSION_RIGHT: [bool; 10] = [
    false, true, true, true, true, false, false, false, false, false,
];

/// The session list, one line per session, with a header line.
pub fn sessions_table(
    rows: &[SessionInfo],
    tz: &TimeZone,
    home: Option<&str>,
    style: Style,
) -> Vec<String> {
    let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    let short = short_ids(&ids, 8);
    let cells: Vec<[String; 10]> = rows
        .iter()
        .zip(&short)
        .map(|(r, id)| session_cells(r, id, tz))
        .collect();
    let columns = Columns::fit(&cells);
    let mut out = Vec::with_capacity(rows.len() + 1);
    let mut head: Vec<String> = SESSION_HEAD
        .iter()
        .enumerate()
        .map(|(i, h)| columns.pad(h, i))
        .collect();
    head.push("PROJECT".into());
    out.push(style.bold(&head.join("  ")));
    for (row, info) in cells.iter().zip(rows) {
        out.push(session_line(&columns, row, info, home, style));
    }
    out
}

/// One session's cells under [`SESSION_HEAD`], uncoloured; `id` is its
/// shortened id.
fn session_cells(r: &SessionInfo, id: &str, tz: &TimeZone) -> [String; 10] {
    let s = &r.summary;
    [
        s.first_ts.map_or("-".into(), |t| when::date_minute(t, tz)),
        s.duration_ns().map_or("-".into(), when::duration),
        s.tool_calls.to_string(),
        s.failures.to_string(),
        s.all_refusals().to_string(),
        if s.confinement.ran_under_nd7_run() {
            "run".into()
        } else {
            "-".into()
        },
        r.chain.word().into(),
        r.shipped.words(s.entries),
        safe::term(&r.agent(), Lines::One),
        // Ids come from payloads, and a forged payload can hold anything.
        safe::term(id, Lines::One),
    ]
}

/// The session list's column widths: each its widest cell or heading.
struct Columns {
    width: [usize; 10],
}

impl Columns {
    fn fit(cells: &[[String; 10]]) -> Columns {
        let mut width = SESSION_HEAD.map(str::len);
        for row in cells {
            for (w, c) in width.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        Columns { width }
    }

    /// `text` filled out to column `i`'s width, on the side it is flush to.
    fn pad(&self, text: &str, i: usize) -> String {
        let fill = " ".repeat(self.width[i].saturating_sub(text.chars().count()));
        if SESSION_RIGHT[i] {
            format!("{fill}{text}")
        } else {
            format!("{text}{fill}")
        }
    }
}

/// One session's line: its cells padded and coloured, the project, and the
/// start of the first prompt.
fn session_line(
    columns: &Columns,
    row: &[String; 10],
    info: &SessionInfo,
    home: Option<&str>,
    style: Style,
) -> String {
    let s = &info.summary;
    let mut line: Vec<String> = Vec::with_capacity(11);
    for (i, c) in row.iter().enumerate() {
        let padded = columns.pad(c, i);
        line.push(match i {
            0 => style.dim(&padded),
            3 if s.failures > 0 => style.red(&padded),
            4 if s.all_refusals() > 0 => style.yellow(&padded),
            6 => match info.chain {
                Chain::Clean { .. } => style.green(&padded),
                Chain::Broken { .. } | Chain::Unreadable { .. } => style.red(&padded),
                Chain::NotChecked => style.dim(&padded),
            },
            9 => style.cyan(&padded),
            _ => padded,
        });
    }
    let project = s
        .project
        .as_deref()
        .map_or("-".to_string(), |p| style.safe(&tilde(p, home), Lines::One));
    line.push(project);
    if let Some(prompt) = &s.first_prompt {
        let (prompt, _) = cut_chars(prompt, 60);
        line.push(style.dim(&style.safe(&prompt, Lines::One)));
    }
    line.join("  ")
}

/// The header of `nd7 show`: who, where, when, what the log says of the sandbox.
pub fn header(info: &SessionInfo, tz: &TimeZone, home: Option<&str>, style: Style) -> Vec<String> {
    let s = &info.summary;
    let label = |l: &str| header_label(style, l);
    let mut out = vec![format!(
        "{} {}",
        style.bold("session"),
        style.cyan(&style.safe(&info.id, Lines::One))
    )];
    out.push(format!(
        "{}{}",
        label("log"),
        style.safe(&tilde(&info.log, home), Lines::One)
    ));
    if let Some(p) = &s.project {
        let host = s
            .host
            .as_deref()
            .map(|h| format!(" on {}", style.safe(h, Lines::One)))
            .unwrap_or_default();
        out.push(format!(
            "{}{}{host}",
            label("project"),
            style.safe(&tilde(p, home), Lines::One)
        ));
    }
    let model = s
        .model
        .as_deref()
        .map(|m| format!(", model {}", style.safe(m, Lines::One)))
        .unwrap_or_default();
    out.push(format!(
        "{}{}{model}",
        label("agent"),
        style.safe(&info.agent(), Lines::One)
    ));
    out.extend(started_line(s, tz, style));
    out.push(activity_line(s, style));
    out.push(format!("{}{}", label("sandbox"), info.confinement_words()));
    out.push(format!(
        "{}{}",
        label("shipped"),
        match info.shipped {
            super::report::Shipped::NotHere =>
                "a copy outside this machine's state directory (not shipped from here)".into(),
            ref other => other.words(s.entries),
        }
    ));
    out
}

/// A line's name in the header of `nd7 show`, in its column.
fn header_label(style: Style, l: &str) -> String {
    style.dim(&format!("{l:<10}"))
}

/// When the session started, how long it ran, and how it ended; `None`
/// where the log holds no time.
fn started_line(s: &super::summary::Summary, tz: &TimeZone, style: Style) -> Option<String> {
    let start = s.first_ts?;
    let mut line = format!(
        "{}{} ({})",
        header_label(style, "started"),
        when::date_time(start, tz),
        when::zone_label(start, tz)
    );
    if let Some(d) = s.duration_ns() {
        line.push_str(&format!(", {}", when::duration(d)));
    }
    match &s.ended {
        Some(e) => line.push_str(&format!(
            ", ended ({})",
            style.safe(e.reason.as_deref().unwrap_or("no reason given"), Lines::One)
        )),
        None => line.push_str(", no session end in the log"),
    }
    Some(line)
}

/// What the session did: entries, prompts, tool calls, failures, refusals.
fn activity_line(s: &super::summary::Summary, style: Style) -> String {
    let failed = if s.failures > 0 {
        style.red(&format!("{} failed", s.failures))
    } else {
        "0 failed".into()
    };
    let refused = if s.all_refusals() > 0 {
        style.yellow(&refused_words(s))
    } else {
        "0 refused".into()
    };
    format!(
        "{}{}, {}, {}, {failed}, {refused}",
        header_label(style, "activity"),
        count(s.entries, "entry"),
        count(s.prompts, "prompt"),
        count(s.tool_calls, "tool call")
    )
}

/// The chain's verdict and what it does not prove.
pub fn verdict(chain: &Chain, style: Style) -> Vec<String> {
    let label = style.dim(&format!("{:<10}", "chain"));
    let mut out = Vec::new();
    match chain {
        Chain::Clean {
            entries,
            head,
            note,
        } => {
            let head = head
                .as_deref()
                .map(|h| format!(", head {h}"))
                .unwrap_or_default();
            out.push(format!(
                "{label}{}: {entries} entries{head}",
                style.green("clean")
            ));
            if let Some(n) = note {
                out.push(format!("{:10}note: {n}", ""));
            }
            for c in CAVEAT {
                out.push(format!("{:10}{}", "", style.dim(&format!("note: {c}"))));
            }
        }
        Chain::Broken { detail } => {
            out.push(format!(
                "{label}{}: {}",
                style.red("BROKEN"),
                style.safe(detail, Lines::One)
            ));
            out.push(format!(
                "{:10}entries after the break are shown as the log holds them; nothing vouches for them",
                ""
            ));
        }
        Chain::Unreadable { detail } => out.push(format!(
            "{label}{}: {}",
            style.red("not checked"),
            style.safe(detail, Lines::One)
        )),
        Chain::NotChecked => out.push(format!("{label}not checked")),
    }
    out
}

/// The columns before an item's text: its time and entry number, and a bar
/// for each level of subagent it was recorded in.
struct Margin {
    lead: String,
    /// Where continuation lines start: under the item's text.
    body: String,
}

impl Margin {
    fn of(at: Option<&At>, tz: &TimeZone, st: Style) -> Margin {
        let (ts, seq, depth) = match at {
            Some(at) => (
                Some(at.ts),
                format!("#{}", at.seq),
                usize::from(at.agent.is_some()),
            ),
            None => (None, String::new(), 0),
        };
        let time = ts.map_or_else(|| " ".repeat(8), |t| when::time(t, tz));
        let indent = "  │ ".repeat(depth);
        let lead = format!(
            "{}  {}  {indent}",
            st.dim(&time),
            st.dim(&format!("{seq:<6}"))
        );
        let body = format!("{}{indent}", " ".repeat(8 + 2 + 6 + 2 + 2));
        Margin { lead, body }
    }
}

/// Whom what ran under a command is shown for, on a `ran` entry's row: the
/// call (its id and command) when the timeline saw it, else the command's
/// `exec` entry, or the agent itself.
pub fn processes_label(p: &Processes) -> String {
    let n = p.group.execs;
    let execs = format!("{n} exec{}", super::safe::plural(n, "", "s"));
    let whose = match (&p.call, &p.call_command, p.group.command) {
        (Some(id), Some(c), _) => format!("call {id} ($ {c})"),
        (Some(id), None, _) => format!("call {id}"),
        (None, _, Some(seq)) => format!("the command of entry {seq}"),
        (None, _, None) => return format!("without a call (the agent's own), {execs}"),
    };
    if p.group.after {
        // A process the command left behind, after its call: not what
        // the call ran (ADR-0144).
        format!("without a call, started after {whose} had ended, {execs}")
    } else {
        format!("under {whose}, {execs}")
    }
}

/// An item's word, in the column it starts with.
fn item_label(l: &str) -> String {
    format!("{l:<9}")
}

/// Renders timeline items; remembers the day, so a date line separates days.
pub struct Timeline<'a> {
    pub tz: &'a TimeZone,
    pub style: Style,
    /// Show every line of every output.
    pub full: bool,
    /// Show every exec the observer saw, one line each, and the `ran`
    /// entries folded into their calls' rows (`nd7 show --effects`).
    pub effects: bool,
    day: Option<String>,
}

impl<'a> Timeline<'a> {
    pub fn new(tz: &'a TimeZone, style: Style, full: bool) -> Timeline<'a> {
        Timeline {
            tz,
            style,
            full,
            effects: false,
            day: None,
        }
    }

    /// The lines for one item.
    pub fn item(&mut self, item: &Item) -> Vec<String> {
        let mut out = Vec::new();
        let at = item.at();
        // Even an item folded away starts its day's date line.
        if let Some(at) = at {
            out.extend(self.new_day(at.ts));
        }
        let margin = Margin::of(at, self.tz, self.style);
        match item {
            Item::SessionStart(s) => out.push(self.session_start(&margin, s)),
            Item::Prompt(p) => self.prompt(&mut out, &margin, p),
            Item::Tool(t) => self.tool(&mut out, &margin.lead, &margin.body, t),
            Item::TurnEnd(t) => self.turn_end(&mut out, &margin, t),
            Item::SessionEnd(e) => out.push(self.session_end(&margin, e)),
            Item::Subagent(s) => self.subagent(&mut out, &margin, s),
            Item::Refusal(r) => out.push(self.refusal(&margin, r)),
            Item::Observed(o) if o.folded && !self.full && !self.effects => {}
            Item::Observed(o) => self.observed(&mut out, &margin, o),
            Item::Event(e) => out.push(self.event(&margin, e)),
            Item::Unreadable(u) => out.push(self.unreadable(&margin, u)),
        }
        out
    }

    /// The date line, when `ts` falls on another day than the item before.
    fn new_day(&mut self, ts: u64) -> Option<String> {
        let day = when::date(ts, self.tz);
        if self.day.as_ref() == Some(&day) {
            return None;
        }
        let line = self.style.bold(&format!("── {day} ──"));
        self.day = Some(day);
        Some(line)
    }

    fn session_start(&self, margin: &Margin, s: &SessionStart) -> String {
        let st = self.style;
        let one = |t: &str| st.safe(t, Lines::One);
        let lead = &margin.lead;
        let mut text = format!(
            "{}session started ({})",
            st.bold(&item_label("start")),
            one(s.how.as_deref().unwrap_or("?"))
        );
        if let Some(m) = &s.model {
            text.push_str(&format!(", model {}", one(m)));
        }
        if let Some(c) = &s.cwd {
            text.push_str(&format!(" in {}", one(c)));
        }
        format!("{lead}{text}")
    }

    fn prompt(&self, out: &mut Vec<String>, margin: &Margin, p: &Prompt) {
        let st = self.style;
        let one = |t: &str| st.safe(t, Lines::One);
        let Margin { lead, body } = margin;
        match single_line(&p.text) {
            Some(line) => out.push(format!(
                "{lead}{}{}",
                st.bold(&item_label("prompt")),
                st.bold(&one(line))
            )),
            None => {
                out.push(format!("{lead}{}", st.bold(&item_label("prompt"))));
                self.block(out, body, &p.text, |l| st.bold(l));
            }
        }
    }

    fn turn_end(&self, out: &mut Vec<String>, margin: &Margin, t: &TurnEnd) {
        let st = self.style;
        let one = |t: &str| st.safe(t, Lines::One);
        let Margin { lead, body } = margin;
        match t.message.as_deref().map(|m| (m, single_line(m))) {
            Some((_, Some(line))) => out.push(format!(
                "{lead}{}{}",
                st.dim(&item_label("turn end")),
                one(line)
            )),
            Some((m, None)) => {
                out.push(format!("{lead}{}", st.dim(&item_label("turn end"))));
                self.block(out, body, m, |l| l.to_string());
            }
            None => out.push(format!("{lead}{}", st.dim(&item_label("turn end")))),
        }
    }

    fn session_end(&self, margin: &Margin, e: &SessionEnd) -> String {
        let st = self.style;
        let lead = &margin.lead;
        format!(
            "{lead}{}session ended ({})",
            st.bold(&item_label("end")),
            st.safe(e.reason.as_deref().unwrap_or("no reason given"), Lines::One)
        )
    }

    fn subagent(&self, out: &mut Vec<String>, margin: &Margin, s: &Subagent) {
        let st = self.style;
        let one = |t: &str| st.safe(t, Lines::One);
        let Margin { lead, body } = margin;
        let ty = one(s.agent_type.as_deref().unwrap_or("?"));
        let id = one(s.id.as_deref().unwrap_or("?"));
        let text = match s.event {
            SubagentEvent::Start => match &s.parent {
                Some(p) => format!("subagent {ty} ({id}) started by call {}", one(p)),
                None => format!("subagent {ty} ({id}) started"),
            },
            SubagentEvent::Stop => format!("subagent {ty} ({id}) stopped"),
        };
        out.push(format!("{lead}{}{text}", st.cyan(&item_label("agent"))));
        if let Some(m) = &s.message {
            self.block(out, body, m, |l| l.to_string());
        }
    }

    fn refusal(&self, margin: &Margin, r: &Refusal) -> String {
        let st = self.style;
        let one = |t: &str| st.safe(t, Lines::One);
        let lead = &margin.lead;
        format!(
            "{lead}{}{} {}: {}",
            st.yellow(&item_label("REFUSED")),
            one(r.tool.as_deref().unwrap_or("?")),
            one(r.tool_use_id.as_deref().unwrap_or("")),
            one(r.reason.as_deref().unwrap_or("no reason given"))
        )
    }

    fn observed(&self, out: &mut Vec<String>, margin: &Margin, o: &Observed) {
        let st = self.style;
        let one = |t: &str| st.safe(t, Lines::One);
        let Margin { lead, body } = margin;
        let word = match o.class {
            ObservedClass::Grant => st.cyan(&item_label("grant")),
            ObservedClass::Refusal => st.yellow(&item_label("REFUSED")),
            ObservedClass::Command => item_label("exec"),
            ObservedClass::Net => item_label("net"),
            ObservedClass::Session | ObservedClass::Other => item_label("nd7"),
        };
        out.push(format!(
            "{lead}{word}{} {}",
            st.dim(&format!("[{} {}]", one(&o.source), one(&o.kind))),
            one(&o.summary)
        ));
        if o.kind == crate::run_entry::FLOOR_REFUSED {
            for p in RefusedPath::of(&o.body) {
                out.push(format!("{body}{}", st.yellow(&one(&refused_path(&p)))));
            }
        }
        for p in &o.processes {
            out.push(format!(
                "{body}{}: {}",
                one(&processes_label(p)),
                one(&p.group.tree)
            ));
        }
        if self.effects && o.source == crate::effect::SOURCE && o.kind == crate::effect::RAN {
            for line in super::ran::each(&o.body, &|seq| o.ended_at(seq)) {
                out.push(format!("{body}  {}", st.dim(&one(&line))));
            }
        }
    }

    fn event(&self, margin: &Margin, e: &Event) -> String {
        let st = self.style;
        let one = |t: &str| st.safe(t, Lines::One);
        let lead = &margin.lead;
        let name = e.event.as_deref().unwrap_or(&e.kind);
        format!(
            "{lead}{}{}{}",
            st.dim(&item_label(if e.kind == "hook" { "hook" } else { "entry" })),
            one(name),
            if e.summary.is_empty() {
                String::new()
            } else {
                format!(": {}", st.dim(&one(&e.summary)))
            }
        )
    }

    fn unreadable(&self, margin: &Margin, u: &UnreadableLine) -> String {
        let st = self.style;
        let one = |t: &str| st.safe(t, Lines::One);
        let lead = &margin.lead;
        format!(
            "{lead}{}line {} is not an entry ({}): {}",
            st.red(&item_label("BAD")),
            u.line,
            one(&u.error),
            st.dim(&one(&u.start))
        )
    }

    fn tool(&self, out: &mut Vec<String>, lead: &str, body_indent: &str, t: &Tool) {
        let st = self.style;
        let one = |s: &str| st.safe(s, Lines::One);
        let status = match t.status {
            Status::Ok => st.green(&format!("{:<9}", "ok")),
            Status::Failed => st.red(&format!("{:<9}", "FAILED")),
            Status::Refused => st.yellow(&format!("{:<9}", "REFUSED")),
            Status::Interrupted => st.yellow(&format!("{:<9}", "STOPPED")),
            Status::NoResult => st.yellow(&format!("{:<9}", "NO END")),
        };
        let what = match (&t.command, t.paths.is_empty(), &t.input) {
            (Some(c), _, _) => format!("$ {}", st.bold(&one(c))),
            (None, false, _) => one(&t.paths.join(" ")),
            (None, true, Some(i)) => st.dim(&one(i)),
            (None, true, None) => String::new(),
        };
        let facts = tool_facts(t);
        let facts = if facts.is_empty() {
            String::new()
        } else {
            format!("  {}", st.dim(&format!("({})", facts.join(", "))))
        };
        out.push(format!("{lead}{status}{} {what}{facts}", one(&t.tool)));
        if let Some(d) = &t.description {
            out.push(format!("{body_indent}{}", st.dim(&format!("# {}", one(d)))));
        }
        if !t.paths.is_empty() && t.command.is_some() {
            out.push(format!("{body_indent}{}", st.dim(&one(&t.paths.join(" ")))));
        }
        if let Some(ran) = &t.ran {
            out.push(format!(
                "{body_indent}{} {}",
                st.yellow("ran as:"),
                one(ran)
            ));
        }
        for p in &t.refused_paths {
            out.push(format!(
                "{body_indent}{}",
                st.yellow(&one(&refused_path(p)))
            ));
        }
        for tree in &t.processes {
            out.push(format!("{body_indent}{} {}", st.cyan("ran:"), one(tree)));
        }
        if let Some(r) = &t.reason {
            let r = match t.refused_by {
                Some(RefusedBy::Permissions) if !r.starts_with("never ran") => {
                    format!("refused by {}: {}", RefusedBy::Permissions.words(), one(r))
                }
                _ => one(r),
            };
            out.push(format!(
                "{body_indent}{}",
                if t.status == Status::Refused {
                    st.yellow(&r)
                } else {
                    st.red(&r)
                }
            ));
        }
        if let Some(o) = &t.output {
            self.block(out, body_indent, o, |l| l.to_string());
        }
    }

    /// A block of untrusted text under an item: the first lines, each cut,
    /// unless `full`.
    fn block(
        &self,
        out: &mut Vec<String>,
        indent: &str,
        text: &str,
        paint: impl Fn(&str) -> String,
    ) {
        let st = self.style;
        let bar = st.dim("│ ");
        let lines: Vec<&str> = text.trim_end_matches('\n').split('\n').collect();
        let shown = if self.full {
            lines.len()
        } else {
            lines.len().min(OUTPUT_LINES)
        };
        let mut cut_any = false;
        for line in &lines[..shown] {
            let (line, cut) = if self.full {
                (line.to_string(), false)
            } else {
                cut_chars(line, LINE_CHARS)
            };
            cut_any |= cut;
            out.push(format!(
                "{indent}{bar}{}",
                paint(&st.safe(&line, Lines::One))
            ));
        }
        if shown < lines.len() {
            out.push(format!(
                "{indent}{bar}{}",
                st.dim(&format!(
                    "… {} more lines (--full shows them)",
                    lines.len() - shown
                ))
            ));
        } else if cut_any {
            out.push(format!(
                "{indent}{bar}{}",
                st.dim("… lines cut (--full shows them)")
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::timeline;

    #[test]
    fn short_ids_are_unique_and_at_least_min() {
        let ids = ["abcdef123", "abcdef124", "zzzzzzzzz", "ab"];
        assert_eq!(short_ids(&ids, 4), ["abcdef123", "abcdef124", "zzzz", "ab"]);
    }

    #[test]
    fn tilde_only_at_a_component_boundary() {
        assert_eq!(tilde("/home/a/p", Some("/home/a")), "~/p");
        assert_eq!(tilde("/home/ab/p", Some("/home/a")), "/home/ab/p");
        assert_eq!(tilde("/home/a", Some("/home/a")), "~");
    }

    fn entry_line(body: serde_json::Value, kind: &str, seq: u64) -> Vec<u8> {
        serde_json::json!({"seq": seq, "ts": 1_795_000_000_000_000_000u64 + seq, "cwd": "/p",
            "source": "intent:claude-code", "kind": kind, "tool_use_id": "t", "body": body})
        .to_string()
        .into_bytes()
    }

    #[test]
    fn what_ran_with_hostile_names_and_arguments_is_shown_inert() {
        let hostile = "x\x1b]0;owned\x07\x1b[2J\r\u{9b}1;31m\u{202e}";
        let line = serde_json::json!({"seq": 0, "ts": 1_795_000_000_000_000_000u64, "source": "effect:nd7",
            "kind": "ran", "body": {"exes": [[format!("/tmp/{hostile}"), "1:2", null]],
            "execs": [{"pid": 3, "ppid": 1, "exe": 0, "argv": [hostile], "command": 9}]}})
        .to_string()
        .into_bytes();
        let items = timeline::build([line.as_slice()]);
        let utc = TimeZone::UTC;
        let mut r = Timeline::new(&utc, Style::PLAIN, false);
        r.effects = true;
        let text = items
            .iter()
            .flat_map(|i| r.item(i))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            text.contains("under the command of entry 9, 1 exec: \"x\\x1b]0;owned"),
            "{text}"
        );
        assert!(
            text.contains("pid 3 (from 1) '/tmp/x\\x1b]0;owned"),
            "{text}"
        );
        for bad in ['\x1b', '\x07', '\r', '\u{9b}', '\u{202e}'] {
            assert!(!text.contains(bad), "{bad:?} in {text:?}");
        }
    }

    #[test]
    fn hostile_output_never_reaches_the_terminal_as_control_bytes() {
        let hostile = "ok\x1b]0;owned\x07\x1b[2J\r\u{9b}1;31m\u{202e}gnp.exe";
        let lines = [
            entry_line(
                serde_json::json!({"tool_name": "Bash", "tool_input": {"command": hostile}}),
                "tool_call",
                0,
            ),
            entry_line(
                serde_json::json!({"tool_name": "Bash", "tool_response": {"stdout": hostile},
                                   "ok": true}),
                "tool_result",
                1,
            ),
            entry_line(serde_json::json!({"prompt": hostile}), "prompt", 2),
        ];
        let items = timeline::build(lines.iter().map(Vec::as_slice));
        let utc = TimeZone::UTC;
        for colour in [false, true] {
            let mut r = Timeline::new(&utc, Style { colour }, true);
            let text: String = items
                .iter()
                .flat_map(|i| r.item(i))
                .collect::<Vec<_>>()
                .join("\n");
            for bad in ['\x07', '\r', '\u{9b}', '\u{202e}'] {
                assert!(!text.contains(bad), "{bad:?} in {text:?}");
            }
            // Only nd7's own SGR codes start with ESC.
            for (i, _) in text.match_indices('\x1b') {
                let rest = &text[i + 1..];
                let end = rest.find('m').expect("an SGR ends in m");
                assert!(
                    rest.starts_with('[')
                        && rest[1..end].chars().all(|c| c.is_ascii_digit() || c == ';'),
                    "a foreign escape: {:?}",
                    &rest[..end.min(20)]
                );
            }
            if !colour {
                assert!(text.contains("\\x1b]0;owned\\x07"), "{text}");
            }
        }
    }

    #[test]
    fn long_output_is_cut_unless_full() {
        let out: String = (0..20).map(|i| format!("line {i}\n")).collect();
        let lines = [
            entry_line(
                serde_json::json!({"tool_name": "Bash", "tool_input": {"command": "seq 20"}}),
                "tool_call",
                0,
            ),
            entry_line(
                serde_json::json!({"tool_name": "Bash", "tool_response": {"stdout": out}, "ok": true}),
                "tool_result",
                1,
            ),
        ];
        let items = timeline::build(lines.iter().map(Vec::as_slice));
        let utc = TimeZone::UTC;
        let short = Timeline::new(&utc, Style::PLAIN, false).item(&items[0]);
        assert!(
            short.iter().any(|l| l.contains("14 more lines")),
            "{short:#?}"
        );
        assert!(!short.iter().any(|l| l.contains("line 19")));
        let full = Timeline::new(&utc, Style::PLAIN, true).item(&items[0]);
        assert!(full.iter().any(|l| l.contains("line 19")));
    }
}
