//! What `nd7-exec` and `nd7 run` say to each other over the session's exit
//! socket (Linux), and what `nd7 record` hands the door. Pure: bytes in,
//! values out. A format, not the platform: it sits below the sandbox (which
//! serves both sockets) and below the run's log (which takes the door's
//! requests), so neither reaches into the other for it.
//!
//! One request from `nd7-exec`, sent with its three stdio descriptors
//! attached (SCM_RIGHTS): the command text, the working directory and the
//! environment. None of it selects or widens the rules the command runs
//! under: `nd7 run` takes those from its own session, for any caller the
//! kernel places in that session's process tree.
//!
//! ```text
//! request  = u32 length of the rest, then fields
//! fields   = field(command) field(cwd) u32 count field(env entry)*
//! field    = u32 length, bytes                      (integers little-endian)
//! ```
//!
//! Then frames of five bytes: from `nd7-exec`, `k` and a signal number to
//! pass on to the command; from `nd7 run`, the same `k` frame back once it
//! has passed the signal on, then `x` and the command's exit code, `s` and
//! the signal that ended it, or `r` and the length of a refusal whose UTF-8
//! text follows.
//!
//! The hooks' door (`record.sock`) takes one [`HookRequest`] from `nd7 record`
//! and answers with one frame: `a` once the entry is appended, `d` when the
//! run records that event through its own hook instead, or a refusal. A
//! request from `nd7 hook-explain` (flag 16) is judged, not recorded: the
//! answer is `e` and the length of the explanation whose UTF-8 text follows
//! (the floor refused something), or `d` (nothing to say).
//!
//! ```text
//! hook request = u32 length of the rest, then u8 flags, u64 ts, field(cwd), field(body)
//! flags        = 1: sent by the hook nd7 run registered; 2: body is a glimpse
//!                (the payload was too large); 4: cwd present; 8: Codex's hook
//!                (`--agent codex`); 16: explain (`nd7 hook-explain`'s: judge
//!                the tool call, do not record it)
//! ```

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// The largest request accepted: a command and an environment are far
/// smaller (Linux caps both together at a few MiB for exec).
pub const MAX_REQUEST: usize = 16 << 20;

/// What `nd7-exec` asks `nd7 run` to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub command: OsString,
    pub cwd: PathBuf,
    pub env: Vec<(OsString, OsString)>,
}

/// One five-byte (or, for a refusal, longer) message after the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// To `nd7 run`: pass this signal on to the command's process group.
    Kill(i32),
    /// To `nd7-exec`: the command exited with this code.
    Exited(i32),
    /// To `nd7-exec`: the command was ended by this signal.
    Signaled(i32),
    /// To `nd7-exec`: nothing was run, for this reason.
    Refused(String),
    /// To `nd7 record`: the entry is in the log.
    Recorded,
    /// To `nd7 record`: not recorded, because the run records this event
    /// through the hook it registered itself (the same event, once). To
    /// `nd7 hook-explain`: nothing the floor refused.
    Skipped,
    /// To `nd7 hook-explain`: what to tell the model about what the floor
    /// refused.
    Explained(String),
}

/// What `nd7 record` hands `nd7 run` through the hooks' door: what the hook
/// received, and the facts it took. All of it is the agent's word.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookRequest {
    /// Whose hook it is: Claude Code's, or another agent's (`--agent`).
    pub agent: crate::hook::Agent,
    /// When the hook fired: nanoseconds since the Unix epoch.
    pub ts: u64,
    /// The recorder's working directory, used when the payload has none.
    pub cwd: Option<Vec<u8>>,
    /// Whether it came from the hook `nd7 run` registered (`record --run-hook`).
    pub run_hook: bool,
    /// Whether `body` is a glimpse of an oversized payload (its placing
    /// members, `bytes` and `blake3`) rather than the payload itself.
    pub glimpse: bool,
    /// Whether it asks for the tool call to be judged (`nd7 hook-explain`)
    /// rather than recorded.
    pub explain: bool,
    pub body: Vec<u8>,
}

