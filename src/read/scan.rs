//! Reading logs fast, shared by the store and the summaries cache: a log
//! read from an offset in blocks of whole lines, and work spread over
//! threads. Below both, so neither reaches into the other for it.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::ReadError;

/// How much of a log is read at once (more for a longer line).
const READ_BLOCK: usize = 1 << 20;

/// What [`whole_lines`] leaves after the last whole line: where that line
/// ends, and the bytes after it (a last line with no newline yet).
pub(crate) struct Tail {
    pub end: u64,
    pub rest: Vec<u8>,
}

/// Reads `file` (`path`, for errors) from offset `from` in blocks, and
/// hands `each` every run of whole lines as it is read, each line with its
/// newline. A line longer than a block grows the block. `each` returns
/// `false` to stop the reading: then `Ok(None)`.
pub(crate) fn whole_lines(
    file: &File,
    path: &Path,
    from: u64,
    mut each: impl FnMut(&[u8]) -> bool,
) -> Result<Option<Tail>, ReadError> {
    let mut at = from;
    let mut buf = vec![0u8; READ_BLOCK];
    let mut held = 0usize;
    loop {
        if held == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let n = file
            .read_at(&mut buf[held..], at + held as u64)
            .map_err(super::io_err(path, "read"))?;
        if n == 0 {
            break;
        }
        let filled = held + n;
        let Some(last_nl) = memchr::memrchr(b'\n', &buf[..filled]) else {
            held = filled;
            continue;
        };
        if !each(&buf[..=last_nl]) {
            return Ok(None);
        }
        at += (last_nl + 1) as u64;
        buf.copy_within(last_nl + 1..filled, 0);
        held = filled - (last_nl + 1);
    }
    buf.truncate(held);
    Ok(Some(Tail { end: at, rest: buf }))
}

/// `each` over `items` on up to `threads` threads, each thread taking the
/// next item when it is free (logs differ widely in size); the results in
/// the items' order.
pub(crate) fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    each: impl Fn(usize, &T) -> R + Sync,
) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.clamp(1, items.len().max(1)))
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        out.push((i, each(i, item)));
                    }
                    out
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}
