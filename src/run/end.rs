//! The steps of a run's end ([`super::phases::Finished::end`] takes them in
//! order): what goes into the chain before its last entry, and what the
//! user is told.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use crate::read::safe::{self, plural};
use crate::run_entry::{self, Ended};
use crate::run_log::RunLog;
use crate::sandbox::Leftovers;
use crate::watch;

use super::terminal::{Terminal, reset_terminal};

/// The status `nd7 run` exits with when files that run outside the floor
/// changed during the run, whatever the program's own status (which the
/// warning names).
pub const CHANGED_STATUS: i32 = 3;

/// Says `line` as a warning of `nd7 run`'s.
pub(super) fn warn(announce: &dyn Fn(&str), line: &str) {
    announce(&format!("nd7 run: warning: {line}"));
}

/// The keeper refuses a command's connects to the hooks' door itself
/// (ADR-0051), and keeps them until now: each of the first is a `refused`
/// entry, the rest are counted.
pub(super) fn door_refusals(log: &RunLog, left: Option<&Leftovers>) {
    let Some(left) = left else {
        return;
    };
    for (pid, name) in &left.door_refused_first {
        log.refused(
            "record",
            Some(*pid),
            None,
            &format!(
                "process {pid} ({name}) runs inside a command through the exit, and only the sandbox's own processes may reach the hooks' door; nd7 run's keeper refused its connect (written at the run's end)"
            ),
        );
    }
    log.refused_uncounted(
        left.door_refused
            .saturating_sub(left.door_refused_first.len()) as u64,
    );
}

/// The processes the run left running that were ended: written down, then
/// named to the user (cut to the terminal's `width`).
pub(super) fn processes_ended(
    log: &RunLog,
    left: Option<Leftovers>,
    width: Option<usize>,
    announce: &dyn Fn(&str),
) {
    let Some(left) = left.filter(|l| l.count > 0) else {
        return;
    };
    let _ = log.note(
        run_entry::PROCESSES_ENDED,
        None,
        None,
        &run_entry::processes_ended_body(left.count, &left.processes),
    );
    let named: Vec<String> = left
        .processes
        .iter()
        .map(|(pid, name)| format!("{pid} ({})", safe::term(name, safe::Lines::One)))
        .collect();
    announce(&safe::fit(
        &format!(
            "nd7 run: ended {} process{} the session left running: {}{}",
            left.count,
            plural(left.count, "", "es"),
            named.join(", "),
            if left.count > named.len() {
                ", …"
            } else {
                ""
            }
        ),
        width,
    ));
}

/// How the agent's program ended, as the chain's end says it.
pub(super) fn ended(status: ExitStatus) -> Ended {
    match (status.code(), status.signal()) {
        (Some(code), _) => Ended::Exited(code),
        (None, Some(sig)) => Ended::Signaled(sig),
        (None, None) => Ended::Exited(255),
    }
}

/// Every change to a file that runs later, one entry for all.
pub(super) fn findings(log: &RunLog, findings: &[watch::report::Finding]) {
    if !findings.is_empty() {
        let _ = log.note(
            run_entry::DEFERRED_CHANGED,
            None,
            None,
            &watch::report::log_body(findings),
        );
    }
}

/// Writes the chain's end; with an agent's hooks (`agent` names it), warns
/// of what the reconciliation found unmatched.
pub(super) fn chain_end(log: &RunLog, ended: &Ended, agent: Option<&str>, announce: &dyn Fn(&str)) {
    match (log.end(ended), agent) {
        (Ok(tally), Some(agent)) => {
            if !tally.unmatched_execs.is_empty() {
                warn(
                    announce,
                    &format!(
                        "{} of {} Bash commands ran through the exit without a matching hook entry ({agent}'s hooks did not announce them); nd7's own entries in log {} show each one",
                        tally.unmatched_execs.len(),
                        tally.execs,
                        log.id()
                    ),
                );
            }
            if !tally.execs_without_result.is_empty() {
                warn(
                    announce,
                    &format!(
                        "{} of {} Bash commands ran through the exit for a Bash call {agent} reported no result for (denied, or never run by it); nd7 verify {} names each one",
                        tally.execs_without_result.len(),
                        tally.execs,
                        log.id()
                    ),
                );
            }
        }
        (Ok(_), None) => {}
        (Err(e), _) => warn(
            announce,
            &format!("cannot write the end of log {}: {e}", log.id()),
        ),
    }
}

/// Warns of hook entries the door did not take for the run's budget.
pub(super) fn over_budget(log: &RunLog, announce: &dyn Fn(&str)) {
    let over = log.hooks_over_budget();
    if over > 0 {
        warn(
            announce,
            &format!(
                "{over} hook entr{} not recorded: this run's hooks sent more through the door than one run takes ({} bytes); the exit's own entries in log {} still show every command",
                plural(over, "y was", "ies were"),
                log.door_budget(),
                log.id()
            ),
        );
    }
}

/// The paths the floor refused, with the grants that would allow them.
pub(super) fn refusals(log: &RunLog, home: &Path, terminal: &Terminal, announce: &dyn Fn(&str)) {
    for line in crate::refusals::summary(&log.floor_refusals(), home, log.id()) {
        announce(&safe::fit(&format!("nd7 run: {line}"), terminal.width()));
    }
}

/// The last lines and the status to exit with: the program's (128+N for
/// signal N), or [`CHANGED_STATUS`] after the changes to files that run
/// later, then nd7's own closing lines after a reset (ADR-0090): nothing
/// in a file's content can clear or cut short what follows it.
pub(super) fn close(
    ended: &Ended,
    findings: &[watch::report::Finding],
    terminal: &Terminal,
    announce: &dyn Fn(&str),
) -> i32 {
    let (code, how) = match ended {
        Ended::Exited(code) => (*code, format!("the program exited with status {code}")),
        Ended::Signaled(sig) => (128 + sig, format!("the program was ended by signal {sig}")),
        Ended::CallerGone | Ended::NotStarted(_) => {
            (255, "the program ended in an unknown way".to_string())
        }
    };
    if findings.is_empty() {
        terminal.give_back();
        return code;
    }
    let warning = watch::report::render(findings, &how, terminal.width());
    announce(warning.changes.trim_end());
    reset_terminal();
    announce(&warning.close);
    // Again, last: answers that came while nd7 wrote its lines.
    terminal.give_back();
    CHANGED_STATUS
}

/// The hosts nd7's proxy refused this run, once it has ended.
pub(super) fn net_refusals(
    refused: &[String],
    unwritten: u64,
    log_id: &str,
    announce: &dyn Fn(&str),
) {
    if refused.is_empty() {
        return;
    }
    let shown: Vec<String> = refused
        .iter()
        .take(20)
        .map(|h| crate::read::safe::term(h, crate::read::safe::Lines::One))
        .collect();
    let more = refused.len().saturating_sub(shown.len());
    let log = if unwritten > 0 {
        format!("log {log_id} has the first, as net entries; {unwritten} more were only counted")
    } else {
        format!("log {log_id} has each, as net entries")
    };
    announce(&format!(
        "nd7 run: the proxy refused connections to {}{} ({log}); `nd7 allow --net HOST` allows one",
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        },
    ));
}
