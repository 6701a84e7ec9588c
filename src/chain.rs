//! The hash chain: how an entry is sealed, how a sealed line is read back, and
//! how a run of lines is checked. Pure: bytes in, verdicts out.
//!
//! The format, as docs/log-format.md states it:
//!
//! ```text
//! line     = U "," "\"hash\":\"" HEX(BLAKE3(U)) "\"}" "\n"
//! U        = "{\"seq\":" SEQ "," ... ",\"prev\":\"" HEX(prev) "\""
//! prev(0)  = BLAKE3-derive-key("nd7 2026-09 session-log v1 session-id", session_id)
//! prev(n)  = hash(n - 1)
//! head     = SEQ " " HEX(hash) "\n"
//! ```
//!
//! `U` is the entry without its closing brace, so the hash covers every byte of
//! the line before `,"hash":`. Because `seq` opens the line and `prev` closes
//! `U`, a reader checks an entry from its first and last 150 bytes and one
//! BLAKE3 pass, without parsing the body. Each entry is checked against its own
//! bytes and the stored hash of the line before it and nothing else, which is
//! what lets [`verify_lines`] split a log across threads.

use std::fmt;

/// Length of a hash written as lowercase hex.
pub const HEX_LEN: usize = 64;

/// BLAKE3 key-derivation context for the first entry's `prev`.
const SESSION_CONTEXT: &str = "nd7 2026-09 session-log v1 session-id";

const SEQ_OPEN: &[u8] = b"{\"seq\":";
const PREV_TAG: &[u8] = b",\"prev\":\"";
const HASH_TAG: &[u8] = b",\"hash\":\"";
const SEAL_CLOSE: &[u8] = b"\"}";
/// `,"hash":"` + 64 hex + `"}`
const SEAL_LEN: usize = HASH_TAG.len() + HEX_LEN + SEAL_CLOSE.len();
/// `,"prev":"` + 64 hex + `"`
const PREV_LEN: usize = PREV_TAG.len() + HEX_LEN + 1;

/// A BLAKE3 digest: an entry's `hash`, its `prev`, or a session fingerprint.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hash([u8; 32]);

impl Hash {
    /// BLAKE3 of `bytes`.
    pub fn of(bytes: &[u8]) -> Hash {
        Hash(*blake3::hash(bytes).as_bytes())
    }

    /// The `prev` of a session's first entry. Binding the chain's start to the
    /// session id means a log copied under another id fails at entry 0.
    pub fn session_fingerprint(session_id: &str) -> Hash {
        Hash(blake3::derive_key(SESSION_CONTEXT, session_id.as_bytes()))
    }

    /// Reads 64 lowercase hex digits; anything else is `None`.
    pub fn from_hex(hex: &[u8]) -> Option<Hash> {
        if hex.len() != HEX_LEN {
            return None;
        }
        let mut out = [0u8; 32];
        for (byte, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
            *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
        }
        Some(Hash(out))
    }

    /// The 64-character lowercase hex form used everywhere in the log.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(HEX_LEN);
        for b in self.0 {
            s.push(char::from(HEX_DIGITS[usize::from(b >> 4)]));
            s.push(char::from(HEX_DIGITS[usize::from(b & 0xf)]));
        }
        s
    }

    /// The first 16 hex characters, as `nd7 verify` prints them.
    pub fn short(&self) -> String {
        self.to_hex()[..16].to_string()
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({})", self.short())
    }
}

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Seals an entry: `unsealed` is the entry's JSON object, ending in
/// `"prev":"<hex>"}`. Returns the whole line, newline included.
///
/// Panics if `unsealed` does not end in `}`: callers build it themselves.
pub fn seal(unsealed: &[u8]) -> Vec<u8> {
    let u = unsealed
        .strip_suffix(b"}")
        .expect("an unsealed entry is a JSON object rendered by nd7");
    let hash = Hash::of(u);
    let mut line = Vec::with_capacity(u.len() + SEAL_LEN + 1);
    line.extend_from_slice(u);
    line.extend_from_slice(HASH_TAG);
    line.extend_from_slice(hash.to_hex().as_bytes());
    line.extend_from_slice(SEAL_CLOSE);
    line.push(b'\n');
    line
}

