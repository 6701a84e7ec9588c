//! BLAKE3 of a growing file's prefix, kept between processes: the digest of
//! bytes `0..n` for every `n` the file passes, each new byte hashed once.
//!
//! BLAKE3 is a tree over 1 KiB chunks. A plain [`blake3::Hasher`] cannot be
//! saved and resumed, but its whole state is small: the chaining values of
//! the complete subtrees to the left (at most one per bit of the chunk count)
//! and the last, unfinished chunk. [`Prefix`] keeps exactly that, in a form
//! that can be written down ([`Saved`]) and read back by the next hook, and
//! computes the digest of the bytes so far without consuming anything
//! ([`Prefix::digest`]), so one pass over a file yields the digest at every
//! anchor.
//!
//! The tree rules (BLAKE3 paper, section 2.1): a subtree of `2^k` chunks
//! starting at chunk `i` needs `i` to be a multiple of `2^k`; the final
//! chunk, even when full, is never merged before the root. The stack below
//! holds subtrees of strictly decreasing size whose sizes sum to the chunks
//! pushed (their binary decomposition), so the root is the stack folded from
//! the right onto the last chunk. Pure: no files, no clock.

use blake3::hazmat::{
    ChainingValue, HasherExt, Mode, merge_subtrees_non_root, merge_subtrees_root,
};
use blake3::{CHUNK_LEN, Hasher};

/// The largest subtree hashed in one call (1 MiB): big enough for BLAKE3's
/// SIMD to run at full speed, small enough to stop between two of them.
const MAX_SUBTREE_CHUNKS: u64 = 1024;

/// The BLAKE3 state of a prefix `0..len` of some input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// Complete subtrees left of the last chunk: (chunks, chaining value),
    /// largest first, each size a power of two, strictly decreasing.
    stack: Vec<(u64, ChainingValue)>,
    /// Bytes covered by the stack: a multiple of 1 KiB.
    pushed: u64,
    /// The last chunk: 1..=1024 bytes once anything was hashed, else empty.
    tail: Vec<u8>,
}

impl Default for Prefix {
    fn default() -> Self {
        Prefix::new()
    }
}

/// A [`Prefix`] written down: the same facts, validated on the way back.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Saved {
    /// `"<chunks>:<64 hex>"`, largest subtree first.
    pub stack: Vec<String>,
    /// The last chunk's bytes, in hex (at most 2048 digits).
    pub tail: String,
}

