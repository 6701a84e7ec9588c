//! `nd7 search`: a pattern matched against what entries say (commands,
//! paths, prompts, outputs, messages), never against the JSON around them.
//! Pure: bytes and entries in, hits out.
//!
//! Parsing every line would make a search as slow as reading every entry,
//! so a prefilter looks for the pattern in the raw bytes first and only the
//! lines it finds are parsed. It is built to never miss: from the pattern's
//! syntax it takes literals one of which every match must start with
//! (regex-syntax's prefix extraction), writes each as JSON writes it inside a
//! string (serde_json's escaping, which every nd7 writer uses), and a line is
//! skipped only when none of them occurs in it. A pattern with no such
//! literals (`.*`, `\w+`) parses every line.
//!
//! A line the prefilter keeps is then skimmed ([`skim`]), its members found
//! without reading their values: when one of the literals occurs only in members that are
//! never searched (a result's command, a path member, the envelope), the
//! entry cannot hold a hit and is not parsed whole. Only what is certain
//! skips: anything unusual (an entry from nd7 itself, a `hook` entry, a
//! member twice) goes to the whole parse.

use std::ops::Range;

use aho_corasick::AhoCorasick;
use regex::Regex;
use serde::Serialize;
use serde_json::Value;

use super::entry::{Entry, INTENT};
use super::skim;

/// How a pattern is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub ignore_case: bool,
    /// The pattern is a literal string, not a regular expression.
    pub fixed: bool,
}

/// What skips a line without parsing it.
#[derive(Debug)]
enum Prefilter {
    /// Every line is a candidate.
    None,
    /// No text can match (an empty character class): no line is.
    Never,
    /// Lines holding one of these byte strings are candidates.
    Any(AhoCorasick),
}

/// A compiled search pattern.
#[derive(Debug)]
pub struct Pattern {
    regex: Regex,
    prefilter: Prefilter,
}

/// Which part of an entry a hit is in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Hit {
    pub seq: u64,
    pub ts: u64,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// command, path, prompt, output, message, input, or the member's name.
    pub field: String,
    /// The line of the field's text that matched, 1-based.
    pub line: usize,
    /// That line, cut to a window around the match when long.
    pub text: String,
    /// The match within `text`, in bytes.
    pub start: usize,
    pub end: usize,
}

/// Which entries are searched.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only entries about this tool (case-insensitive).
    pub tool: Option<String>,
    pub since: Option<u64>,
    pub until: Option<u64>,
}

impl Filter {
    fn admits(&self, e: &Entry) -> bool {
        if self.since.is_some_and(|s| e.ts < s) || self.until.is_some_and(|u| e.ts > u) {
            return false;
        }
        match &self.tool {
            None => true,
            Some(t) => e
                .str("tool_name")
                .is_some_and(|n| n.eq_ignore_ascii_case(t)),
        }
    }
}

/// How much of a long line is kept around a match, before and after.
const WINDOW: usize = 80;

/// Payload members that say where or when, not what: never searched. The
/// [`COMMON_MEMBERS`](super::entry::COMMON_MEMBERS), and the ids a call
/// or a subagent carries.
fn not_searched(member: &str) -> bool {
    super::entry::COMMON_MEMBERS.contains(&member) || ["tool_use_id", "agent_id"].contains(&member)
}

impl Pattern {
    pub fn new(pattern: &str, options: Options) -> Result<Pattern, String> {
        let source = if options.fixed {
            regex::escape(pattern)
        } else {
            pattern.to_string()
        };
        let regex = regex::RegexBuilder::new(&source)
            .case_insensitive(options.ignore_case)
            .build()
            .map_err(|e| e.to_string())?;
        let hir = regex_syntax::ParserBuilder::new()
            .case_insensitive(options.ignore_case)
            .build()
            .parse(&source)
            .map_err(|e| e.to_string())?;
        Ok(Pattern {
            regex,
            prefilter: prefilter(&hir),
        })
    }

    /// Whether the prefilter can skip lines (for `--debug`-style reporting
    /// and tests).
    pub fn has_prefilter(&self) -> bool {
        !matches!(self.prefilter, Prefilter::None)
    }

