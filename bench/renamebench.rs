//! Times `rename` (ADR-0134): under `nd7 run` in a repository every rename
//! stops for the keeper, which lets it go on unless it is onto the held
//! `.git/config`. N renames of one file back and forth (`a` to `b`, `b` to
//! `a`), in batches of 1,000; the report is the median batch per call, in
//! microseconds. Run unconfined and under `nd7 run` (`bench/renames.sh`).
//!
//! usage: renamebench N DIR

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [n, dir] = &args[..] else {
        return Err("usage: renamebench N DIR".into());
    };
    let n: usize = n.parse()?;
    let dir = std::path::Path::new(dir);
    let (a, b) = (dir.join("renamebench-a"), dir.join("renamebench-b"));
    std::fs::write(&a, "x")?;
    let batches = (n / 1000).max(1);
    let mut times = Vec::with_capacity(batches);
    for _ in 0..batches {
        let start = Instant::now();
        for _ in 0..500 {
            std::fs::rename(&a, &b)?;
            std::fs::rename(&b, &a)?;
        }
        times.push(start.elapsed().as_secs_f64() * 1e6 / 1000.0);
    }
    std::fs::remove_file(&a)?;
    times.sort_by(f64::total_cmp);
    println!(
        "rename: {:.2} us per call (median of {batches} batches of 1000)",
        times[batches / 2]
    );
    Ok(())
}
