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
//! what lets a verifier split a log across threads ([`Walker`], [`join`]).

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
        let hex = self.hex_bytes();
        // Hex digits are ASCII.
        String::from_utf8_lossy(&hex).into_owned()
    }

    /// The hex form as bytes, without allocating: the verifier's hot path
    /// compares these rather than decoding what a line states.
    pub fn hex_bytes(&self) -> [u8; HEX_LEN] {
        let mut out = [0u8; HEX_LEN];
        for (pair, b) in out.chunks_exact_mut(2).zip(self.0) {
            pair[0] = HEX_DIGITS[usize::from(b >> 4)];
            pair[1] = HEX_DIGITS[usize::from(b & 0xf)];
        }
        out
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

/// Checks one line (without its newline) as the entry at `expected_seq`
/// whose predecessor's hash is `expected_prev`: sealed, hash, seq, prev, in
/// that order. Works on hex forms: the line's own hash is hex-encoded and
/// compared with what it states, and its `prev` is compared byte for byte
/// with the previous line's stated hash. Nothing stated is decoded unless a
/// check fails. Returns the line's stated (and now checked) hash.
fn check_line_hex(
    line: &[u8],
    expected_seq: u64,
    expected_prev: &[u8; HEX_LEN],
) -> Result<[u8; HEX_LEN], Fault> {
    if line.is_empty() {
        return Err(Fault::Unsealed("the line is empty"));
    }
    if line.len() < SEAL_LEN
        || !line.ends_with(SEAL_CLOSE)
        || &line[line.len() - SEAL_LEN..line.len() - SEAL_LEN + HASH_TAG.len()] != HASH_TAG
    {
        return Err(Fault::Unsealed("it does not end with a hash member"));
    }
    let covered = &line[..line.len() - SEAL_LEN];
    let stated: &[u8] =
        &line[line.len() - SEAL_CLOSE.len() - HEX_LEN..line.len() - SEAL_CLOSE.len()];
    let computed = Hash::of(covered).hex_bytes();
    if stated != computed {
        // Sealed comes first: a malformed hash member is not a mismatch.
        let stated = unseal(line)?.1;
        return Err(Fault::Hash {
            stated: stated.to_hex(),
            computed: String::from_utf8_lossy(&computed).into_owned(),
        });
    }
    if stated_seq(covered) != Some(expected_seq) {
        return Err(Fault::Seq {
            found: seq_text(covered),
            expected: expected_seq,
        });
    }
    let prev_ok = covered.len() >= PREV_LEN
        && covered.ends_with(b"\"")
        && &covered[covered.len() - PREV_LEN..covered.len() - PREV_LEN + PREV_TAG.len()]
            == PREV_TAG
        && &covered[covered.len() - 1 - HEX_LEN..covered.len() - 1] == expected_prev;
    if !prev_ok {
        return Err(Fault::Prev {
            stated: stated_prev(covered)
                .map_or_else(|| "missing or malformed".into(), |p| p.to_hex()),
            expected: String::from_utf8_lossy(expected_prev).into_owned(),
        });
    }
    Ok(computed)
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

/// Walks a stretch of the chain that arrives in blocks of whole lines.
///
/// A walker either continues from a known [`Cursor`] (the start of the log,
/// or the end of the stretch before), or is *detached*: it starts wherever
/// its first line says it is, and [`join`] later checks that first line's
/// `seq` and `prev` against the stretch before. Detached walkers are how a
/// long log is split across threads without anyone counting lines first;
/// the verdict is the same as one walk from the start.
#[derive(Clone, Debug)]
pub struct Walker {
    /// Position of the next line within this stretch.
    lines: u64,
    /// The next line's expected seq and prev; `None` until a detached walker
    /// has read its first line.
    expect: Option<(u64, [u8; HEX_LEN])>,
    /// What the first line stated (detached walkers only).
    first: Option<Stated>,
    /// The first line's seq, when its prev could not be read (detached
    /// walkers only), so that [`join`] can report what one walk would.
    first_seq: Option<u64>,
    last: Option<Stated>,
    detached: bool,
}

/// Where a walker stopped: the failure's position is relative to the start of
/// its stretch until [`join`] places it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stretch {
    lines: u64,
    first: Option<Stated>,
    first_seq: Option<u64>,
    last: Option<Stated>,
    end: Option<Cursor>,
    detached: bool,
    failure: Option<Broken>,
}

impl Walker {
    pub fn new(cursor: Cursor) -> Walker {
        Walker {
            lines: 0,
            expect: Some((cursor.next_seq, cursor.prev.hex_bytes())),
            first: None,
            first_seq: None,
            last: None,
            detached: false,
        }
    }

    pub fn detached() -> Walker {
        Walker {
            lines: 0,
            expect: None,
            first: None,
            first_seq: None,
            last: None,
            detached: true,
        }
    }

    /// Checks every line of `block`, which holds whole newline-terminated
    /// lines. On failure the walker is spent: call [`Walker::fail`].
    pub fn feed(&mut self, block: &[u8]) -> Result<(), Broken> {
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', block) {
            let line = &block[start..nl];
            start = nl + 1;
            let at = self.lines;
            let fail = |fault| Broken { entry: at, fault };
            let (seq, prev) = match self.expect {
                Some(expect) => expect,
                None => {
                    // A detached walker's first line: its own seq and prev
                    // are taken as given and checked by `join`.
                    let stated = match read_checked(line) {
                        Ok(stated) => stated,
                        Err(fault) => {
                            if matches!(fault, Fault::Prev { .. }) {
                                self.first_seq = unseal(line).ok().and_then(|(u, _)| stated_seq(u));
                            }
                            return Err(fail(fault));
                        }
                    };
                    self.first = Some(stated);
                    (stated.seq, stated.prev.hex_bytes())
                }
            };
            let hash = check_line_hex(line, seq, &prev).map_err(fail)?;
            if seq == u64::MAX {
                return Err(fail(Fault::Seq {
                    found: seq.to_string(),
                    expected: seq,
                }));
            }
            self.expect = Some((seq + 1, hash));
            self.lines += 1;
            if start == block.len() {
                self.last = Some(Stated {
                    seq,
                    prev: Hash::from_hex(&prev).expect("checked hex"),
                    hash: Hash::from_hex(&hash).expect("checked hex"),
                });
            }
        }
        if start != block.len() {
            return Err(Broken {
                entry: self.lines,
                fault: Fault::Unsealed("the line has no newline: an append was cut short"),
            });
        }
        Ok(())
    }

    /// The stretch walked so far, ending in `failure` if there was one.
    pub fn finish(self, failure: Option<Broken>) -> Stretch {
        let end = self.expect.map(|(next_seq, prev)| Cursor {
            next_seq,
            prev: Hash::from_hex(&prev).expect("checked hex"),
        });
        Stretch {
            lines: self.lines,
            first: self.first,
            first_seq: self.first_seq,
            last: self.last,
            end,
            detached: self.detached,
            failure,
        }
    }
}

