//! On macOS, `nd7-exec` starts outside the sandbox (it is the floor's one
//! exit), so dyld must not load code into it from `DYLD_*` variables a
//! confined process set: a `__RESTRICT,__restrict` section makes dyld ignore
//! them for this binary. It also records the target triple, which
//! `nd7 self-update` checks a release against.
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
}