const RUN_HOOK: u8 = 1;
const GLIMPSE: u8 = 2;
const CWD: u8 = 4;
const CODEX: u8 = 8;
const EXPLAIN: u8 = 16;

impl HookRequest {
    /// The request's bytes, its length prefix first.
    pub fn encode(&self) -> Vec<u8> {
        let mut flags = 0;
        if self.run_hook {
            flags |= RUN_HOOK;
        }
        if self.glimpse {
            flags |= GLIMPSE;
        }
        if self.cwd.is_some() {
            flags |= CWD;
        }
        if self.explain {
            flags |= EXPLAIN;
        }
        if self.agent == crate::hook::Agent::Codex {
            flags |= CODEX;
        }
        let mut body = vec![flags];
        body.extend_from_slice(&self.ts.to_le_bytes());
        field(&mut body, self.cwd.as_deref().unwrap_or_default());
        field(&mut body, &self.body);
        let mut out = (body.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(&body);
        out
    }

    /// A request from its body (the bytes after the length prefix, which
    /// [`Request::announced_len`] checks).
    pub fn decode(body: &[u8]) -> Result<HookRequest, WireError> {
        let (&flags, mut rest) = body.split_first().ok_or(WireError::Truncated("flags"))?;
        if flags & !(RUN_HOOK | GLIMPSE | CWD | CODEX | EXPLAIN) != 0 {
            return Err(WireError::UnknownFlags(flags));
        }
        let (ts, tail) = rest
            .split_first_chunk::<8>()
            .ok_or(WireError::Truncated("time"))?;
        rest = tail;
        let cwd = take_field(&mut rest, "working directory")?;
        let payload = take_field(&mut rest, "payload")?;
        if !rest.is_empty() {
            return Err(WireError::Trailing(rest.len()));
        }
        Ok(HookRequest {
            agent: if flags & CODEX != 0 {
                crate::hook::Agent::Codex
            } else {
                crate::hook::Agent::ClaudeCode
            },
            ts: u64::from_le_bytes(*ts),
            cwd: (flags & CWD != 0).then(|| cwd.to_vec()),
            run_hook: flags & RUN_HOOK != 0,
            glimpse: flags & GLIMPSE != 0,
            explain: flags & EXPLAIN != 0,
            body: payload.to_vec(),
        })
    }
}

/// Why bytes are not a request or a frame.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("request of {0} bytes is larger than the {MAX_REQUEST} allowed")]
    TooLarge(usize),
    #[error("request ends early, in its {0}")]
    Truncated(&'static str),
    #[error("request has {0} bytes after its last field")]
    Trailing(usize),
    #[error("unknown frame tag {0:#04x}")]
    UnknownFrame(u8),
    #[error("unknown request flags {0:#04x}")]
    UnknownFlags(u8),
}

impl Request {
    /// The request's bytes, its length prefix first.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        field(&mut body, self.command.as_bytes());
        field(&mut body, self.cwd.as_os_str().as_bytes());
        body.extend_from_slice(&(self.env.len() as u32).to_le_bytes());
        for (key, value) in &self.env {
            let mut entry = key.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            field(&mut body, &entry);
        }
        let mut out = (body.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(&body);
        out
    }

    /// The length a request's prefix announces, refused when too large.
    pub fn announced_len(prefix: [u8; 4]) -> Result<usize, WireError> {
        let len = u32::from_le_bytes(prefix) as usize;
        if len > MAX_REQUEST {
            return Err(WireError::TooLarge(len));
        }
        Ok(len)
    }