/// The largest line the log accepts, newline included. Every entry then fits
/// in one 8 MiB vault batch with room for the batch's own framing.
pub const MAX_ENTRY_BYTES: usize = 7 * 1024 * 1024;

/// The envelope, in the order its members are written. `prev` must come last:
/// the sealed-line format depends on it.
#[derive(serde::Serialize)]
struct Envelope<'a> {
    seq: u64,
    ts: u64,
    host: &'a str,
    hook_ppid: Option<u32>,
    cwd: Option<&'a str>,
    session: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_use_id: Option<&'a str>,
    source: &'a str,
    kind: &'a str,
    body: &'a serde_json::value::RawValue,
    prev: String,
}

/// Renders `event` as the sealed line at `cursor`'s position, newline included.
pub fn render_entry(event: &crate::hook::Event, cursor: &Cursor) -> Vec<u8> {
    let envelope = Envelope {
        seq: cursor.next_seq,
        ts: event.ts,
        host: &event.host,
        hook_ppid: event.hook_ppid,
        cwd: event.cwd.as_deref(),
        session: &event.session,
        tool_use_id: event.tool_use_id.as_deref(),
        source: event.source,
        kind: event.kind.as_str(),
        body: &event.body,
        prev: cursor.prev.to_hex(),
    };
    // Strings, integers and an already-valid raw body: this cannot fail.
    let unsealed = serde_json::to_vec(&envelope).expect("the envelope serializes");
    seal(&unsealed)
}

/// What one sealed line states about itself, read without checking it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stated {
    pub seq: u64,
    pub prev: Hash,
    pub hash: Hash,
}

/// Why one line is not a valid link of its chain. The order of the variants
/// is the order in which they are checked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    #[error("not a sealed entry: {0}")]
    Unsealed(&'static str),
    #[error("hash does not match the entry's bytes (stated {stated}, computed {computed})")]
    Hash { stated: String, computed: String },
    #[error("sequence number is {found}, expected {expected}")]
    Seq { found: String, expected: u64 },
    #[error("prev does not match the previous entry's hash (stated {stated}, expected {expected})")]
    Prev { stated: String, expected: String },
}

/// Splits a line (without its newline) into the stated hash and the bytes it
/// covers. This is the "sealed" check.
fn unseal(line: &[u8]) -> Result<(&[u8], Hash), Fault> {
    if line.is_empty() {
        return Err(Fault::Unsealed("the line is empty"));
    }
    if line.len() < SEAL_LEN || !line.ends_with(SEAL_CLOSE) {
        return Err(Fault::Unsealed("it does not end with a hash member"));
    }
    let tag_at = line.len() - SEAL_LEN;
    if &line[tag_at..tag_at + HASH_TAG.len()] != HASH_TAG {
        return Err(Fault::Unsealed("it does not end with a hash member"));
    }
    let hex = &line[tag_at + HASH_TAG.len()..line.len() - SEAL_CLOSE.len()];
    let hash = Hash::from_hex(hex).ok_or(Fault::Unsealed(
        "its hash member is not 64 lowercase hex digits",
    ))?;
    Ok((&line[..tag_at], hash))
}

