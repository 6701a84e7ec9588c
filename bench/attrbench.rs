//! Times the calls the keeper makes for a session (issue 29, item 4):
//! `chmod` and `utimensat` (to a given time) on one file, N of each, in batches of 1,000; the
//! report is the median batch per call, in microseconds. Run unconfined and
//! under `nd7 run` (`bench/attrs.sh`) to see what the keeper's round trip
//! costs each call.
//!
//! usage: attrbench N FILE

use std::ffi::CString;
use std::time::Instant;

use rustix::fs::{AtFlags, CWD, Mode, Timespec, Timestamps};

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
    rustix::fs::chmod(path.as_c_str(), Mode::from_raw_mode(mode)).map_or(-1, |()| 0)
}

fn touch(path: &CString, i: usize) -> i32 {
    let at = Timespec {
        tv_sec: 1_000_000_000 + i as i64,
        tv_nsec: 0,
    };
    let times = Timestamps {
        last_access: at,
        last_modification: at,
    };
    rustix::fs::utimensat(CWD, path.as_c_str(), &times, AtFlags::empty()).map_or(-1, |()| 0)
}
