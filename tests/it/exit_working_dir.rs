//! The working directory a command through the exit starts in never leads
//! past the locks: the session sits in its own namespaces with the project
//! pinned onto itself (ADR-0086), so a relative directory or a magic link
//! (`/proc/self/cwd`, `/proc/self/fd/N`) sent by a client the agent wrote
//! would start the command beneath the pin, or outside the namespaces.
#![cfg(target_os = "linux")]

use crate::world::*;

/// An exit client of the agent's own, standing in for `nd7-exec`: it sends
/// the exit a request with the working directory it is given verbatim (the
/// wire lets any bytes through: `nd7-exec` sends `current_dir()`, but the
/// agent can speak the protocol itself) and prints how the command ended.
const CLIENT: &str = r#"
import os, socket, struct, sys
def field(b): return struct.pack('<I', len(b)) + b
cmd, cwd = sys.argv[1].encode(), sys.argv[2].encode()
env = [b'PATH=/usr/bin:/bin']
body = field(cmd) + field(cwd) + struct.pack('<I', len(env)) + b''.join(field(e) for e in env)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(os.environ['ND7_RUN'] + '/exit.sock')
socket.send_fds(s, [struct.pack('<I', len(body)) + body], [0, 1, 2])
data = b''
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
print('frame:' + (data[:1].decode() if data else 'none'))
"#;

/// Writes the client into `dir` (the project, or the home).
fn client(w: &World, dir: &std::path::Path) {
    std::fs::write(dir.join("exitc.py"), CLIENT).expect("write client");
    w.own();
}

/// A git repository in `dir`, as the account made it.
fn repo_in(w: &World, dir: &std::path::Path) {
    let out = w
        .command_in(dir, "git", &["init", "-q", "-b", "main"])
        .output()
        .expect("git init");
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A command through the exit asked to run in a *relative* directory (".")
/// would start in the session's own working directory; had the session kept
/// the one it took before its binds (ADR-0086: the project is pinned onto
/// itself, so that directory lies beneath the pin), `.git/config`,
/// `.git/hooks` and `.envrc` would be reached from there without crossing
/// any lock. Guards two lines, either of which holds it alone (the test fails
/// with both removed): `exit.rs` `start` refuses a directory that is not
/// absolute, and `run.rs` moves the session to the project by path once the
/// binds are made.
#[test]
fn a_relative_working_directory_through_the_exit_does_not_reach_past_the_locks() {
    let w = World::new();
    repo_in(&w, &w.proj());
    std::fs::write(w.proj().join(".envrc"), "export SAFE=1\n").expect("write");
    client(&w, &w.proj());
    let config_before = std::fs::read(w.proj().join(".git/config")).expect("config");
    let plant = "printf '[core]\\n\\tfsmonitor = touch $OUT/fsmonitor; false\\n' >> .git/config; \
                 printf '#!/bin/sh\\ntouch $OUT/hook\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
                 echo 'touch $OUT/envrc' >> .envrc; echo \"in:$(pwd)\"";
    // Through the exit with an absolute directory (as `nd7-exec` sends it),
    // then with ".".
    let out = w.run_agent(&format!(
        "/usr/bin/python3 exitc.py \"{plant}\" \"$PWD\" 2>&1 | sed 's/^/absolute:/'\n\
         /usr/bin/python3 exitc.py \"{plant}\" . 2>&1 | sed 's/^/relative:/'\n"
    ));
    let stdout = text(&out.stdout);
    let config_after = std::fs::read(w.proj().join(".git/config")).expect("config");
    let hook = w.proj().join(".git/hooks/pre-commit").exists();
    let envrc = std::fs::read_to_string(w.proj().join(".envrc")).expect("envrc");
    assert!(
        config_after == config_before && !hook && envrc == "export SAFE=1\n",
        "locks bypassed: config changed {}, hook planted {hook}, envrc {envrc:?}\n{stdout}\n{}",
        config_after != config_before,
        text(&out.stderr)
    );
}

/// The same with the home as the project: `~/.bashrc` is locked, and the
/// session's working directory is the home beneath its pin.
#[test]
fn a_relative_working_directory_does_not_reach_past_the_homes_locks() {
    let w = World::new();
    std::fs::write(w.home().join(".bashrc"), "# mine\n").expect("write");
    client(&w, &w.home());
    let agent = w.agent(
        "/usr/bin/python3 exitc.py \"echo 'touch $OUT/bashrc' >> .bashrc; echo wrote\" . 2>&1\n",
    );
    let out = w
        .command_in(&w.acct, ND7, &["run", &agent])
        .output()
        .expect("nd7 run in the home");
    let bashrc = std::fs::read_to_string(w.home().join(".bashrc")).expect("bashrc");
    assert_eq!(
        bashrc,
        "# mine\n",
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The same through an absolute directory that is a magic link: the
/// session's working directory (`/proc/self/cwd` in the child before exec
/// is the session's), or a descriptor the child still holds before exec
/// (`/proc/self/fd/N`): among them the root outside the namespaces
/// (`ns::outside_root`), from which no lock is seen at all. Guards
/// `RESOLVE_NO_MAGICLINKS` where `exit.rs` `start` opens the directory (and
/// the child moving there by that descriptor, not by path again).
#[test]
fn a_magic_link_as_working_directory_does_not_reach_past_the_locks() {
    let w = World::new();
    repo_in(&w, &w.proj());
    client(&w, &w.proj());
    let config_before = std::fs::read_to_string(w.proj().join(".git/config")).expect("config");
    let plant =
        |tag: &str| format!("printf '#{tag}\\n' >> .git/config && echo {tag}:wrote-in:$(pwd)");
    let mut script = format!(
        "/usr/bin/python3 exitc.py \"{}\" /proc/self/cwd 2>&1 | grep wrote\n",
        plant("cwd")
    );
    for n in 3..24 {
        script.push_str(&format!(
            "/usr/bin/python3 exitc.py \"{}\" \"/proc/self/fd/{n}$PWD\" 2>&1 | grep wrote\n",
            plant(&format!("fd{n}"))
        ));
    }
    let out = w.run_agent(&script);
    let config_after = std::fs::read_to_string(w.proj().join(".git/config")).expect("config");
    assert_eq!(
        config_after,
        config_before,
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}
