//! Times the calls the keeper makes for a session (issue 29, item 4):
//! `chmod` and `utimensat` on one file, N of each, in batches of 1,000; the
//! report is the median batch per call, in microseconds. Run unconfined and
//! under `nd7 run` (`bench/attrs.sh`) to see what the keeper's round trip
//! costs each call.
//!
//! usage: attrbench N FILE

use std::ffi::CString;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [n, file] = &args[..] else {
        return Err("usage: attrbench N FILE".into());
    };
    let n: usize = n.parse()?;
    let path = CString::new(file.as_str())?;
    let batches = (n / 1000).max(1);
    for (name, call) in [
        ("chmod", chmod as fn(&CString, usize) -> i32),
        ("utimensat", touch),
    ] {
        let mut times = Vec::with_capacity(batches);
        for _ in 0..batches {
            let start = Instant::now();
            for i in 0..1000 {
                if call(&path, i) != 0 {
                    return Err(format!("{name}: {}", std::io::Error::last_os_error()).into());
                }
            }
            times.push(start.elapsed().as_secs_f64() * 1e6 / 1000.0);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{name}: {:.2} us per call (median of {batches} batches of 1000)",
            times[batches / 2]
        );
    }
    Ok(())
}

fn chmod(path: &CString, i: usize) -> i32 {
    let mode = if i.is_multiple_of(2) { 0o644 } else { 0o600 };
    // SAFETY: a NUL-terminated path that lives for the call.
    unsafe { libc::chmod(path.as_ptr(), mode) }
}

fn touch(path: &CString, _: usize) -> i32 {
    // SAFETY: a NUL-terminated path; a null times pointer means "now".
    unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), std::ptr::null(), 0) }
}