/// The end of a whole walk: where the chain got to and its last entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkEnd {
    pub cursor: Cursor,
    pub last: Option<Stated>,
}

/// Puts stretches walked separately (the first from `start`, the rest
/// detached, in file order) back into one verdict: the first broken entry by
/// position, exactly as a single walk would report it.
pub fn join(start: Cursor, stretches: Vec<Stretch>) -> Result<WalkEnd, Broken> {
    let mut cursor = start;
    let mut last = None;
    for stretch in stretches {
        if stretch.detached {
            // The stretch's first line must continue the chain so far. Its
            // own sealed and hash checks come first.
            let first_failed_first = stretch.failure.as_ref().is_some_and(|f| f.entry == 0);
            // Its first line's prev could not be read, so the stretch could
            // not say what it expected there; one walk would have checked
            // seq first, then prev against the chain so far.
            if let (true, Some(seq)) = (first_failed_first, stretch.first_seq) {
                let fault = if seq != cursor.next_seq {
                    Fault::Seq {
                        found: seq.to_string(),
                        expected: cursor.next_seq,
                    }
                } else {
                    Fault::Prev {
                        stated: "missing or malformed".into(),
                        expected: cursor.prev.to_hex(),
                    }
                };
                return Err(Broken {
                    entry: cursor.next_seq,
                    fault,
                });
            }
            if let (Some(first), false) = (stretch.first, first_failed_first) {
                if first.seq != cursor.next_seq {
                    return Err(Broken {
                        entry: cursor.next_seq,
                        fault: Fault::Seq {
                            found: first.seq.to_string(),
                            expected: cursor.next_seq,
                        },
                    });
                }
                if first.prev != cursor.prev {
                    return Err(Broken {
                        entry: cursor.next_seq,
                        fault: Fault::Prev {
                            stated: first.prev.to_hex(),
                            expected: cursor.prev.to_hex(),
                        },
                    });
                }
            }
        }
        if let Some(mut broken) = stretch.failure {
            broken.entry += cursor.next_seq;
            if let Fault::Seq { expected, .. } = &mut broken.fault {
                *expected = broken.entry;
            }
            return Err(broken);
        }
        if let Some(end) = stretch.end {
            cursor = end;
        }
        if stretch.last.is_some() {
            last = stretch.last;
        }
    }
    Ok(WalkEnd { cursor, last })
}