    /// Calls `line` with each line of `block` (whole lines, newline
    /// terminated) that may hold a hit, without its newline, and its index
    /// among the block's lines is not tracked: callers need only the bytes.
    pub fn candidates<'b>(&self, block: &'b [u8], mut line: impl FnMut(&'b [u8])) {
        match &self.prefilter {
            Prefilter::Never => {}
            Prefilter::None => {
                for l in block.split(|&b| b == b'\n') {
                    if !l.is_empty() {
                        line(l);
                    }
                }
            }
            Prefilter::Any(ac) => {
                let mut at = 0;
                while at < block.len() {
                    let input = aho_corasick::Input::new(block).span(at..block.len());
                    let Some(m) = ac.find(input) else {
                        break;
                    };
                    let start = memchr::memrchr(b'\n', &block[..m.start()]).map_or(0, |p| p + 1);
                    let end = memchr::memchr(b'\n', &block[m.start()..])
                        .map_or(block.len(), |p| m.start() + p);
                    line(&block[start..end]);
                    at = end + 1;
                }
            }
        }
    }

    /// Every hit in one line of a log (without its newline) that `filter`
    /// admits; a line that is not an entry has none. The same hits as
    /// [`Entry::parse`] then [`Pattern::hits`], faster when the pattern's
    /// literal occurs only where nothing is searched.
    pub fn line_hits(&self, line: &[u8], filter: &Filter) -> Vec<Hit> {
        if let Prefilter::Any(ac) = &self.prefilter
            && !may_hit(line, ac)
        {
            return Vec::new();
        }
        match Entry::parse(line, 0) {
            Ok(e) => self.hits(&e, filter),
            Err(_) => Vec::new(),
        }
    }

    /// Every hit in one entry that `filter` admits.
    pub fn hits(&self, e: &Entry, filter: &Filter) -> Vec<Hit> {
        if !filter.admits(e) {
            return Vec::new();
        }
        let mut fields: Vec<(String, &str)> = Vec::new();
        let payload = e.payload();
        match (e.is_intent(), e.kind.as_str()) {
            (true, "tool_call") => {
                let input = payload.get("tool_input").unwrap_or(&Value::Null);
                if let Some(c) = input.get("command").and_then(Value::as_str) {
                    fields.push(("command".into(), c));
                }
                for p in payload
                    .get("paths")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    fields.push(("path".into(), p));
                }
                if let Value::Object(o) = input {
                    for (k, v) in o {
                        if k != "command" && !crate::hook::PATH_MEMBERS.contains(&k.as_str()) {
                            strings(v, "input", &mut fields);
                        }
                    }
                }
            }
            (true, "tool_result") => {
                // Only the strings the response holds: a pattern must match
                // what the log says, never JSON put back together.
                if let Some(r) = payload.get("tool_response") {
                    strings(r, "output", &mut fields);
                }
                if let Some(err) = payload.get("error").and_then(Value::as_str) {
                    fields.push(("output".into(), err));
                }
            }
            (true, "prompt") => {
                if let Some(p) = payload.get("prompt").and_then(Value::as_str) {
                    fields.push(("prompt".into(), p));
                }
            }
            (true, "turn_end") => {
                if let Some(m) = payload
                    .get("last_assistant_message")
                    .and_then(Value::as_str)
                {
                    fields.push(("message".into(), m));
                }
            }
            _ => {
                // Another entry of the agent's (a `hook` entry) is its word:
                // its members are labelled with its kind, so that a payload
                // member named as nd7's own (`execs`, `exes`) never reads as
                // what nd7 saw (ADR-0144).
                let kind = if e.is_intent() {
                    format!("{} ", e.kind)
                } else {
                    String::new()
                };
                if let Value::Object(o) = payload {
                    for (k, v) in o {
                        if !not_searched(k) {
                            strings(v, &format!("{kind}{k}"), &mut fields);
                        }
                    }
                }
            }
        }
        let mut hits = Vec::new();
        for (field, text) in fields {
            for (n, line) in text.split('\n').enumerate() {
                let Some(m) = self.regex.find(line) else {
                    continue;
                };
                let (text, start, end) = window(line, m.start(), m.end());
                hits.push(Hit {
                    seq: e.seq,
                    ts: e.ts,
                    kind: e.kind.clone(),
                    tool: e.str("tool_name").map(str::to_string),
                    tool_use_id: e.tool_use().map(str::to_string),
                    field: field.clone(),
                    line: n + 1,
                    text,
                    start,
                    end,
                });
            }
        }
        hits
    }
}

