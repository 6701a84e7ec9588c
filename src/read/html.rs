//! `nd7 show --html`: one self-contained HTML file an incident review can
//! attach. Pure: the session, its timeline and the verdict in, a page out.
//!
//! The page loads nothing (no script, font, image or style sheet from
//! anywhere) and runs nothing: outputs collapse with `<details>`, which needs
//! no script. Two independent walls keep a log's content inert: every string
//! from the log is escaped ([`super::safe::html`]), and the page's first
//! element is a Content-Security-Policy that forbids scripts, connections and
//! every external resource, so even a mistake in escaping could not run
//! anything or reach the network.

use std::fmt::Write;

use jiff::tz::TimeZone;

use super::report::{CAVEAT, Chain, SessionInfo, Shipped};
use super::safe::{self, Lines, plural};
use super::summary::Confinement;
use super::text::{self, OUTPUT_LINES};
use super::timeline::{
    Event, Item, Observed, ObservedClass, Refusal, SessionStart, Status, Subagent, SubagentEvent,
    Tool, UnreadableLine,
};
use super::when;

/// The policy the page carries: nothing but its own inline styles.
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; \
                       form-action 'none'; base-uri 'none'; frame-ancestors 'none'";

const STYLE: &str = "
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em;color:#1d1d1f;background:#fff}
h1{font-size:1.5em;margin:0 0 .2em}h2{font-size:1.15em;margin:1.6em 0 .5em;border-bottom:1px solid #ddd}
code,pre,.mono{font:13px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
table.facts td{padding:.1em 1em .1em 0;vertical-align:top}table.list{border-collapse:collapse;margin:.6em 0}table.list th,table.list td{border:1px solid #ddd;padding:.2em .5em;text-align:left;vertical-align:top}table.facts td:first-child{color:#666}
.clean{color:#176a2a;font-weight:600}.broken{color:#b00020;font-weight:700}.caveat{color:#555}
ol.timeline{list-style:none;padding:0;margin:0}
ol.timeline li{padding:.3em .4em;border-bottom:1px solid #f0f0f0}
ol.timeline li.sub{margin-left:2em;border-left:3px solid #c9d7f0}
.time,.seq{color:#777;font-variant-numeric:tabular-nums}.seq{margin:0 .6em}
.status{display:inline-block;min-width:5.5em;font-weight:600}
.ok .status{color:#176a2a}.failed .status,.bad .status{color:#b00020}.refused .status,.pending .status{color:#9a6700}
li.failed{background:#fff4f4}li.refused{background:#fffaf0}
.facts-inline{color:#666}.desc{color:#666;margin:.1em 0 0 2em}
pre.prompt{font-weight:600;background:#eef3fb}
pre{background:#f6f8fa;padding:.5em;overflow-x:auto;white-space:pre-wrap;word-break:break-word;margin:.3em 0 0 2em}
details{margin:.2em 0 0 2em}details pre{margin-left:0}summary{cursor:pointer;color:#444}
.day{font-weight:700;padding-top:.8em}
";

/// The whole page.
pub fn report(
    info: &SessionInfo,
    items: &[Item],
    tz: &TimeZone,
    generated: u64,
    version: &str,
) -> String {
    let h = |t: &str| safe::html(t, Lines::One);
    let mut o = String::with_capacity(64 * 1024 + items.len() * 256);
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\
         <meta name=\"referrer\" content=\"no-referrer\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>nd7 session {}</title><style>{STYLE}</style></head>\n<body>\n",
        h(&info.id)
    );
    let _ = writeln!(
        o,
        "<header><h1>nd7 session report</h1><p class=\"mono\" id=\"session-id\">{}</p></header>",
        h(&info.id)
    );
    facts(&mut o, info, tz);
    verdict(&mut o, &info.chain);
    sandbox(&mut o, info, items, tz);
    let _ = write!(
        o,
        "<section id=\"timeline\"><h2>Timeline</h2>\n<ol class=\"timeline\">\n"
    );
    let mut day = None;
    for item in items {
        // Folded into its call's row, which names it; the NDJSON keeps it.
        // What ran stays a row of its own too: its every exec, collapsed.
        if matches!(item, Item::Observed(ob) if ob.folded && !is_ran(ob)) {
            continue;
        }
        if let Some(at) = item.at() {
            let d = when::date(at.ts, tz);
            if day.as_ref() != Some(&d) {
                let _ = writeln!(o, "<li class=\"day\">{}</li>", h(&d));
                day = Some(d);
            }
        }
        timeline_item(&mut o, item, tz);
    }
    o.push_str("</ol></section>\n");
    let _ = write!(
        o,
        "<footer><p class=\"caveat\">Made by nd7 {} at {} from the log named above. Times are {}.</p></footer>\n</body></html>\n",
        h(version),
        h(&when::date_time(generated, tz)),
        h(&when::zone_label(generated, tz)),
    );
    o
}

fn facts(o: &mut String, info: &SessionInfo, tz: &TimeZone) {
    let h = |t: &str| safe::html(t, Lines::One);
    let s = &info.summary;
    let mut rows: Vec<(&str, String)> = vec![("Log", h(&info.log))];
    if let Some(p) = &s.project {
        rows.push(("Project", format!("<code>{}</code>", h(p))));
    }
    if let Some(host) = &s.host {
        rows.push(("Host", h(host)));
    }
    let mut agent = h(&info.agent());
    if let Some(m) = &s.model {
        agent.push_str(&format!(", model {}", h(m)));
    }
    rows.push(("Agent", agent));
    if let Some(t) = s.first_ts {
        rows.push((
            "Started",
            format!(
                "{} ({})",
                h(&when::date_time(t, tz)),
                h(&when::zone_label(t, tz))
            ),
        ));
    }
    if let Some(d) = s.duration_ns() {
        rows.push(("Duration", h(&when::duration(d))));
    }
    rows.push((
        "Ended",
        match &s.ended {
            Some(e) => format!(
                "{} (entry #{})",
                h(e.reason.as_deref().unwrap_or("no reason given")),
                e.seq
            ),
            None => "no session end in the log".into(),
        },
    ));
    rows.push((
        "Activity",
        format!(
            "{}, {}, {}, {} failed, {}",
            text::count(s.entries, "entry"),
            text::count(s.prompts, "prompt"),
            text::count(s.tool_calls, "tool call"),
            s.failures,
            text::refused_words(s)
        ),
    ));
    rows.push(("Sandbox", h(info.confinement_words())));
    rows.push((
        "Shipped",
        match info.shipped {
            Shipped::NotHere => "a copy outside the state directory it was recorded in".into(),
            ref other => h(&other.words(s.entries)),
        },
    ));
    o.push_str("<table class=\"facts\" id=\"facts\">\n");
    for (k, v) in rows {
        let _ = writeln!(o, "<tr><td>{k}</td><td>{v}</td></tr>");
    }
    o.push_str("</table>\n");
}

fn verdict(o: &mut String, chain: &Chain) {
    let h = |t: &str| safe::html(t, Lines::One);
    o.push_str("<section id=\"verify\"><h2>Chain verification</h2>\n");
    match chain {
        Chain::Clean {
            entries,
            head,
            note,
        } => {
            let _ = write!(
                o,
                "<p><span class=\"clean\">Clean</span>: {entries} entries{}.</p>",
                head.as_deref()
                    .map(|hd| format!(", head <code>{}</code>", h(hd)))
                    .unwrap_or_default()
            );
            if let Some(n) = note {
                let _ = write!(o, "<p>Note: {}.</p>", h(n));
            }
        }
        Chain::Broken { detail } => {
            let _ = write!(
                o,
                "<p><span class=\"broken\">BROKEN</span>: {}</p>\
                 <p>Entries after the break are shown as the log holds them; nothing vouches for them.</p>",
                h(detail)
            );
        }
        Chain::Unreadable { detail } => {
            let _ = write!(
                o,
                "<p><span class=\"broken\">Not checked</span>: {}</p>",
                h(detail)
            );
        }
        Chain::NotChecked => o.push_str("<p>Not checked.</p>"),
    }
    o.push_str("<ul class=\"caveat\">");
    for c in CAVEAT {
        let _ = write!(o, "<li>{}.</li>", h(c));
    }
    o.push_str("</ul></section>\n");
}

fn sandbox(o: &mut String, info: &SessionInfo, items: &[Item], tz: &TimeZone) {
    let h = |t: &str| safe::html(t, Lines::One);
    o.push_str("<section id=\"sandbox\"><h2>Sandbox rules and grants</h2>\n");
    let observed: Vec<_> = items
        .iter()
        .filter_map(|i| match i {
            Item::Observed(ob) => Some(ob),
            _ => None,
        })
        .filter(|ob| matches!(ob.class, ObservedClass::Session | ObservedClass::Grant))
        .collect();
    let _ = write!(o, "<p>{}.</p>", h(info.confinement_words()));
    if observed.is_empty() {
        o.push_str(match info.summary.confinement {
            Confinement::NotSeen => {
                "<p>The log holds no rules: as far as it shows, the session was recorded without <code>nd7 run</code>.</p>"
            }
            _ => {
                "<p>The log holds no copy of the rules or grants: this session was recorded by an nd7 whose sandbox exit did not write its own entries.</p>"
            }
        });
    }
    // What a reviewer looks for first: what was refused, then how the
    // grants changed, then the rules the run started with.
    refusals_table(o, items, tz);
    grants_table(o, &observed, tz);
    if let Some(start) = observed
        .iter()
        .find(|ob| ob.kind == crate::run_entry::RUN_START)
    {
        rules_table(o, &start.body);
    }
    if !observed.is_empty() {
        o.push_str("<details id=\"sandbox-entries\"><summary>The entries as recorded</summary>\n");
        for ob in observed {
            let body = serde_json::to_string_pretty(&ob.body).unwrap_or_default();
            let _ = writeln!(
                o,
                "<h3 class=\"mono\">#{} {} ({})</h3><p class=\"mono\">{}</p><pre>{}</pre>",
                ob.at.seq,
                h(&ob.kind),
                h(&ob.source),
                h(&ob.summary),
                safe::html(&body, Lines::Keep)
            );
        }
        o.push_str("</details>\n");
    }
    o.push_str("</section>\n");
}

/// A list of paths in one table cell.
fn paths_cell(paths: &[std::path::PathBuf]) -> String {
    if paths.is_empty() {
        return "none".into();
    }
    paths
        .iter()
        .map(|p| {
            format!(
                "<code>{}</code>",
                safe::html(&p.to_string_lossy(), Lines::One)
            )
        })
        .collect::<Vec<_>>()
        .join("<br>")
}

/// What the run started with: what its commands could write, what nothing
/// in it could read.
fn rules_table(o: &mut String, run_start: &serde_json::Value) {
    let Ok(policy) = serde_json::from_value::<crate::policy::Policy>(run_start["rules"].clone())
    else {
        o.push_str("<p>The rules in <code>run_start</code> could not be read; the entry is below as recorded.</p>");
        return;
    };
    o.push_str("<table class=\"facts\" id=\"rules\">\n");
    let _ = writeln!(
        o,
        "<tr><td>Writable by commands</td><td>{}</td></tr>",
        paths_cell(&policy.command_writes())
    );
    let _ = writeln!(
        o,
        "<tr><td>Writable by the agent's own tools</td><td>{}</td></tr>",
        paths_cell(&policy.floor_writes())
    );
    let _ = writeln!(
        o,
        "<tr><td>Unreadable</td><td>{}</td></tr>",
        paths_cell(&policy.unreadable())
    );
    o.push_str("</table>\n");
}

/// Which grants came and went, and when.
fn grants_table(o: &mut String, observed: &[&super::timeline::Observed], tz: &TimeZone) {
    let h = |t: &str| safe::html(t, Lines::One);
    let mut rows = Vec::new();
    for ob in observed {
        let at = format!("#{} {}", ob.at.seq, when::time(ob.at.ts, tz));
        let s = |k: &str| ob.body[k].as_str().unwrap_or("?").to_string();
        match ob.kind.as_str() {
            crate::run_entry::RUN_START => {
                for g in ob.body["grants"].as_array().into_iter().flatten() {
                    let from = g["from"].as_str().unwrap_or("?");
                    let path = g["path"].as_str().unwrap_or("?");
                    rows.push((
                        at.clone(),
                        "granted at start".into(),
                        path.to_string(),
                        format!("from {from}"),
                    ));
                }
            }
            crate::run_entry::GRANT => rows.push((at, s("change"), s("path"), String::new())),
            crate::run_entry::GRANT_DROPPED => {
                rows.push((at, "dropped".into(), s("path"), s("why")))
            }
            _ => {}
        }
    }
    if rows.is_empty() {
        return;
    }
    o.push_str("<table class=\"list\" id=\"grants\"><tr><th>When</th><th>Change</th><th>Path</th><th>Why</th></tr>\n");
    for (at, change, path, why) in rows {
        let _ = writeln!(
            o,
            "<tr><td class=\"mono\">{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            h(&at),
            h(&change),
            h(&path),
            h(&why)
        );
    }
    o.push_str("</table>\n");
}

/// Every refusal, whoever made it: what, who, why, and the fix.
fn refusals_table(o: &mut String, items: &[Item], tz: &TimeZone) {
    let h = |t: &str| safe::html(t, Lines::One);
    let rows: Vec<RefusalRow> = items
        .iter()
        .flat_map(|item| refusal_rows(item, tz))
        .collect();
    if rows.is_empty() {
        o.push_str("<p id=\"refusals\">Nothing was refused.</p>\n");
        return;
    }
    o.push_str("<table class=\"list\" id=\"refusals\"><tr><th>When</th><th>Refused by</th><th>What</th><th>Why</th><th>Fix</th></tr>\n");
    for (when, who, what, why, fix) in rows {
        let _ = writeln!(
            o,
            "<tr><td class=\"mono\">{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td><code>{}</code></td></tr>",
            h(&when),
            h(&who),
            h(&what),
            h(&why),
            h(&fix)
        );
    }
    o.push_str("</table>\n");
}

/// A row of the refusals table: when, who refused, what, why, the fix.
type RefusalRow = (String, String, String, String, String);

/// The refusals `item` holds: none, one, or one per path the sandbox
/// refused.
fn refusal_rows(item: &Item, tz: &TimeZone) -> Vec<RefusalRow> {
    use super::timeline::{RefusedBy, RefusedPath};
    let at = |a: &super::timeline::At| format!("#{} {}", a.seq, when::time(a.ts, tz));
    match item {
        Item::Tool(t) if t.status == Status::Refused => match t.refused_by {
            Some(RefusedBy::Nd7Sandbox) => path_rows(at(&t.at), &t.tool, t.refused_paths.to_vec()),
            _ => vec![(
                at(&t.at),
                RefusedBy::Permissions.words().to_string(),
                format!(
                    "{}: {}",
                    t.tool,
                    t.command.clone().unwrap_or_else(|| t.paths.join(" "))
                ),
                t.reason.as_deref().map_or("no reason given".into(), |r| {
                    r.split(" (fix:").next().unwrap_or(r).to_string()
                }),
                "an allow rule in Claude Code's settings".into(),
            )],
        },
        Item::Refusal(r) => vec![(
            at(&r.at),
            RefusedBy::Permissions.words().to_string(),
            r.tool.clone().unwrap_or_else(|| "?".into()),
            r.reason.clone().unwrap_or_else(|| "no reason given".into()),
            "an allow rule in Claude Code's settings".into(),
        )],
        Item::Observed(ob) if !ob.folded && ob.kind == crate::run_entry::FLOOR_REFUSED => {
            let tool = ob.body["tool"].as_str().unwrap_or("?").to_string();
            path_rows(at(&ob.at), &tool, RefusedPath::of(&ob.body))
        }
        Item::Observed(ob) if ob.kind == crate::run_entry::REFUSED => vec![(
            at(&ob.at),
            "nd7's exit".into(),
            format!(
                "a caller of {}",
                ob.body["door"].as_str().unwrap_or("a door")
            ),
            ob.body["reason"].as_str().unwrap_or("?").to_string(),
            "none: not the agent's call".into(),
        )],
        _ => Vec::new(),
    }
}

/// One row per path the sandbox refused `tool`, at `when`.
fn path_rows(
    when: String,
    tool: &str,
    paths: Vec<super::timeline::RefusedPath>,
) -> Vec<RefusalRow> {
    paths
        .into_iter()
        .map(|p| {
            (
                when.clone(),
                super::timeline::RefusedBy::Nd7Sandbox.words().to_string(),
                format!("{tool}: {}", p.path),
                p.why_words(),
                p.fix
                    .clone()
                    .unwrap_or_else(|| "none: run it outside nd7 run".into()),
            )
        })
        .collect()
}

/// A block of output, collapsed when longer than the terminal view shows.
fn output(o: &mut String, label: &str, text: &str) {
    let lines = text.trim_end_matches('\n').split('\n').count();
    let open = if lines <= OUTPUT_LINES { " open" } else { "" };
    let _ = write!(
        o,
        "<details{open}><summary>{label} ({lines} line{})</summary><pre>{}</pre></details>",
        plural(lines, "", "s"),
        safe::html(text, Lines::Keep)
    );
}

/// One line of the timeline: its class, status word and body, then when.
fn timeline_item(o: &mut String, item: &Item, tz: &TimeZone) {
    let h = |t: &str| safe::html(t, Lines::One);
    let (class, status, body) = item_parts(item);
    let (time, seq, sub, id) = match item.at() {
        Some(at) => (
            when::time(at.ts, tz),
            format!("#{}", at.seq),
            if at.agent.is_some() { " sub" } else { "" },
            format!(" id=\"e{}\"", at.seq),
        ),
        None => (String::new(), String::new(), "", String::new()),
    };
    let _ = writeln!(
        o,
        "<li class=\"{class}{sub}\"{id}><span class=\"time\">{time}</span><span class=\"seq\">{seq}</span>\
         <span class=\"status\">{}</span> {body}</li>",
        h(&status)
    );
}

/// A timeline line's class, its status word and its body (HTML).
type Parts = (&'static str, String, String);

fn item_parts(item: &Item) -> Parts {
    match item {
        Item::SessionStart(s) => session_start(s),
        Item::Prompt(p) => (
            "prompt",
            "prompt".into(),
            format!(
                "<pre class=\"prompt\">{}</pre>",
                safe::html(&p.text, Lines::Keep)
            ),
        ),
        Item::Tool(t) => tool(t),
        Item::TurnEnd(t) => {
            let mut b = String::from("turn end");
            if let Some(m) = &t.message {
                output(&mut b, "message", m);
            }
            ("turn", "turn".into(), b)
        }
        Item::SessionEnd(e) => (
            "end",
            "end".into(),
            format!(
                "session ended ({})",
                safe::html(e.reason.as_deref().unwrap_or("no reason given"), Lines::One)
            ),
        ),
        Item::Subagent(s) => subagent(s),
        Item::Refusal(r) => refusal(r),
        Item::Observed(ob) => observed(ob),
        Item::Event(e) => event(e),
        Item::Unreadable(u) => unreadable(u),
    }
}

fn session_start(s: &SessionStart) -> Parts {
    let h = |t: &str| safe::html(t, Lines::One);
    (
        "start",
        "start".into(),
        format!(
            "session started ({}){}{}",
            h(s.how.as_deref().unwrap_or("?")),
            s.model
                .as_deref()
                .map(|m| format!(", model {}", h(m)))
                .unwrap_or_default(),
            s.cwd
                .as_deref()
                .map(|c| format!(" in <code>{}</code>", h(c)))
                .unwrap_or_default()
        ),
    )
}

fn subagent(s: &Subagent) -> Parts {
    let h = |t: &str| safe::html(t, Lines::One);
    let ty = h(s.agent_type.as_deref().unwrap_or("?"));
    let id = h(s.id.as_deref().unwrap_or("?"));
    let mut b = match (s.event, &s.parent) {
        (SubagentEvent::Start, Some(p)) => {
            format!(
                "subagent {ty} (<code>{id}</code>) started by call <code>{}</code>",
                h(p)
            )
        }
        (SubagentEvent::Start, None) => {
            format!("subagent {ty} (<code>{id}</code>) started")
        }
        (SubagentEvent::Stop, _) => format!("subagent {ty} (<code>{id}</code>) stopped"),
    };
    if let Some(m) = &s.message {
        output(&mut b, "message", m);
    }
    ("agent", "agent".into(), b)
}

fn refusal(r: &Refusal) -> Parts {
    let h = |t: &str| safe::html(t, Lines::One);
    (
        "refused",
        "REFUSED".into(),
        format!(
            "{} <code>{}</code>: {}",
            h(r.tool.as_deref().unwrap_or("?")),
            h(r.tool_use_id.as_deref().unwrap_or("")),
            h(r.reason.as_deref().unwrap_or("no reason given"))
        ),
    )
}

fn is_ran(ob: &Observed) -> bool {
    ob.source == crate::effect::SOURCE && ob.kind == crate::effect::RAN
}

/// A `ran` row's groups left to it (their calls had left the timeline), and
/// every exec, collapsed until opened.
fn ran_parts(b: &mut String, ob: &Observed) {
    let h = |t: &str| safe::html(t, Lines::One);
    for p in &ob.processes {
        let _ = write!(
            b,
            "<div class=\"desc ran\">{}: <code>{}</code></div>",
            h(&text::processes_label(p)),
            h(&p.group.tree)
        );
    }
    let each = super::ran::each(&ob.body, &|seq| ob.ended_at(seq));
    let _ = write!(
        b,
        "<details class=\"execs\"><summary>every exec ({})</summary><pre>{}</pre></details>",
        each.len(),
        each.iter()
            .map(|l| safe::html(l, Lines::One))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn observed(ob: &Observed) -> Parts {
    let h = |t: &str| safe::html(t, Lines::One);
    let (class, word) = match ob.class {
        ObservedClass::Grant => ("grant", "grant"),
        ObservedClass::Refusal => ("refused", "REFUSED"),
        ObservedClass::Command => ("observed", "exec"),
        ObservedClass::Net => ("observed", "net"),
        ObservedClass::Session | ObservedClass::Other => ("observed", "nd7"),
    };
    let mut b = format!(
        "<code>[{} {}]</code> {}",
        h(&ob.source),
        h(&ob.kind),
        h(&ob.summary)
    );
    if is_ran(ob) {
        ran_parts(&mut b, ob);
    }
    (class, word.into(), b)
}

fn event(e: &Event) -> Parts {
    let h = |t: &str| safe::html(t, Lines::One);
    (
        "event",
        if e.kind == "hook" { "hook" } else { "entry" }.into(),
        format!(
            "{}{}",
            h(e.event.as_deref().unwrap_or(&e.kind)),
            if e.summary.is_empty() {
                String::new()
            } else {
                format!(": <span class=\"facts-inline\">{}</span>", h(&e.summary))
            }
        ),
    )
}

fn unreadable(u: &UnreadableLine) -> Parts {
    let h = |t: &str| safe::html(t, Lines::One);
    (
        "bad",
        "BAD".into(),
        format!(
            "line {} is not an entry ({}): <code>{}</code>",
            u.line,
            h(&u.error),
            h(&u.start)
        ),
    )
}

fn tool(t: &Tool) -> Parts {
    let h = |s: &str| safe::html(s, Lines::One);
    let (class, status) = match t.status {
        Status::Ok => ("ok", "ok"),
        Status::Failed => ("failed", "FAILED"),
        Status::Refused => ("refused", "REFUSED"),
        Status::Interrupted => ("refused", "STOPPED"),
        Status::NoResult => ("pending", "NO END"),
    };
    let mut b = format!("<strong>{}</strong> ", h(&t.tool));
    match (&t.command, t.paths.is_empty(), &t.input) {
        (Some(c), _, _) => {
            let _ = write!(b, "<code class=\"command\">$ {}</code>", h(c));
        }
        (None, false, _) => {
            let _ = write!(b, "<code>{}</code>", h(&t.paths.join(" ")));
        }
        (None, true, Some(i)) => {
            let _ = write!(b, "<span class=\"facts-inline\">{}</span>", h(i));
        }
        (None, true, None) => {}
    }
    let facts = super::text::tool_facts(t);
    if !facts.is_empty() {
        let _ = write!(
            b,
            " <span class=\"facts-inline\">({})</span>",
            h(&facts.join(", "))
        );
    }
    if let Some(d) = &t.description {
        let _ = write!(b, "<div class=\"desc\"># {}</div>", h(d));
    }
    if let Some(ran) = &t.ran {
        let _ = write!(
            b,
            "<div class=\"desc\">ran as: <code>{}</code></div>",
            h(ran)
        );
    }
    for p in &t.refused_paths {
        let _ = write!(b, "<div class=\"desc\">{}</div>", h(&text::refused_path(p)));
    }
    for tree in &t.processes {
        let _ = write!(
            b,
            "<div class=\"desc ran\">ran: <code>{}</code></div>",
            h(tree)
        );
    }
    if let Some(r) = &t.reason {
        let _ = write!(b, "<div class=\"desc\">{}</div>", h(r));
    }
    if !t.evidence.is_empty() {
        let seqs: Vec<String> = t.evidence.iter().map(|s| format!("#{s}")).collect();
        let _ = write!(
            b,
            "<div class=\"desc\">nd7's entries on this call: {}</div>",
            h(&seqs.join(" "))
        );
    }
    if let Some(out) = &t.output {
        output(&mut b, "output", out);
    }
    (class, status.into(), b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::report::{Chain, SessionInfo, Shipped};
    use crate::read::summary::Summary;
    use crate::read::timeline;

    fn page(lines: &[Vec<u8>]) -> String {
        let items = timeline::build(lines.iter().map(Vec::as_slice));
        let info = SessionInfo {
            id: "<script>alert(1)</script>".into(),
            log: "/l".into(),
            summary: Summary::default(),
            chain: Chain::Clean {
                entries: 1,
                head: Some("abcd".into()),
                note: None,
            },
            shipped: Shipped::NotEnrolled,
        };
        report(&info, &items, &TimeZone::UTC, 0, "0.1.0")
    }

    fn line(kind: &str, body: serde_json::Value) -> Vec<u8> {
        serde_json::json!({"seq": 0, "ts": 1, "source": "intent:claude-code", "kind": kind,
                           "tool_use_id": "t", "body": body})
        .to_string()
        .into_bytes()
    }

    #[test]
    fn no_markup_from_the_log_survives() {
        let hostile = "</pre></details><script>document.title='PWNED'</script><img src=x onerror=alert(1)>\"'";
        let html = page(&[
            line("prompt", serde_json::json!({"prompt": hostile})),
            line(
                "tool_call",
                serde_json::json!({"tool_name": "Bash", "tool_input": {"command": hostile}}),
            ),
        ]);
        assert!(!html.to_lowercase().contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;script&gt;document.title=&#39;PWNED&#39;&lt;/script&gt;"));
    }

    #[test]
    fn the_policy_comes_first_and_nothing_is_loaded() {
        let html = page(&[]);
        let head = &html[..html.find("<title>").expect("a title")];
        assert!(head.contains(&format!("content=\"{CSP}\"")), "{head}");
        assert!(CSP.starts_with("default-src 'none'"));
        for external in ["src=", "href=", "url(", "@import", "<link", "<script"] {
            assert!(!html.contains(external), "{external} in the page");
        }
    }
}
