//! On macOS, `nd7-exec` starts outside the sandbox (it is the floor's one
//! exit), so dyld must not load code into it from `DYLD_*` variables a
//! confined process set: a `__RESTRICT,__restrict` section makes dyld ignore
//! them for this binary. Nothing to do elsewhere.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") {
        println!(
            "cargo:rustc-link-arg-bin=nd7-exec=-Wl,-sectcreate,__RESTRICT,__restrict,/dev/null"
        );
    }
}