    /// A request from its body (the bytes after the length prefix).
    pub fn decode(body: &[u8]) -> Result<Request, WireError> {
        let mut rest = body;
        let command = take_field(&mut rest, "command")?;
        let cwd = take_field(&mut rest, "working directory")?;
        let count = take_u32(&mut rest, "environment")? as usize;
        let mut env = Vec::with_capacity(count.min(4096));
        for _ in 0..count {
            let entry = take_field(&mut rest, "environment")?;
            let (key, value) = match entry.iter().position(|&b| b == b'=') {
                Some(at) => (&entry[..at], &entry[at + 1..]),
                None => (entry, &[][..]),
            };
            env.push((
                OsString::from_vec(key.to_vec()),
                OsString::from_vec(value.to_vec()),
            ));
        }
        if !rest.is_empty() {
            return Err(WireError::Trailing(rest.len()));
        }
        Ok(Request {
            command: OsString::from_vec(command.to_vec()),
            cwd: PathBuf::from(OsString::from_vec(cwd.to_vec())),
            env,
        })
    }
}

impl Frame {
    pub fn encode(&self) -> Vec<u8> {
        let (tag, n) = match self {
            Frame::Kill(n) => (b'k', *n),
            Frame::Exited(n) => (b'x', *n),
            Frame::Signaled(n) => (b's', *n),
            Frame::Recorded => (b'a', 0),
            Frame::Skipped => (b'd', 0),
            Frame::Refused(text) | Frame::Explained(text) => {
                let tag = if matches!(self, Frame::Refused(_)) {
                    b'r'
                } else {
                    b'e'
                };
                let mut out = vec![tag];
                out.extend_from_slice(&(text.len() as u32).to_le_bytes());
                out.extend_from_slice(text.as_bytes());
                return out;
            }
        };
        let mut out = vec![tag];
        out.extend_from_slice(&n.to_le_bytes());
        out
    }

    /// A frame from its first five bytes; for a refusal or an explanation,
    /// the number of text bytes still to read comes back instead, to be
    /// passed with the first byte to [`Frame::text`].
    pub fn decode(head: [u8; 5]) -> Result<Result<Frame, usize>, WireError> {
        let n = i32::from_le_bytes([head[1], head[2], head[3], head[4]]);
        Ok(Ok(match head[0] {
            b'k' => Frame::Kill(n),
            b'x' => Frame::Exited(n),
            b's' => Frame::Signaled(n),
            b'a' => Frame::Recorded,
            b'd' => Frame::Skipped,
            b'r' | b'e' => return Ok(Err((n as u32 as usize).min(64 << 10))),
            other => return Err(WireError::UnknownFrame(other)),
        }))
    }

    pub fn refusal(text: &[u8]) -> Frame {
        Frame::Refused(String::from_utf8_lossy(text).into_owned())
    }

    /// The text frame whose first byte was `tag`, with its text.
    pub fn text(tag: u8, text: &[u8]) -> Frame {
        let text = String::from_utf8_lossy(text).into_owned();
        if tag == b'e' {
            Frame::Explained(text)
        } else {
            Frame::Refused(text)
        }
    }
}

fn field(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn take_u32(rest: &mut &[u8], what: &'static str) -> Result<u32, WireError> {
    let (head, tail) = rest
        .split_first_chunk::<4>()
        .ok_or(WireError::Truncated(what))?;
    *rest = tail;
    Ok(u32::from_le_bytes(*head))
}

fn take_field<'a>(rest: &mut &'a [u8], what: &'static str) -> Result<&'a [u8], WireError> {
    let len = take_u32(rest, what)? as usize;
    if rest.len() < len {
        return Err(WireError::Truncated(what));
    }
    let (field, tail) = rest.split_at(len);
    *rest = tail;
    Ok(field)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            command: OsString::from("printf '%s\\n' \"$HOME\"; exit 3"),
            cwd: PathBuf::from("/home/u/proj with space"),
            env: vec![
                ("HOME".into(), "/home/u".into()),
                ("EMPTY".into(), "".into()),
                ("EQ".into(), "a=b=c".into()),
                (
                    OsString::from_vec(b"RAW\xff".to_vec()),
                    OsString::from_vec(b"\x00\xfe".to_vec()),
                ),
            ],
        }
    }

