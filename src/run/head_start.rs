//! The head start the keeper gives `nd7 run` (ADR-0088), as bytes.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// What the keeper works out for `nd7 run` while `nd7 run` sets up
/// its own side: the credential stores with their real places
/// (`run_dir::secrets`; `None` when the list cannot be read, which the
/// `nd7 run` then reads itself to say why) and the device mounts. Sent over
/// the keeper's channel as bytes: paths need not be UTF-8.
#[derive(Debug, PartialEq)]
pub(super) struct HeadStart {
    pub(super) secrets: Option<Vec<PathBuf>>,
    pub(super) devices: Vec<PathBuf>,
}

impl HeadStart {
    pub(super) fn encode(&self) -> Vec<u8> {
        fn put(out: &mut Vec<u8>, paths: &[PathBuf]) {
            out.extend((paths.len() as u32).to_le_bytes());
            for path in paths {
                let bytes = path.as_os_str().as_bytes();
                out.extend((bytes.len() as u32).to_le_bytes());
                out.extend(bytes);
            }
        }
        let mut out = vec![u8::from(self.secrets.is_some())];
        put(&mut out, self.secrets.as_deref().unwrap_or_default());
        put(&mut out, &self.devices);
        out
    }

    /// The head start in `bytes`, or `None` when they are not one whole.
    pub(super) fn decode(bytes: &[u8]) -> Option<HeadStart> {
        fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
            let (head, rest) = bytes.split_at_checked(n)?;
            *bytes = rest;
            Some(head)
        }
        fn number(bytes: &mut &[u8]) -> Option<usize> {
            let raw: [u8; 4] = take(bytes, 4)?.try_into().ok()?;
            usize::try_from(u32::from_le_bytes(raw)).ok()
        }
        fn paths(bytes: &mut &[u8]) -> Option<Vec<PathBuf>> {
            let count = number(bytes)?;
            let mut out = Vec::with_capacity(count.min(bytes.len()));
            for _ in 0..count {
                let len = number(bytes)?;
                out.push(PathBuf::from(std::ffi::OsStr::from_bytes(take(
                    bytes, len,
                )?)));
            }
            Some(out)
        }
        let mut bytes = bytes;
        let has_secrets = *take(&mut bytes, 1)?.first()? == 1;
        let secrets = paths(&mut bytes)?;
        let devices = paths(&mut bytes)?;
        bytes.is_empty().then_some(HeadStart {
            secrets: has_secrets.then_some(secrets),
            devices,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_start_reads_back_whole_with_paths_that_are_not_utf8() {
        let odd = PathBuf::from(std::ffi::OsStr::from_bytes(b"/home/a/\xff\xfe"));
        for secrets in [
            Some(vec![PathBuf::from("/home/a/.ssh"), odd.clone()]),
            Some(Vec::new()),
            None,
        ] {
            let start = HeadStart {
                secrets,
                devices: vec![odd.clone(), PathBuf::from("/srv/chroot/dev")],
            };
            assert_eq!(HeadStart::decode(&start.encode()), Some(start));
        }
    }

    /// A head start cut short or with bytes after it is none at all: the
    /// `nd7 run` then works everything out itself.
    #[test]
    fn a_cut_or_padded_head_start_is_refused() {
        let start = HeadStart {
            secrets: Some(vec![PathBuf::from("/home/a/.aws")]),
            devices: vec![PathBuf::from("/mnt/dev")],
        };
        let bytes = start.encode();
        for cut in 0..bytes.len() {
            assert_eq!(HeadStart::decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut padded = bytes.clone();
        padded.push(0);
        assert_eq!(HeadStart::decode(&padded), None);
        // A count far beyond what follows is refused, not allocated.
        let mut huge = vec![1u8];
        huge.extend(u32::MAX.to_le_bytes());
        assert_eq!(HeadStart::decode(&huge), None);
    }
}
