//! `nd7 verify --transcript SESSION`: the chain first, as `nd7 verify` does,
//! then each transcript file the session anchors held against its anchors.
//!
//! Exit status: 1 when the chain is broken or a file contradicts an anchor
//! (the first such anchor is named); otherwise 2 when a file could not be
//! read, nothing is anchored, or the anchoring stopped because it could not
//! read a file (a `transcript_gap` of reason `refused` or `unreadable` after
//! its last anchor: a second name, a link, a file it could not open), since
//! whatever the file holds past that anchor was never anchored and the check
//! cannot vouch for it; 0 when every file extends every anchor. The summary
//! line of each file says how many bytes lie past its last anchor and how
//! many gaps the log records for it.

use std::process::ExitCode;

use nd7_core::read::safe::plural;
use nd7_core::session_log::SessionLog;
use nd7_core::transcript::GapReason;
use nd7_core::transcript::check::{self, Verdict};

/// What a clean result does and does not show, for a log `nd7 record`
/// anchored itself.
const CAVEAT: &str = "transcript: each file is, byte for byte, what it was when each anchor was taken (bytes after the last anchor are not covered); the anchors were taken by nd7 record in the hooks' own processes, so anyone who can write this log could have written them too, and nothing shows the file held what the agent (Claude Code, Codex) wrote before an anchor was taken";
/// The same for a run's chain, anchored by `nd7 run`.
const RUN_CAVEAT: &str = "transcript: each file is, byte for byte, what it was when each anchor was taken (bytes after the last anchor are not covered); nd7 run took the anchors outside the sandbox, where the agent cannot forge them, but the agent could write the transcript itself before an anchor was taken; and the log is only as strong as the machine: anyone who can write this account's files outside the sandbox could have written it whole";

pub fn verify(target: &str, chain: impl FnOnce(&SessionLog) -> ExitCode) -> ExitCode {
    let log = match crate::resolve_target(target) {
        Ok(log) => log,
        Err(e) => return crate::read_cmds::fail("verify", e),
    };
    let chain_code = chain(&log);
    if chain_code == ExitCode::from(2) {
        return chain_code;
    }
    let anchored = match check::collect(&log) {
        Ok(anchored) => anchored,
        Err(e) => return crate::read_cmds::fail("verify", e),
    };
    // The transcript's path and what is said of it come from the hooks'
    // payloads, which the agent can write: shown inert (ADR-0090).
    let inert = |text: &str| nd7_core::read::safe::term(text, nd7_core::read::safe::Lines::One);
    for note in &anchored.notes {
        println!(
            "transcript note: entry {}: {} ({}): {}: {}",
            note.seq,
            inert(&note.kind),
            inert(&note.what),
            inert(&note.path),
            inert(&note.detail)
        );
    }
    if anchored.files.is_empty() {
        eprintln!(
            "nd7 verify: {}: no transcript anchor in this session; nothing was checked",
            log.dir().display()
        );
        return if chain_code == ExitCode::SUCCESS {
            ExitCode::from(2)
        } else {
            chain_code
        };
    }
    let (mut contradicted, mut unreadable) = (false, false);
    for ((root, raw_path), anchors) in &anchored.files {
        let path = &inert(raw_path);
        let last = anchors.iter().map(|a| a.seq).max().unwrap_or_default();
        let gaps: Vec<&check::Note> = anchored
            .notes
            .iter()
            .filter(|n| n.kind == nd7_core::transcript::GAP && &n.path == raw_path)
            .collect();
        // The anchoring gave up on the file after its last anchor because
        // it could not read it: what came after was never anchored.
        let stopped = gaps.iter().find(|n| {
            n.seq > last
                && (n.what == GapReason::Refused.as_str()
                    || n.what == GapReason::Unreadable.as_str())
        });
        match check::check_file(root, raw_path, anchors) {
            Verdict::Holds {
                anchors,
                anchored,
                size,
            } => {
                let tail = size.saturating_sub(anchored);
                println!(
                    "transcript {path}: holds all {anchors} anchors (the first {anchored} of its {size} bytes; {tail} after the last anchor, anchored by nothing; {} gap{} recorded)",
                    gaps.len(),
                    plural(gaps.len(), "", "s")
                );
                if let Some(gap) = stopped {
                    unreadable = true;
                    println!(
                        "TRANSCRIPT NOT COVERED: {path}: the anchoring stopped at entry {} ({}: {}); the {tail} bytes after entry {last}'s anchor were never anchored, so nothing here vouches for them",
                        gap.seq,
                        inert(&gap.what),
                        inert(&gap.detail)
                    );
                }
            }
            Verdict::Contradicts(c) => {
                contradicted = true;
                println!("TRANSCRIPT CHANGED: {path}: {}", inert(&c.to_string()));
            }
            Verdict::Unreadable(why) => {
                unreadable = true;
                eprintln!(
                    "nd7 verify: transcript {}; nothing was checked against it",
                    inert(&why.to_string())
                );
            }
        }
    }
    if contradicted || chain_code != ExitCode::SUCCESS {
        return ExitCode::from(1);
    }
    if unreadable {
        return ExitCode::from(2);
    }
    if nd7_core::run_log::opens_a_run(&log) {
        println!("{RUN_CAVEAT}");
    } else {
        println!("{CAVEAT}");
    }
    ExitCode::SUCCESS
}