    #[test]
    fn a_request_reads_back_byte_for_byte() {
        let bytes = request().encode();
        let len = Request::announced_len(bytes[..4].try_into().expect("4 bytes")).expect("fits");
        assert_eq!(len, bytes.len() - 4);
        assert_eq!(Request::decode(&bytes[4..]), Ok(request()));
    }

    #[test]
    fn every_cut_request_is_refused_and_never_misread() {
        let bytes = request().encode();
        for cut in 0..bytes.len() - 4 {
            assert!(
                Request::decode(&bytes[4..4 + cut]).is_err(),
                "cut at {cut} accepted"
            );
        }
        let mut long = bytes[4..].to_vec();
        long.push(0);
        assert_eq!(Request::decode(&long), Err(WireError::Trailing(1)));
    }

    #[test]
    fn an_oversized_request_is_refused_before_it_is_read() {
        let prefix = ((MAX_REQUEST + 1) as u32).to_le_bytes();
        assert_eq!(
            Request::announced_len(prefix),
            Err(WireError::TooLarge(MAX_REQUEST + 1))
        );
    }

    #[test]
    fn a_hook_request_reads_back_and_a_cut_one_never_does() {
        for request in [
            HookRequest {
                agent: crate::hook::Agent::ClaudeCode,
                ts: u64::MAX - 3,
                cwd: Some(b"/home/u/proj \xff".to_vec()),
                run_hook: true,
                glimpse: false,
                explain: false,
                body: br#"{"session_id":"s"}"#.to_vec(),
            },
            HookRequest {
                agent: crate::hook::Agent::Codex,
                ts: 0,
                cwd: None,
                run_hook: false,
                glimpse: true,
                explain: true,
                body: Vec::new(),
            },
        ] {
            let bytes = request.encode();
            let len =
                Request::announced_len(bytes[..4].try_into().expect("4 bytes")).expect("fits");
            assert_eq!(len, bytes.len() - 4);
            assert_eq!(HookRequest::decode(&bytes[4..]), Ok(request));
            for cut in 0..bytes.len() - 4 {
                assert!(
                    HookRequest::decode(&bytes[4..4 + cut]).is_err(),
                    "cut at {cut}"
                );
            }
        }
        let mut odd = HookRequest {
            agent: crate::hook::Agent::ClaudeCode,
            ts: 1,
            cwd: None,
            run_hook: false,
            glimpse: false,
            explain: false,
            body: vec![],
        }
        .encode();
        odd[4] = 32;
        assert_eq!(
            HookRequest::decode(&odd[4..]),
            Err(WireError::UnknownFlags(32))
        );
    }

    #[test]
    fn frames_read_back() {
        for frame in [
            Frame::Kill(15),
            Frame::Exited(0),
            Frame::Exited(255),
            Frame::Signaled(9),
            Frame::Recorded,
            Frame::Skipped,
        ] {
            let bytes = frame.encode();
            let head: [u8; 5] = bytes[..].try_into().expect("5 bytes");
            assert_eq!(Frame::decode(head), Ok(Ok(frame)));
        }
        let bytes = Frame::Refused("no session".into()).encode();
        let head: [u8; 5] = bytes[..5].try_into().expect("5 bytes");
        assert_eq!(Frame::decode(head), Ok(Err(10)));
        assert_eq!(
            Frame::refusal(&bytes[5..]),
            Frame::Refused("no session".into())
        );
        assert_eq!(Frame::decode(*b"?0000"), Err(WireError::UnknownFrame(b'?')));
        let bytes = Frame::Explained("nd7 allow".into()).encode();
        let head: [u8; 5] = bytes[..5].try_into().expect("5 bytes");
        assert_eq!(Frame::decode(head), Ok(Err(9)));
        assert_eq!(
            Frame::text(head[0], &bytes[5..]),
            Frame::Explained("nd7 allow".into())
        );
    }
}
