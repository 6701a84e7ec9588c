//! What ran (issue 32), read back: `nd7 verify` holds what the exit claimed
//! it ran against what the kernel ran (ADR-0137), and `nd7 show` says what
//! ran under each command. The runs are real (`nd7 run` as the ordinary
//! account, the agent a shell script); a chain whose claim and effect
//! disagree is made by rewriting a real one and sealing it again, as anyone
//! who can write the logs could.
#![cfg(target_os = "linux")]

use std::path::Path;

use nd7_core::chain::{self, Hash};

use crate::runs::*;
use crate::world::*;

/// Rewrites the chain in `dir` with `edit` applied to each entry (without
/// its `prev` and hash), sealing every entry and `head` again, so the chain
/// itself verifies.
fn reseal(dir: &Path, edit: impl Fn(&str) -> String) {
    let session = dir
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let text = std::fs::read_to_string(dir.join("events.ndjson")).expect("the run's log");
    let mut out = String::new();
    let mut prev = Hash::session_fingerprint(&session);
    for line in text.lines() {
        let cut = line.rfind(",\"prev\":\"").expect("prev");
        let body = edit(&line[..cut]);
        let sealed = chain::seal(format!("{body},\"prev\":\"{prev}\"}}").as_bytes());
        prev = chain::read_stated(&sealed[..sealed.len() - 1])
            .expect("sealed")
            .hash;
        out.push_str(std::str::from_utf8(&sealed).expect("utf8"));
    }
    std::fs::write(dir.join("events.ndjson"), out).expect("write the log");
    let n = text.lines().count() - 1;
    std::fs::write(dir.join("head"), format!("{n} {prev}\n")).expect("write head");
}

/// The exit's `exec` entry claims the text it hands the shell; the observer
/// reads what the command's first process became after its exec. A real run
/// agrees (exit 0); the same chain with the `exec` entry's text changed and
/// sealed again (a claim the kernel did not run) is a disagreement: verify
/// exits 1 and names the claim and what ran, path, identity and arguments.
///
/// Guards `read::claims` as `nd7 verify`'s `report_claims` uses it: without
/// it the rewritten chain verifies clean.
#[test]
fn verify_names_a_claimed_command_its_first_process_did_not_run() {
    let w = World::new();
    let out = w.run_agent(
        r#""$EXEC" '/bin/true claim-marker'
echo done"#,
    );
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    let dir = run_chain(&w);
    let v = verify(&w, &dir);
    let said = text(&v.stdout);
    assert!(v.status.success(), "{said}");
    assert!(!said.contains("NOT RECONCILED"), "{said}");
    let exec_seq = entries(&dir)
        .iter()
        .find(|e| e["kind"] == "exec" && e["source"] == "exit:nd7")
        .map(|e| e["seq"].clone())
        .expect("the command's exec entry");

    reseal(&dir, |entry| {
        if entry.contains(r#""kind":"exec""#) && entry.contains(r#""source":"exit:nd7""#) {
            entry.replace("claim-marker", "harmless-marker")
        } else {
            entry.to_string()
        }
    });
    let v = verify(&w, &dir);
    let said = text(&v.stdout);
    assert_eq!(v.status.code(), Some(1), "{said}{}", text(&v.stderr));
    let line = said
        .lines()
        .find(|l| l.starts_with(&format!("NOT RECONCILED: entry {exec_seq}: ")))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        line.contains("command `/bin/true harmless-marker` was claimed by the exit"),
        "{line}"
    );
    assert!(
        line.contains("with arguments `") && line.ends_with(" -c /bin/true claim-marker`"),
        "{line}"
    );
    let bash = std::fs::canonicalize("/bin/bash").expect("bash");
    let meta = std::fs::metadata(&bash).expect("bash");
    let hash = blake3::hash(&std::fs::read(&bash).expect("bash")).to_hex();
    use std::os::unix::fs::MetadataExt;
    assert!(
        line.contains(&format!(
            "ran {} ({}:{}, blake3 {hash})",
            bash.display(),
            meta.dev(),
            meta.ino()
        )),
        "{line}"
    );
}