/// Whether `line` may hold a hit: false only when it is an agent's typed
/// entry and none of `ac`'s literals occurs in the JSON text of the members
/// [`Pattern::hits`] searches for its kind. Every string searched there is
/// inside one of those texts, written with the escaping the literals were
/// written with, so a false here never loses a hit. Anything the skim cannot
/// read for certain (a member twice, a name with escapes, an entry from nd7
/// itself or a `hook` entry) is a true.
fn may_hit(line: &[u8], ac: &AhoCorasick) -> bool {
    let Some(envelope) = skim::members(line, 0) else {
        return true;
    };
    let (Some(source), Some(kind), Some(body)) = (
        only(&envelope, b"source"),
        only(&envelope, b"kind"),
        only(&envelope, b"body"),
    ) else {
        return true;
    };
    let source = &line[source];
    if !source.starts_with(format!("\"{INTENT}").as_bytes()) {
        return true;
    }
    let searched: &[&[u8]] = match &line[kind] {
        b"\"tool_call\"" => &[b"tool_input", b"paths"],
        b"\"tool_result\"" => &[b"tool_response", b"error"],
        b"\"prompt\"" => &[b"prompt"],
        b"\"turn_end\"" => &[b"last_assistant_message"],
        _ => return true,
    };
    let Some(members) = skim::members(line, body.start) else {
        return true;
    };
    let mut seen = Vec::with_capacity(2);
    for (name, value) in &members {
        if searched.contains(name) {
            if seen.contains(name) {
                return true;
            }
            seen.push(*name);
            if ac.is_match(&line[value.clone()]) {
                return true;
            }
        }
    }
    false
}

/// The span of the member named `name`, when it is there exactly once.
fn only(members: &[(&[u8], Range<usize>)], name: &[u8]) -> Option<Range<usize>> {
    let mut found = members.iter().filter(|(n, _)| *n == name);
    match (found.next(), found.next()) {
        (Some((_, r)), None) => Some(r.clone()),
        _ => None,
    }
}

/// Every string under `value`, labelled `label` (the member's name for
/// scalars directly under it).
fn strings<'v>(value: &'v Value, label: &str, out: &mut Vec<(String, &'v str)>) {
    match value {
        Value::String(s) => out.push((label.to_string(), s)),
        Value::Array(a) => a.iter().for_each(|v| strings(v, label, out)),
        Value::Object(o) => o.values().for_each(|v| strings(v, label, out)),
        _ => {}
    }
}

/// `line` cut to [`WINDOW`] bytes either side of the match, at character
/// boundaries, with `…` where cut; and the match's place in the result.
fn window(line: &str, start: usize, end: usize) -> (String, usize, usize) {
    let mut from = start.saturating_sub(WINDOW);
    while !line.is_char_boundary(from) {
        from -= 1;
    }
    let mut to = (end + WINDOW).min(line.len());
    while !line.is_char_boundary(to) {
        to += 1;
    }
    let lead = if from > 0 { "…" } else { "" };
    let tail = if to < line.len() { "…" } else { "" };
    let text = format!("{lead}{}{tail}", &line[from..to]);
    (text, start - from + lead.len(), end - from + lead.len())
}