fn stated_seq(covered: &[u8]) -> Option<u64> {
    let rest = covered.strip_prefix(SEQ_OPEN)?;
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    let digits = &rest[..end];
    if end == 0 || rest[end] != b',' || (digits.len() > 1 && digits[0] == b'0') {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

fn stated_prev(covered: &[u8]) -> Option<Hash> {
    if covered.len() < PREV_LEN || !covered.ends_with(b"\"") {
        return None;
    }
    let tag_at = covered.len() - PREV_LEN;
    if &covered[tag_at..tag_at + PREV_TAG.len()] != PREV_TAG {
        return None;
    }
    Hash::from_hex(&covered[tag_at + PREV_TAG.len()..covered.len() - 1])
}

fn seq_text(covered: &[u8]) -> String {
    match stated_seq(covered) {
        Some(n) => n.to_string(),
        None => "missing or malformed".to_string(),
    }
}

/// Reads what a line states about itself. Fails if it is not sealed or its
/// `seq` or `prev` cannot be read; does not check the hash.
pub fn read_stated(line: &[u8]) -> Result<Stated, Fault> {
    let (covered, hash) = unseal(line)?;
    let seq = stated_seq(covered).ok_or_else(|| Fault::Seq {
        found: seq_text(covered),
        expected: 0,
    })?;
    let prev = stated_prev(covered).ok_or_else(|| Fault::Prev {
        stated: "missing or malformed".into(),
        expected: "a 64-digit hex hash".into(),
    })?;
    Ok(Stated { seq, prev, hash })
}

/// Reads what a line states and checks its hash against its own bytes, but
/// not its place in a chain. How an append checks the log's last line.
pub fn read_checked(line: &[u8]) -> Result<Stated, Fault> {
    let (covered, hash) = unseal(line)?;
    let computed = Hash::of(covered);
    if computed != hash {
        return Err(Fault::Hash {
            stated: hash.to_hex(),
            computed: computed.to_hex(),
        });
    }
    read_stated(line)
}

/// Checks one line (without its newline) as the entry at position `expected_seq`
/// whose predecessor's hash is `expected_prev`: sealed, hash, seq, prev, in
/// that order.
pub fn check_line(line: &[u8], expected_seq: u64, expected_prev: &Hash) -> Result<Stated, Fault> {
    let (covered, stated) = unseal(line)?;
    let computed = Hash::of(covered);
    if computed != stated {
        return Err(Fault::Hash {
            stated: stated.to_hex(),
            computed: computed.to_hex(),
        });
    }
    let seq = match stated_seq(covered) {
        Some(n) if n == expected_seq => n,
        _ => {
            return Err(Fault::Seq {
                found: seq_text(covered),
                expected: expected_seq,
            });
        }
    };
    let prev = match stated_prev(covered) {
        Some(p) if p == *expected_prev => p,
        other => {
            return Err(Fault::Prev {
                stated: other.map_or_else(|| "missing or malformed".into(), |p| p.to_hex()),
                expected: expected_prev.to_hex(),
            });
        }
    };
    Ok(Stated {
        seq,
        prev,
        hash: stated,
    })
}

/// Where a walk over the chain has got to: the next entry's position and the
/// hash it must name as `prev`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub next_seq: u64,
    pub prev: Hash,
}

impl Cursor {
    /// The cursor before a session's first entry.
    pub fn start(session_id: &str) -> Cursor {
        Cursor {
            next_seq: 0,
            prev: Hash::session_fingerprint(session_id),
        }
    }
}

/// The first entry that failed, and how.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("entry {entry} (line {line}): {fault}", line = .entry + 1)]
pub struct Broken {
    /// Zero-based position in the file, which is also the `seq` it should have.
    pub entry: u64,
    pub fault: Fault,
}

/// Below this many bytes a block is checked on the calling thread alone.
const PARALLEL_MIN: usize = 1 << 20;

/// Checks every line of `block`, which holds whole newline-terminated lines,
/// continuing from `cursor`. Returns the cursor after the last line, or the
/// first broken entry. With `threads > 1` and a large block, the lines are
/// split into that many runs checked at once; the verdict is the same.
pub fn verify_lines(block: &[u8], cursor: Cursor, threads: usize) -> Result<Cursor, Broken> {
    if threads <= 1 || block.len() < PARALLEL_MIN {
        return verify_run(block, cursor);
    }
    // Cut the block at line boundaries into `threads` runs. Each run starts
    // from the hash its previous line states, which the previous run checks.
    let mut runs = Vec::with_capacity(threads);
    let mut start = 0;
    let mut seq = cursor.next_seq;
    let mut prev = cursor.prev;
    for i in 1..=threads {
        let end = if i == threads {
            block.len()
        } else {
            let target = (block.len() * i / threads).max(start);
            match memchr::memchr(b'\n', &block[target..]) {
                Some(nl) => target + nl + 1,
                None => block.len(),
            }
        };
        if end <= start {
            continue;
        }
        let run = &block[start..end];
        runs.push((
            run,
            Cursor {
                next_seq: seq,
                prev,
            },
        ));
        seq += memchr::memchr_iter(b'\n', run).count() as u64;
        // If the last line is unreadable, the run that holds it fails at or
        // before it, and the runs after it are never consulted.
        let last = last_line(run);
        prev = read_stated(last).map_or(prev, |s| s.hash);
        start = end;
    }
    let results: Vec<Result<Cursor, Broken>> = std::thread::scope(|scope| {
        let handles: Vec<_> = runs
            .iter()
            .map(|&(run, cur)| scope.spawn(move || verify_run(run, cur)))
            .collect();
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    });
    let mut last = Ok(cursor);
    for r in results {
        last = r;
        if last.is_err() {
            break;
        }
    }
    last
}

fn verify_run(run: &[u8], mut cursor: Cursor) -> Result<Cursor, Broken> {
    for line in run.split_inclusive(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let stated = check_line(line, cursor.next_seq, &cursor.prev).map_err(|fault| Broken {
            entry: cursor.next_seq,
            fault,
        })?;
        cursor = Cursor {
            next_seq: stated.seq + 1,
            prev: stated.hash,
        };
    }
    Ok(cursor)
}

/// The last line of `bytes` (which end with a newline), without the newline.
pub fn last_line(bytes: &[u8]) -> &[u8] {
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    match memchr::memrchr(b'\n', body) {
        Some(nl) => &body[nl + 1..],
        None => body,
    }
}

/// The `head` file: the seq and hash of the chain's last entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub seq: u64,
    pub hash: Hash,
}