/// Where to cut `size` bytes of whole lines into at most `parts` stretches:
/// just after the first newline at or past each even split. `line_end_at(at)`
/// gives the offset just past the first newline at or after `at`, or `size`
/// when there is none; it is how the bytes are read, in memory or on disk.
/// Returns the cut offsets, from 0 to `size`.
pub fn cut_points<E>(
    size: u64,
    parts: usize,
    mut line_end_at: impl FnMut(u64) -> Result<u64, E>,
) -> Result<Vec<u64>, E> {
    let parts = parts.max(1) as u64;
    let mut cuts = vec![0];
    for i in 1..parts {
        let last = *cuts.last().unwrap_or(&0);
        let cut = line_end_at((size * i / parts).max(last))?;
        if cut > last && cut < size {
            cuts.push(cut);
        }
    }
    cuts.push(size);
    Ok(cuts)
}

/// Runs `walk` on `count` stretches at once and returns the results in
/// stretch order. Stretch 0 gets a walker continuing from `start` and runs on
/// the calling thread; each later one gets a detached walker and a thread of
/// its own.
pub fn walk_stretches<T: Send>(
    count: usize,
    start: Cursor,
    walk: impl Fn(usize, Walker) -> T + Sync,
) -> Vec<T> {
    let walk = &walk;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (1..count.max(1))
            .map(|i| scope.spawn(move || walk(i, Walker::detached())))
            .collect();
        let mut out = vec![walk(0, Walker::new(start))];
        for h in handles {
            out.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        out
    })
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
    /// head names an entry before the last, and every entry after it links
    /// back to it: appends died between their write and their head rewrite
    /// (one append writes a hook's entry and its anchors, so one death can
    /// leave head more than one behind). Recoverable.
    Behind { entries: u64 },
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
    /// head is more than one entry behind: from the last entry alone,
    /// [`compare_head`] cannot tell whether the entries between link down to
    /// it. `session_log` reads them and answers [`HeadState::Behind`] or
    /// [`Disagreement::Unlinked`] instead, so a user never sees this one.
    HeadFarBehind { head_seq: u64, last_seq: u64 },
    /// head is behind, and following the entries after it down from the
    /// last stops at entry `seq`: its line is not a sealed entry, or it does
    /// not link to the entry below it (for head's successor, to head).
    #[error(
        "head names entry {head_seq}, {} entries behind the log's last entry {last_seq}, but the entries after it do not link down to it (the chain breaks at entry {seq})",
        .last_seq - .head_seq
    )]
    Unlinked {
        head_seq: u64,
        last_seq: u64,
        seq: u64,
    },
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
                HeadState::Behind { entries: 1 }
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

/// Whether `below` is the entry `above` follows: numbered one before it, and
/// `above`'s `prev` its hash. How the entries after a `head` that
/// [`compare_head`] found far behind are followed down to it, one at a time.
pub fn links_down(above: &Stated, below: &Stated) -> bool {
    below.seq.checked_add(1) == Some(above.seq) && above.prev == below.hash
}

/// Whether `above` is the entry right after `head`'s, linking to it.
pub fn follows_head(above: &Stated, head: &Head) -> bool {
    head.seq.checked_add(1) == Some(above.seq) && above.prev == head.hash
}

/// `events` rendered one after another into the chain of `session`, as
/// appends would write them.
pub fn render_chain(session: &str, events: &[crate::hook::Event]) -> Vec<u8> {
    let mut cursor = Cursor::start(session);
    let mut rendered = Vec::new();
    for event in events {
        let line = render_entry(event, &cursor);
        let stated =
            read_checked(&line[..line.len() - 1]).expect("a line render_entry sealed reads back");
        cursor = Cursor {
            next_seq: stated.seq + 1,
            prev: stated.hash,
        };
        rendered.extend_from_slice(&line);
    }
    rendered
}

