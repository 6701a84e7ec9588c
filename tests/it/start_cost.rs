//! What a process start costs on the two paths every agent action takes
//! (ADR-0145): `nd7-record` (or `nd7 record`), which every hook runs
//! (ADR-0151), and `nd7-exec`, which every Bash command under `nd7 run`
//! goes through. Each test holds one
//! choice that keeps those starts cheap; the figures are in
//! docs/benchmarks.md (bench/hookpath.sh, bench/effects.sh).
#![cfg(target_os = "linux")]

use std::process::Output;

use crate::world::*;

fn lines(out: &Output) -> Vec<String> {
    text(&out.stdout).lines().map(str::to_string).collect()
}

/// The binaries carry their unwinder (libgcc_eh, linked in by build.rs)
/// instead of loading libgcc_s.so.1 at every start, which cost each hook
/// 0.15x of a bare C program's whole run. The dynamic loader finds the
/// libraries a binary needs by the names its dynamic section holds.
#[cfg(target_env = "gnu")]
#[test]
fn the_binaries_load_no_libgcc_s_at_start() {
    for bin in [ND7, ND7_EXEC, ND7_RECORD] {
        let bytes = std::fs::read(bin).expect("read the binary");
        assert!(
            memchr::memmem::find(&bytes, b"libgcc_s.so").is_none(),
            "{bin} loads libgcc_s.so.1 at start"
        );
    }
}

/// `nd7-exec` waits for its command and passes signals on from its one
/// thread: a second thread would be one more start in every Bash command
/// and, with the exec observer on, two more stops of it. That signals still
/// come through is held in `sandbox.rs` and `floor_process.rs`.
#[test]
fn nd7_exec_waits_for_its_command_on_one_thread() {
    let w = World::new();
    let out = w.run_agent(
        r#"
"$EXEC" 'touch started; while [ ! -e go ]; do sleep 0.01; done; exit 4' &
wait_for started
echo "threads:$(ls /proc/$!/task | wc -l)"
touch go
wait $!; echo "exit:$?"
"#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(lines(&out), ["threads:1", "exit:4"]);
}