impl Head {
    /// `"<seq> <hash>\n"`
    pub fn render(&self) -> String {
        format!("{} {}\n", self.seq, self.hash)
    }

    /// Reads the `head` file's text; `None` if it is not exactly the rendered form.
    pub fn parse(text: &[u8]) -> Option<Head> {
        let text = text.strip_suffix(b"\n")?;
        let space = text.iter().position(|&b| b == b' ')?;
        let (seq, hash) = (&text[..space], &text[space + 1..]);
        if seq.is_empty()
            || !seq.iter().all(u8::is_ascii_digit)
            || (seq.len() > 1 && seq[0] == b'0')
        {
            return None;
        }
        Some(Head {
            seq: std::str::from_utf8(seq).ok()?.parse().ok()?,
            hash: Hash::from_hex(hash)?,
        })
    }
}

/// How `head` stands against the log's last entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadState {
    /// head names the last entry (or both are absent).
    Current,
    /// The log has entries and head is missing: an append died before its
    /// first head write. Recoverable.
    Missing,
    /// head names the entry before the last, and the last entry links to it:
    /// an append died between its write and its head rewrite. Recoverable.
    OneBehind,
    /// Anything else. The log and its cache disagree in a way no interrupted
    /// append explains.
    Disagrees(Disagreement),
}

/// The disagreements between `head` and the log that nd7 refuses to write past.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Disagreement {
    #[error("head names entry {head_seq} but the log is empty")]
    HeadWithoutLog { head_seq: u64 },
    #[error("head names entry {head_seq}, ahead of the log's last entry {last_seq}")]
    HeadAhead { head_seq: u64, last_seq: u64 },
    #[error(
        "head names entry {head_seq}, {} entries behind the log's last entry {last_seq}",
        .last_seq - .head_seq
    )]
    HeadFarBehind { head_seq: u64, last_seq: u64 },
    #[error(
        "head names entry {seq} with hash {head_hash:?}, but that entry's hash is {log_hash:?}"
    )]
    HeadHashDiffers {
        seq: u64,
        head_hash: Hash,
        log_hash: Hash,
    },
}