/// Why a [`Saved`] state cannot be a prefix's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a saved BLAKE3 prefix state: {0}")]
pub struct BadState(&'static str);

impl Prefix {
    /// The state of the empty prefix.
    pub fn new() -> Prefix {
        Prefix {
            stack: Vec::new(),
            pushed: 0,
            tail: Vec::new(),
        }
    }

    /// How many bytes have been hashed.
    pub fn len(&self) -> u64 {
        self.pushed + self.tail.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where the last chunk starts: bytes before it are in the stack and are
    /// never read again; bytes from here to [`Prefix::len`] are [`Prefix::tail`].
    pub fn tail_start(&self) -> u64 {
        self.pushed
    }

    /// The last chunk's bytes, kept so a later reader can check that the
    /// file still holds them.
    pub fn tail(&self) -> &[u8] {
        &self.tail
    }

    /// Hashes `data` as the bytes that follow.
    pub fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.tail.len() == CHUNK_LEN {
                // More input follows, so the full last chunk is not the final one.
                let chunk = std::mem::take(&mut self.tail);
                let cv = subtree_cv(self.pushed, &chunk);
                self.push(1, cv);
            }
            if self.tail.is_empty() && data.len() > CHUNK_LEN {
                // Whole subtrees straight from the input, always leaving at
                // least one byte behind to be the last chunk.
                let chunks = self.subtree_chunks((data.len() as u64 - 1) / CHUNK_LEN as u64);
                let bytes = (chunks as usize) * CHUNK_LEN;
                let cv = subtree_cv(self.pushed, &data[..bytes]);
                self.push(chunks, cv);
                data = &data[bytes..];
                continue;
            }
            let take = (CHUNK_LEN - self.tail.len()).min(data.len());
            self.tail.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
    }

    /// The BLAKE3 hash of every byte hashed so far (the same as
    /// `blake3::hash` of them). Leaves the state as it is.
    pub fn digest(&self) -> blake3::Hash {
        let Some(((_, first), rest)) = self.stack.split_first() else {
            return blake3::hash(&self.tail);
        };
        let mut right = subtree_cv(self.pushed, &self.tail);
        for (_, cv) in rest.iter().rev() {
            right = merge_subtrees_non_root(cv, &right, Mode::Hash);
        }
        merge_subtrees_root(first, &right, Mode::Hash)
    }

    /// The state written down.
    pub fn save(&self) -> Saved {
        Saved {
            stack: self
                .stack
                .iter()
                .map(|(chunks, cv)| format!("{chunks}:{}", hex(cv)))
                .collect(),
            tail: hex(&self.tail),
        }
    }

    /// A state read back, checked to be one [`Prefix::update`] can reach:
    /// powers of two, strictly decreasing, a tail of 1..=1024 bytes when
    /// anything was pushed.
    pub fn restore(saved: &Saved) -> Result<Prefix, BadState> {
        let mut stack = Vec::with_capacity(saved.stack.len());
        let mut pushed_chunks: u64 = 0;
        for entry in &saved.stack {
            let (chunks, cv) = entry
                .split_once(':')
                .ok_or(BadState("a subtree without ':'"))?;
            let chunks: u64 = chunks
                .parse()
                .map_err(|_| BadState("a subtree size that is not a number"))?;
            if !chunks.is_power_of_two() {
                return Err(BadState("a subtree size that is not a power of two"));
            }
            if stack.last().is_some_and(|&(last, _)| last <= chunks) {
                return Err(BadState("subtree sizes that do not decrease"));
            }
            let cv: ChainingValue = unhex(cv)
                .and_then(|b| b.try_into().ok())
                .ok_or(BadState("a chaining value that is not 64 hex digits"))?;
            pushed_chunks = pushed_chunks
                .checked_add(chunks)
                .ok_or(BadState("a length beyond 2^64 bytes"))?;
            stack.push((chunks, cv));
        }
        let tail = unhex(&saved.tail).ok_or(BadState("a tail that is not hex"))?;
        if tail.len() > CHUNK_LEN {
            return Err(BadState("a tail longer than one chunk"));
        }
        if !stack.is_empty() && tail.is_empty() {
            return Err(BadState("subtrees with no last chunk"));
        }
        let pushed = pushed_chunks
            .checked_mul(CHUNK_LEN as u64)
            .ok_or(BadState("a length beyond 2^64 bytes"))?;
        Ok(Prefix {
            stack,
            pushed,
            tail,
        })
    }

    /// The largest subtree that may start at the current offset and holds
    /// at most `available` chunks (at least one).
    fn subtree_chunks(&self, available: u64) -> u64 {
        let start = self.pushed / CHUNK_LEN as u64;
        let aligned = if start == 0 {
            u64::MAX
        } else {
            1 << start.trailing_zeros()
        };
        let fits = 1 << (63 - available.max(1).leading_zeros());
        aligned.min(fits).min(MAX_SUBTREE_CHUNKS)
    }

    /// Pushes a complete subtree of `chunks` chunks, merging it with its
    /// left neighbours of the same size.
    fn push(&mut self, mut chunks: u64, mut cv: ChainingValue) {
        self.pushed += chunks * CHUNK_LEN as u64;
        while let Some(&(left_chunks, left)) = self.stack.last() {
            if left_chunks != chunks {
                break;
            }
            self.stack.pop();
            cv = merge_subtrees_non_root(&left, &cv, Mode::Hash);
            chunks *= 2;
        }
        self.stack.push((chunks, cv));
    }
}

/// The chaining value of the complete subtree (or, for the root's right
/// edge, the last chunk) `bytes` starting at byte `offset`.
fn subtree_cv(offset: u64, bytes: &[u8]) -> ChainingValue {
    let mut hasher = Hasher::new();
    hasher.set_input_offset(offset);
    hasher.update(bytes);
    hasher.finalize_non_root()
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn input(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    /// Every length around chunk and subtree edges, fed in one piece.
    #[test]
    fn matches_blake3_at_every_edge() {
        let data = input(70 * 1024 + 3);
        let mut lengths: Vec<usize> = vec![0, 1, 1023, 1024, 1025, 2047, 2048, 2049, 3072, 3073];
        for k in 1..=70 {
            lengths.extend([k * 1024 - 1, k * 1024, k * 1024 + 1]);
        }
        for len in lengths {
            let mut p = Prefix::new();
            p.update(&data[..len]);
            assert_eq!(p.len(), len as u64);
            assert_eq!(p.digest(), blake3::hash(&data[..len]), "length {len}");
        }
    }

    /// Larger than one subtree, so the stack merges subtrees of 1 MiB.
    #[test]
    fn matches_blake3_across_megabytes_fed_in_odd_pieces() {
        let data = input(5 * 1024 * 1024 + 777);
        let mut p = Prefix::new();
        let mut at = 0;
        for (i, piece) in [1usize, 1023, 4096, 1 << 20, 3, 1 << 21, 65_537]
            .iter()
            .cycle()
            .enumerate()
        {
            if at == data.len() || i > 1000 {
                break;
            }
            let end = (at + piece).min(data.len());
            p.update(&data[at..end]);
            at = end;
            assert_eq!(p.digest(), blake3::hash(&data[..at]), "at {at}");
        }
        p.update(&data[at..]);
        assert_eq!(p.digest(), blake3::hash(&data));
    }

    #[test]
    fn saved_and_restored_it_goes_on_as_if_never_stopped() {
        let data = input(300 * 1024 + 5);
        for cut in [0, 1, 1024, 1025, 4096, 100 * 1024 + 17, 256 * 1024] {
            let mut p = Prefix::new();
            p.update(&data[..cut]);
            let saved = p.save();
            let text = serde_json::to_string(&saved).expect("serialises");
            let back: Saved = serde_json::from_str(&text).expect("parses");
            let mut q = Prefix::restore(&back).expect("restores");
            assert_eq!(q, p);
            assert_eq!(q.tail(), &data[q.tail_start() as usize..cut]);
            q.update(&data[cut..]);
            assert_eq!(q.digest(), blake3::hash(&data), "cut at {cut}");
        }
    }

    #[test]
    fn states_update_could_never_reach_are_refused() {
        let mut p = Prefix::new();
        p.update(&input(5000));
        let good = p.save();
        let mut bad = Vec::new();
        let mut s = good.clone();
        s.stack[0] = format!("3:{}", &good.stack[0][2..]);
        bad.push(s);
        let mut s = good.clone();
        s.stack.push(good.stack[0].clone());
        bad.push(s);
        let mut s = good.clone();
        s.tail = String::new();
        bad.push(s);
        let mut s = good.clone();
        s.tail = "ab".repeat(1025);
        bad.push(s);
        let mut s = good.clone();
        s.tail = "xyz".into();
        bad.push(s);
        let mut s = good.clone();
        s.stack[0] = "4:00".into();
        bad.push(s);
        let mut s = good;
        s.stack = vec![format!("{}:{}", 1u64 << 63, "00".repeat(32)); 1];
        s.stack.push(format!("{}:{}", 1u64 << 62, "00".repeat(32)));
        bad.push(s);
        for s in bad {
            assert!(Prefix::restore(&s).is_err(), "{s:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_split_any_save_gives_blake3(
            len in 0usize..40_000,
            cuts in proptest::collection::vec(0usize..40_000, 0..6),
        ) {
            let data = input(len);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(len)).collect();
            cuts.sort_unstable();
            cuts.push(len);
            let mut p = Prefix::new();
            let mut at = 0;
            for cut in cuts {
                p.update(&data[at..cut]);
                at = cut;
                prop_assert_eq!(p.digest(), blake3::hash(&data[..at]));
                p = Prefix::restore(&p.save()).expect("restores");
            }
        }
    }
}
