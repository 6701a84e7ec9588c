//! The least a recorder can do: read standard input and append it to a file
//! in one write. `nd7 record` is measured against this.
//! usage: baseline_append FILE < payload

use std::io::{Read, Write};

fn main() -> std::io::Result<()> {
    let path = std::env::args_os()
        .nth(1)
        .expect("usage: baseline_append FILE");
    let mut input = Vec::new();
    std::io::stdin().read_to_end(&mut input)?;
    input.push(b'\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(&input)
}