/// Literals every match starts with, written as they appear inside a JSON
/// string; `None` when the pattern has no such set.
fn prefilter(hir: &regex_syntax::hir::Hir) -> Prefilter {
    use regex_syntax::hir::literal::{ExtractKind, Extractor};
    let mut extractor = Extractor::new();
    extractor.kind(ExtractKind::Prefix);
    let seq = extractor.extract(hir);
    let Some(literals) = seq.literals() else {
        return Prefilter::None;
    };
    if literals.is_empty() {
        return Prefilter::Never;
    }
    let mut needles = Vec::with_capacity(literals.len());
    for lit in literals {
        let bytes = lit.as_bytes();
        // A literal cut inside a character keeps its whole characters.
        let text = match std::str::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
        };
        if text.is_empty() {
            return Prefilter::None;
        }
        let quoted = serde_json::to_string(text).unwrap_or_default();
        needles.push(quoted[1..quoted.len() - 1].to_string());
    }
    match AhoCorasick::new(&needles) {
        Ok(ac) => Prefilter::Any(ac),
        Err(_) => Prefilter::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn line(kind: &str, body: Value) -> Vec<u8> {
        json!({"seq": 3, "ts": 9, "cwd": "/p", "source": "intent:claude-code", "kind": kind,
               "tool_use_id": "t", "body": body})
        .to_string()
        .into_bytes()
    }

    fn search(pattern: &str, options: Options, lines: &[Vec<u8>]) -> Vec<Hit> {
        let p = Pattern::new(pattern, options).expect("pattern");
        let mut block = lines.join(&b'\n');
        block.push(b'\n');
        let mut hits = Vec::new();
        p.candidates(&block, |l| {
            let e = Entry::parse(l, 1).expect("entry");
            hits.extend(p.hits(&e, &Filter::default()));
        });
        hits
    }

    #[test]
    fn finds_commands_paths_prompts_and_outputs_not_json() {
        let lines = [
            line(
                "tool_call",
                json!({"tool_name": "Bash", "tool_input": {"command": "cargo test --all"},
                       "paths": []}),
            ),
            line(
                "tool_call",
                json!({"tool_name": "Write", "tool_input": {"file_path": "/p/cargo.toml"},
                       "paths": ["/p/cargo.toml"]}),
            ),
            line("prompt", json!({"prompt": "please\nrun cargo"})),
            line(
                "tool_result",
                json!({"tool_name": "Bash", "tool_response": {"stdout": "ok\ncargo done"}, "ok": true}),
            ),
        ];
        let hits = search("cargo", Options::default(), &lines);
        let fields: Vec<(&str, usize)> = hits.iter().map(|h| (h.field.as_str(), h.line)).collect();
        assert_eq!(
            fields,
            [("command", 1), ("path", 1), ("prompt", 2), ("output", 2)]
        );
        assert_eq!(&hits[0].text[hits[0].start..hits[0].end], "cargo");
        // Member names and the envelope are not searched.
        assert!(search("tool_name", Options::default(), &lines).is_empty());
        assert!(search("claude-code", Options::default(), &lines).is_empty());
    }

    #[test]
    fn quotes_backslashes_and_control_characters_are_found_through_json_escapes() {
        let lines = [line(
            "tool_call",
            json!({"tool_name": "Bash", "tool_input": {"command": "echo \"a\\b\"\tc\u{1b}"}}),
        )];
        for needle in ["\"a\\b\"", "\tc\u{1b}", "b\"\t"] {
            let hits = search(
                needle,
                Options {
                    fixed: true,
                    ..Options::default()
                },
                &lines,
            );
            assert_eq!(hits.len(), 1, "{needle:?}");
        }
        let hits = search(r#"a\\b"\s"#, Options::default(), &lines);
        assert_eq!(hits.len(), 1);
    }

    #[test]
    fn tool_filter_and_case() {
        let lines = [
            line(
                "tool_call",
                json!({"tool_name": "Bash", "tool_input": {"command": "Make"}}),
            ),
            line(
                "tool_call",
                json!({"tool_name": "Grep", "tool_input": {"pattern": "make"}}),
            ),
        ];
        let p = Pattern::new(
            "make",
            Options {
                ignore_case: true,
                fixed: false,
            },
        )
        .expect("p");
        let filter = Filter {
            tool: Some("bash".into()),
            ..Filter::default()
        };
        let hits: Vec<Hit> = lines
            .iter()
            .flat_map(|l| p.hits(&Entry::parse(l, 1).expect("e"), &filter))
            .collect();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].field, "command");
    }

    #[test]
    fn patterns_without_a_prefix_still_search_every_line() {
        assert!(
            !Pattern::new(".*x", Options::default())
                .expect("p")
                .has_prefilter()
        );
        assert!(
            Pattern::new("abc|de", Options::default())
                .expect("p")
                .has_prefilter()
        );
        let lines = [line("prompt", json!({"prompt": "xyz"}))];
        assert_eq!(search(r"\wyz", Options::default(), &lines).len(), 1);
        assert!(Pattern::new("(", Options::default()).is_err());
    }

    #[test]
    fn long_lines_are_cut_around_the_match() {
        let long = format!("{}needle{}", "a".repeat(500), "é".repeat(500));
        let (text, s, e) = window(&long, 500, 506);
        assert_eq!(&text[s..e], "needle");
        assert!(text.starts_with('…') && text.ends_with('…'));
    }

    proptest! {
        /// The prefilter never skips a line that holds a hit.
        #[test]
        fn the_prefilter_never_misses(
            text in "[a-c\"\\\\\n\t\u{1b}é ]{0,24}",
            pattern in "[a-c\"\\\\\t\u{1b}é.*|?+ ]{1,6}",
            ignore_case in any::<bool>(),
            fixed in any::<bool>(),
        ) {
            let options = Options { ignore_case, fixed };
            let Ok(p) = Pattern::new(&pattern, options) else { return Ok(()); };
            let l = line("prompt", json!({"prompt": text}));
            let e = Entry::parse(&l, 1).expect("entry");
            let direct = p.hits(&e, &Filter::default());
            let mut block = l.clone();
            block.push(b'\n');
            let mut through = Vec::new();
            p.candidates(&block, |c| through.extend(p.hits(&Entry::parse(c, 1).expect("e"), &Filter::default())));
            prop_assert_eq!(direct, through);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]
        /// Reading a line through `line_hits` (which skips entries whose
        /// searched members cannot match) finds exactly what parsing it
        /// whole finds, whichever member the text is in.
        #[test]
        fn line_hits_are_the_whole_parse_hits(
            around in ("[a-c\n ]{0,4}", "[a-cé\" ]{0,4}"),
            inner in "[a-c\"\\\\\n\té ]{1,6}",
            holds in any::<bool>(),
            fixed in any::<bool>(),
            ignore_case in any::<bool>(),
            kind in prop::sample::select(vec!["tool_call", "tool_result", "prompt", "turn_end", "hook", "session_start"]),
            member in prop::sample::select(vec!["command", "file_path", "stdout", "error", "prompt",
                                                "last_assistant_message", "cwd", "paths", "other"]),
            source in prop::sample::select(vec!["intent:claude-code", "intent:codex", "exit:nd7"]),
            twice in any::<bool>(),
        ) {
            let pattern = if fixed { inner.clone() } else { regex::escape(&inner).replace('a', "[ab]") };
            let text = if holds { format!("{}{inner}{}", around.0, around.1) } else { around.0 };
            let Ok(p) = Pattern::new(&pattern, Options { ignore_case, fixed }) else { return Ok(()); };
            let body = match member {
                "command" | "file_path" => json!({"tool_name": "Bash", "tool_input": {member: text}}),
                "stdout" => json!({"tool_name": "Bash", "tool_input": {"command": "x"},
                                   "tool_response": {"stdout": text}}),
                "paths" => json!({"paths": [text]}),
                "other" => json!({"raw": {"prompt": text}, "tool_name": text}),
                m => json!({m: text}),
            };
            let mut l = json!({"seq": 3, "ts": 9, "source": source, "kind": kind, "body": body}).to_string();
            if twice {
                // A member given twice: the whole parse keeps one of them.
                l = l.replacen("\"body\":{", &format!("\"body\":{{\"prompt\":\"{}\",", "zz"), 1);
                l = l.replacen("{\"seq\"", "{\"kind\":\"prompt\",\"seq\"", 1);
            }
            let whole = match Entry::parse(l.as_bytes(), 1) {
                Ok(e) => p.hits(&e, &Filter::default()),
                Err(_) => Vec::new(),
            };
            prop_assert_eq!(whole, p.line_hits(l.as_bytes(), &Filter::default()));
        }
    }

    #[test]
    fn a_literal_only_outside_the_searched_members_rules_the_line_out() {
        let p = Pattern::new("REWRITTEN", Options::default()).expect("p");
        let Prefilter::Any(ac) = &p.prefilter else {
            panic!("a literal pattern has a prefilter");
        };
        let result = line(
            "tool_result",
            json!({"tool_name": "Bash", "tool_input": {"command": "echo REWRITTEN"},
                   "tool_response": {"stdout": "hello"}}),
        );
        assert!(!may_hit(&result, ac));
        assert!(p.line_hits(&result, &Filter::default()).is_empty());
        let call = line(
            "tool_call",
            json!({"tool_name": "Bash", "tool_input": {"command": "echo REWRITTEN"}}),
        );
        assert!(may_hit(&call, ac));
        assert_eq!(p.line_hits(&call, &Filter::default()).len(), 1);
    }
}