/// Compares `head` (if the file exists) with the log's last entry (if any).
pub fn compare_head(head: Option<&Head>, last: Option<&Stated>) -> HeadState {
    match (head, last) {
        (None, None) => HeadState::Current,
        (Some(h), None) => HeadState::Disagrees(Disagreement::HeadWithoutLog { head_seq: h.seq }),
        (None, Some(_)) => HeadState::Missing,
        (Some(h), Some(l)) if h.seq == l.seq => {
            if h.hash == l.hash {
                HeadState::Current
            } else {
                HeadState::Disagrees(Disagreement::HeadHashDiffers {
                    seq: l.seq,
                    head_hash: h.hash,
                    log_hash: l.hash,
                })
            }
        }
        (Some(h), Some(l)) if h.seq > l.seq => HeadState::Disagrees(Disagreement::HeadAhead {
            head_seq: h.seq,
            last_seq: l.seq,
        }),
        (Some(h), Some(l)) if h.seq + 1 == l.seq => {
            if h.hash == l.prev {
                HeadState::OneBehind
            } else {
                HeadState::Disagrees(Disagreement::HeadHashDiffers {
                    seq: h.seq,
                    head_hash: h.hash,
                    log_hash: l.prev,
                })
            }
        }
        (Some(h), Some(l)) => HeadState::Disagrees(Disagreement::HeadFarBehind {
            head_seq: h.seq,
            last_seq: l.seq,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, prev: &Hash, body: &str) -> Vec<u8> {
        seal(format!("{{\"seq\":{seq},\"body\":{body},\"prev\":\"{prev}\"}}").as_bytes())
    }

    fn chain(session: &str, n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut prev = Hash::session_fingerprint(session);
        for seq in 0..n {
            let line = entry(seq, &prev, &format!("{{\"n\":{seq}}}"));
            prev = read_stated(&line[..line.len() - 1]).expect("sealed").hash;
            out.extend_from_slice(&line);
        }
        out
    }

    #[test]
    fn hex_round_trips_and_rejects_uppercase() {
        let h = Hash::of(b"abc");
        assert_eq!(Hash::from_hex(h.to_hex().as_bytes()), Some(h));
        assert_eq!(h.to_hex(), blake3::hash(b"abc").to_hex().as_str());
        assert_eq!(Hash::from_hex(h.to_hex().to_uppercase().as_bytes()), None);
        assert_eq!(Hash::from_hex(b"00"), None);
    }

    #[test]
    fn seal_covers_every_byte_before_the_hash_member() {
        let line = seal(br#"{"seq":0,"prev":"x"}"#);
        let text = std::str::from_utf8(&line).expect("utf8");
        let expected = blake3::hash(br#"{"seq":0,"prev":"x""#).to_hex();
        assert_eq!(
            text,
            format!("{{\"seq\":0,\"prev\":\"x\",\"hash\":\"{expected}\"}}\n")
        );
    }

    #[test]
    fn session_fingerprint_differs_by_id_and_from_plain_hash() {
        let a = Hash::session_fingerprint("a");
        assert_ne!(a, Hash::session_fingerprint("b"));
        assert_ne!(a, Hash::of(b"a"));
    }

    #[test]
    fn a_good_chain_verifies_single_and_parallel() {
        let log = chain("s", 5000);
        let end = verify_lines(&log, Cursor::start("s"), 1).expect("clean");
        assert_eq!(end.next_seq, 5000);
        for threads in [2, 3, 7] {
            assert_eq!(verify_lines(&log, Cursor::start("s"), threads), Ok(end));
        }
    }

    #[test]
    fn parallel_and_single_agree_on_the_first_break() {
        let mut log = chain("s", 20000);
        // Break two entries; the earlier one must be reported.
        let lines: Vec<usize> = log
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b == b'\n')
            .map(|(i, _)| i)
            .collect();
        let late = lines[14999] + 30;
        let early = lines[8999] + 30;
        log[late] ^= 1;
        log[early] ^= 1;
        let single = verify_lines(&log, Cursor::start("s"), 1).expect_err("broken");
        assert_eq!(single.entry, 9000);
        assert!(matches!(single.fault, Fault::Hash { .. }), "{single}");
        for threads in [2, 4] {
            assert_eq!(
                verify_lines(&log, Cursor::start("s"), threads),
                Err(single.clone())
            );
        }
    }

    #[test]
    fn faults_are_checked_in_order() {
        let p = Hash::session_fingerprint("s");
        let good = entry(0, &p, "1");
        let good = &good[..good.len() - 1];
        assert!(check_line(good, 0, &p).is_ok());
        assert!(matches!(check_line(b"", 0, &p), Err(Fault::Unsealed(_))));
        assert!(matches!(
            check_line(b"{\"seq\":0}", 0, &p),
            Err(Fault::Unsealed(_))
        ));
        let mut tampered = good.to_vec();
        tampered[12] ^= 1;
        assert!(matches!(
            check_line(&tampered, 0, &p),
            Err(Fault::Hash { .. })
        ));
        assert!(matches!(
            check_line(good, 1, &p),
            Err(Fault::Seq { expected: 1, .. })
        ));
        assert!(matches!(
            check_line(good, 0, &Hash::of(b"other")),
            Err(Fault::Prev { .. })
        ));
        // A self-consistent line with a leading-zero seq is malformed, not seq 0.
        let odd = seal(format!("{{\"seq\":00,\"prev\":\"{p}\"}}").as_bytes());
        assert!(matches!(
            check_line(&odd[..odd.len() - 1], 0, &p),
            Err(Fault::Seq { .. })
        ));
    }

    #[test]
    fn head_renders_and_parses_strictly() {
        let h = Head {
            seq: 41,
            hash: Hash::of(b"x"),
        };
        assert_eq!(Head::parse(h.render().as_bytes()), Some(h));
        for bad in ["", "41", "41 abc\n", "041 x\n", " 41\n"] {
            assert_eq!(Head::parse(bad.as_bytes()), None, "{bad:?}");
        }
        let no_newline = h.render();
        assert_eq!(Head::parse(no_newline.trim_end().as_bytes()), None);
    }

    #[test]
    fn head_states_cover_every_case() {
        let h = |seq, hash: &[u8]| Head {
            seq,
            hash: Hash::of(hash),
        };
        let last = Stated {
            seq: 5,
            prev: Hash::of(b"4"),
            hash: Hash::of(b"5"),
        };
        assert_eq!(compare_head(None, None), HeadState::Current);
        assert_eq!(compare_head(None, Some(&last)), HeadState::Missing);
        assert_eq!(
            compare_head(Some(&h(5, b"5")), Some(&last)),
            HeadState::Current
        );
        assert_eq!(
            compare_head(Some(&h(4, b"4")), Some(&last)),
            HeadState::OneBehind
        );
        assert!(matches!(
            compare_head(Some(&h(0, b"0")), None),
            HeadState::Disagrees(Disagreement::HeadWithoutLog { .. })
        ));
        assert!(matches!(
            compare_head(Some(&h(6, b"6")), Some(&last)),
            HeadState::Disagrees(Disagreement::HeadAhead { .. })
        ));
        assert!(matches!(
            compare_head(Some(&h(3, b"3")), Some(&last)),
            HeadState::Disagrees(Disagreement::HeadFarBehind { .. })
        ));
        assert!(matches!(
            compare_head(Some(&h(5, b"x")), Some(&last)),
            HeadState::Disagrees(Disagreement::HeadHashDiffers { .. })
        ));
        assert!(matches!(
            compare_head(Some(&h(4, b"x")), Some(&last)),
            HeadState::Disagrees(Disagreement::HeadHashDiffers { .. })
        ));
    }
}