/// A session id names a directory, so it must be one path component: the
/// reason it is not, or `Ok`.
pub fn check_session_id(id: &str) -> Result<(), &'static str> {
    if id.is_empty() {
        Err("it is empty")
    } else if id == "." || id == ".." {
        Err("it names a directory link")
    } else if id.contains('/') || id.contains('\\') {
        Err("it contains a path separator")
    } else if id.contains('\0') {
        Err("it contains a NUL byte")
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One line checked as the entry at `seq` after `prev`.
    fn check_line(line: &[u8], seq: u64, prev: &Hash) -> Result<Stated, Fault> {
        let hash = check_line_hex(line, seq, &prev.hex_bytes())?;
        Ok(Stated {
            seq,
            prev: *prev,
            hash: Hash::from_hex(&hash).expect("checked hex"),
        })
    }

    /// A whole log in memory, walked in up to `threads` stretches the way
    /// session_log walks a file.
    fn verify_lines(bytes: &[u8], cursor: Cursor, threads: usize) -> Result<WalkEnd, Broken> {
        let end_at = |at: u64| -> Result<u64, ()> {
            let at = at as usize;
            Ok(memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |nl| at + nl + 1) as u64)
        };
        let cuts: Vec<usize> = cut_points(bytes.len() as u64, threads, end_at)
            .expect("in memory")
            .into_iter()
            .map(|c| c as usize)
            .collect();
        let stretches = walk_stretches(cuts.len() - 1, cursor, |i, mut walker| {
            let failure = walker.feed(&bytes[cuts[i]..cuts[i + 1]]).err();
            walker.finish(failure)
        });
        join(cursor, stretches)
    }

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

    /// The committed known-answer log (tests/vectors/log): rendering its
    /// payloads again gives it back byte for byte. Fails when the envelope's
    /// members, their order or their encoding change (`Envelope`,
    /// `render_entry`), or the session fingerprint does (`SESSION_CONTEXT`).
    #[test]
    fn the_committed_vector_renders_byte_for_byte() {
        use crate::hook::{Event, Invocation, Payload};
        const SESSION: &str = "4dc8a87d-d386-4e43-a1ee-15a0429dcdee";
        let payloads = include_str!("../../../tests/vectors/log/payloads.ndjson");
        let log: &[u8] = include_bytes!(
            "../../../tests/vectors/log/4dc8a87d-d386-4e43-a1ee-15a0429dcdee/events.ndjson"
        );
        // The session fingerprint: the first entry's prev.
        assert_eq!(
            Hash::session_fingerprint(SESSION).to_hex(),
            "fbbd843238a69ee4f25d296f40b71f186ccf05d3d15198e11f56362dac34d07e"
        );
        let first = log.split_inclusive(|&b| b == b'\n').next().expect("a line");
        assert_eq!(
            std::str::from_utf8(first).expect("UTF-8"),
            concat!(
                r#"{"seq":0,"ts":1795995450000000000,"host":"vm","hook_ppid":3327,"#,
                r#""cwd":"/home/dev/proj","session":"4dc8a87d-d386-4e43-a1ee-15a0429dcdee","#,
                r#""source":"intent:claude-code","kind":"session_start","body":{"#,
                r#""session_id":"4dc8a87d-d386-4e43-a1ee-15a0429dcdee","#,
                r#""transcript_path":"/home/dev/.claude/projects/-home-dev-proj/4dc8a87d-d386-4e43-a1ee-15a0429dcdee.jsonl","#,
                r#""cwd":"/home/dev/proj","hook_event_name":"SessionStart","source":"startup"},"#,
                r#""prev":"fbbd843238a69ee4f25d296f40b71f186ccf05d3d15198e11f56362dac34d07e","#,
                r#""hash":"42840d28a1ed90b0e71d0bbdb63ebee802541d2b8b36da0adfbf05566d9241eb"}"#,
                "\n"
            )
        );
        let mut cursor = Cursor::start(SESSION);
        let mut rendered = Vec::new();
        for (i, payload) in payloads.lines().enumerate() {
            let invocation = Invocation {
                ts: 1_795_995_450_000_000_000 + i as u64 * 1_000_000_000,
                host: "vm".into(),
                hook_ppid: Some(3327),
                cwd: Some("/home/dev/proj".into()),
            };
            let payload = Payload::parse(payload.as_bytes()).expect("a fixture payload");
            let line = render_entry(&Event::new(&invocation, payload), &cursor);
            let stated = read_checked(&line[..line.len() - 1]).expect("sealed");
            cursor = Cursor {
                next_seq: stated.seq + 1,
                prev: stated.hash,
            };
            rendered.extend_from_slice(&line);
        }
        assert_eq!(
            String::from_utf8_lossy(&rendered),
            String::from_utf8_lossy(log)
        );
    }

    /// The invocation of the vectors' line `i`: one second apart from `t0`.
    fn vector_invocation(t0: u64, i: usize) -> crate::hook::Invocation {
        crate::hook::Invocation {
            ts: t0 + i as u64 * 1_000_000_000,
            host: "vm".into(),
            hook_ppid: Some(3327),
            cwd: Some("/home/dev/proj".into()),
        }
    }

    /// The committed run vector (tests/vectors/run): a run's chain as `nd7
    /// run` writes it, nd7's own entries (`run_start`, `exec`, `exec_end`,
    /// `grant`, `run_end`, source `exit:nd7`) around a Bash call's hook
    /// entries, rendered again byte for byte. Fails when the body of one of
    /// nd7's own kinds changes (`run_entry`'s `*_body`), their envelope
    /// (`run_entry::event`), or the run's id (`run_entry::run_id`).
    #[test]
    fn the_committed_run_vector_renders_byte_for_byte() {
        use crate::hook::{Event, Payload};
        use crate::run_entry::{self, Ended, RunFacts, Stamp};
        use std::path::PathBuf;
        let run = run_entry::run_id(1_796_126_400, 4242, 0xab);
        assert_eq!(run, "run-20261201T120000Z-4242-00ab");
        let payloads: Vec<&str> = include_str!("../../../tests/vectors/run/payloads.ndjson")
            .lines()
            .collect();
        let log: &[u8] = include_bytes!(
            "../../../tests/vectors/run/run-20261201T120000Z-4242-00ab/events.ndjson"
        );
        let t0 = 1_796_126_400_000_000_000;
        let stamp = |i: usize| Stamp {
            ts: t0 + i as u64 * 1_000_000_000,
            host: "vm".into(),
            session: run.clone(),
        };
        let ours =
            |i: usize, kind: &'static str, tool_use_id: Option<&str>, body: serde_json::Value| {
                run_entry::event(
                    &stamp(i),
                    kind,
                    Some("/home/dev/proj").filter(|_| kind == run_entry::EXEC),
                    tool_use_id,
                    &body,
                )
            };
        let hook = |i: usize, text: &str| {
            Event::new(
                &vector_invocation(t0, i),
                Payload::parse(text.as_bytes()).expect("a fixture payload"),
            )
        };
        let (cargo, data) = (
            PathBuf::from("/home/dev/.cargo"),
            PathBuf::from("/home/dev/data"),
        );
        let program = ["claude".to_string(), "-p".into(), "run the command".into()];
        let rules = serde_json::json!({
            "project": "/home/dev/proj", "temp": "/tmp", "home": "/home/dev",
            "state": "/home/dev/.local/state/nd7", "exit": "/usr/local/bin/nd7-exec",
            "grants": [cargo], "secrets": ["/home/dev/.ssh"],
            "pins": [{"path": "/home/dev/proj", "dev": 2049, "ino": 131_073}, {"path": cargo, "dev": 2049, "ino": 131_074}],
            "aliases": [], "agent": "claude-code",
        });
        let line = "source /home/dev/.claude/shell-snapshots/snapshot-bash-1796126400-ab12.sh 2>/dev/null || true && eval 'echo hello-from-model' < /dev/null && pwd -P >| /tmp/claude-5e1f-cwd";
        let mut events = vec![
            ours(
                0,
                run_entry::RUN_START,
                None,
                run_entry::run_start_body(&RunFacts {
                    pid: 4242,
                    program: &program,
                    rules,
                    nd7_version: "0.1.0",
                    sandbox: "landlock",
                    landlock_abi: Some(6),
                    hooks: true,
                    agent: Some(run_entry::AGENT_CLAUDE),
                    grants: serde_json::json!([{"path": cargo, "from": "--preset cargo"}]),
                }),
            ),
            hook(1, payloads[0]),
            ours(
                2,
                run_entry::EXEC,
                Some("toolu_mock_0001"),
                run_entry::exec_body(line.as_bytes(), 4300, std::slice::from_ref(&cargo), None),
            ),
            ours(
                3,
                run_entry::EXEC_END,
                None,
                run_entry::exec_end_body(2, &Ended::Exited(0), None),
            ),
            hook(4, payloads[1]),
            ours(
                5,
                run_entry::GRANT,
                None,
                run_entry::grant_body("allow", &data, &[cargo.clone(), data.clone()]),
            ),
        ];
        // run_end carries the run's own reconciliation of what is above.
        let mut reconciler = run_entry::Reconciler::new();
        for line in render_chain(&run, &events).split_inclusive(|&b| b == b'\n') {
            reconciler.feed(&line[..line.len() - 1]);
        }
        let tally = reconciler.finish();
        assert!(tally.agrees(), "{tally:?}");
        events.push(ours(
            6,
            run_entry::RUN_END,
            None,
            run_entry::run_end_body(&Ended::Exited(0), &tally, 0),
        ));
        assert_eq!(
            Hash::session_fingerprint(&run).to_hex(),
            "1b4befd61bd441a9a7d4190515cd52e9e92d7409b4865a86fcc57b8c15b82f37"
        );
        assert_eq!(
            String::from_utf8_lossy(&render_chain(&run, &events)),
            String::from_utf8_lossy(log)
        );
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
        assert_eq!(end.cursor.next_seq, 5000);
        assert_eq!(end.last.map(|l| l.seq), Some(4999));
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

    fn split_lines(log: &[u8]) -> Vec<Vec<u8>> {
        log.split_inclusive(|&b| b == b'\n')
            .map(<[u8]>::to_vec)
            .collect()
    }

    #[test]
    fn every_split_gives_the_single_walks_verdict_for_every_tampering() {
        let lines = split_lines(&chain("s", 24));
        let mut cases: Vec<Vec<Vec<u8>>> = Vec::new();
        for k in 0..lines.len() {
            let mut flipped = lines.clone();
            flipped[k][9] ^= 1;
            cases.push(flipped);
            let mut deleted = lines.clone();
            deleted.remove(k);
            cases.push(deleted);
            if k + 1 < lines.len() {
                let mut swapped = lines.clone();
                swapped.swap(k, k + 1);
                cases.push(swapped);
            }
            let mut torn = lines[..=k].to_vec();
            torn[k].pop();
            cases.push(torn);
            // Re-sealed without its prev, with and without a wrong seq.
            for seq in [k as u64, k as u64 + 1] {
                let text = String::from_utf8(lines[k].clone()).expect("UTF-8");
                let rest =
                    &text[text.find(',').expect("a comma")..text.find(",\"prev\"").expect("prev")];
                let mut resealed = lines.clone();
                resealed[k] = seal(format!("{{\"seq\":{seq}{rest}}}").as_bytes());
                cases.push(resealed);
            }
        }
        for case in cases {
            let log: Vec<u8> = case.concat();
            // Deleting the last line leaves a valid chain; head catches that.
            let single = verify_lines(&log, Cursor::start("s"), 1);
            for threads in 2..=7 {
                assert_eq!(
                    verify_lines(&log, Cursor::start("s"), threads),
                    single,
                    "{threads} threads"
                );
            }
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
    fn links_down_needs_the_number_and_the_hash() {
        let entry = |seq: u64| Stated {
            seq,
            prev: Hash::of(&(seq.wrapping_sub(1)).to_le_bytes()),
            hash: Hash::of(&seq.to_le_bytes()),
        };
        assert!(links_down(&entry(5), &entry(4)));
        assert!(!links_down(&entry(5), &entry(3)), "a number skipped");
        assert!(!links_down(&entry(4), &entry(5)), "upwards");
        let mut other = entry(4);
        other.hash = Hash::of(b"other");
        assert!(!links_down(&entry(5), &other), "another entry 4");
        let top = Stated {
            seq: 0,
            prev: Hash::of(b"x"),
            hash: Hash::of(b"y"),
        };
        assert!(!links_down(&top, &entry(u64::MAX)), "no overflow");

        let head = |seq: u64, hash: Hash| Head { seq, hash };
        assert!(follows_head(&entry(3), &head(2, entry(2).hash)));
        assert!(!follows_head(&entry(3), &head(2, Hash::of(b"other"))));
        assert!(!follows_head(&entry(3), &head(1, entry(2).hash)));
        assert!(
            !follows_head(&top, &head(u64::MAX, top.prev)),
            "no overflow"
        );
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
            HeadState::Behind { entries: 1 }
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
