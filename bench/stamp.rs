//! Prints the wall clock in nanoseconds since the epoch and exits: run as
//! the program under `nd7 run`, it says when the program started, so a
//! caller that read the same clock before starting `nd7 run` gets the
//! start-up time alone (`bench/startbench.rs`).

fn main() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    println!("{now}");
}
