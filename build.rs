//! On macOS, `nd7-exec` starts outside the sandbox (it is the floor's one
//! exit), so dyld must not load code into it from `DYLD_*` variables a
//! confined process set: a `__RESTRICT,__restrict` section makes dyld ignore
//! them for this binary. It also records the target triple, which
//! `nd7 self-update` checks a release against.
//!
//! On Linux with glibc, the binaries carry their unwinder instead of loading
//! `libgcc_s.so.1` at every start ([`unwinder_linked_in`], ADR-0145).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // `nd7 self-update` refuses a release built for another target.
    println!(
        "cargo:rustc-env=ND7_TARGET={}",
        std::env::var("TARGET").unwrap_or_default()
    );
    println!("cargo:rerun-if-env-changed=ND7_RELEASE_KEY");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") {
        println!(
            "cargo:rustc-link-arg-bin=nd7-exec=-Wl,-sectcreate,__RESTRICT,__restrict,/dev/null"
        );
    }
    let linux_gnu = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu");
    if linux_gnu && let Err(why) = unwinder_linked_in() {
        println!("cargo:warning=the unwinder stays in libgcc_s.so.1 (slower starts): {why}");
    }
}

/// Links the unwinder (`libgcc_eh.a`, what a `crt-static` build links) into
/// every binary of this package, where rustc asks for `-lgcc_s`: every Rust
/// program on glibc otherwise loads libgcc_s.so.1 at start, and that library
/// and its constructor (which probes the CPU) cost each `nd7 record` and each
/// `nd7-exec` 0.15x of a bare C program's whole run (docs/benchmarks.md). A
/// linker script named `libgcc_s.so` in a directory searched before the
/// system's stands for the shared library. The binaries stay
/// position-independent and dynamically linked against libc. Where the C
/// compiler that links has no `libgcc_eh.a`, nothing changes.
fn unwinder_linked_in() -> Result<(), String> {
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    // Without a linker named for the target, a cross build's `cc` would
    // answer with the host's archive.
    let cross = std::env::var("TARGET").ok() != std::env::var("HOST").ok();
    let linker = match std::env::var("RUSTC_LINKER") {
        Ok(linker) => linker,
        Err(_) if cross => return Err("a cross build names no linker".into()),
        Err(_) => "cc".into(),
    };
    let out = std::process::Command::new(&linker)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .map_err(|e| format!("cannot run {linker}: {e}"))?;
    let path = String::from_utf8(out.stdout)
        .map_err(|_| format!("{linker} -print-file-name: not UTF-8"))?;
    let archive = std::path::PathBuf::from(path.trim());
    if !archive.is_absolute() || !archive.is_file() {
        return Err(format!("{linker} knows no libgcc_eh.a"));
    }
    let dir = std::path::PathBuf::from(std::env::var("OUT_DIR").map_err(|e| e.to_string())?)
        .join("unwinder");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let script = dir.join("libgcc_s.so");
    std::fs::write(&script, format!("INPUT(\"{}\")\n", archive.display()))
        .map_err(|e| format!("{}: {e}", script.display()))?;
    println!("cargo:rustc-link-search=native={}", dir.display());
    Ok(())
}
