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

/// The relative relocations the dynamic loader applies at `bin`'s start, as
/// its dynamic section counts them (`DT_RELACOUNT`, `DT_RELCOUNT`, and a
/// packed `DT_RELRSZ` read as one word each): each written page is a
/// copy-on-write fault at every start.
fn relative_relocations(bin: &str) -> u64 {
    let elf = std::fs::read(bin).expect("read the binary");
    assert_eq!(&elf[..5], b"\x7fELF\x02", "{bin}: a 64-bit ELF file");
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().expect("2 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().expect("8 bytes"));
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36), u16_at(0x38));
    let dynamic = (0..phnum as usize)
        .map(|i| phoff + i * phentsize as usize)
        .find(|&ph| u32::from_le_bytes(elf[ph..ph + 4].try_into().expect("4 bytes")) == 2)
        .map(|ph| (u64_at(ph + 8) as usize, u64_at(ph + 0x20) as usize))
        .expect("a dynamic section");
    let (offset, size) = dynamic;
    let mut count = 0;
    for entry in (offset..offset + size).step_by(16) {
        match u64_at(entry) {
            0 => break,
            0x6fff_fff9 | 0x6fff_fffa => count += u64_at(entry + 8),
            35 => count += u64_at(entry + 8) / 8,
            _ => {}
        }
    }
    count
}

/// The hooks `nd7 setup` and `nd7 run` wire start `nd7-record`, which holds
/// only the recorder (ADR-0151): the loader's work at its start is a small
/// part of `nd7`'s (the regex tables, vtables and strings of every other
/// command stay out). Fails if the recorder's code pulls the rest of nd7 in.
#[cfg(target_env = "gnu")]
#[test]
fn nd7_record_starts_with_a_fraction_of_nd7s_relocations() {
    let (nd7, record) = (relative_relocations(ND7), relative_relocations(ND7_RECORD));
    assert!(
        record > 0,
        "nd7-record is position-independent (ASLR, ADR-0145)"
    );
    assert!(
        record * 4 < nd7,
        "nd7-record applies {record} relocations at start, nd7 {nd7}"
    );
}
