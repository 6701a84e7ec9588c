use super::*;
use nd7_format::vault::IndexEntry;

const K: KeyId = KeyId([1; 16]);
const OTHER: KeyId = KeyId([2; 16]);

fn d(n: u8) -> Digest {
    Digest([n; 32])
}

fn header(key: KeyId, first: u64, prev: Digest, digests: &[Digest]) -> BatchHeader {
    BatchHeader {
        machine: "m".into(),
        session: "s".into(),
        key,
        first,
        prev,
        index: digests
            .iter()
            .enumerate()
            .map(|(i, digest)| IndexEntry {
                seq: first + i as u64,
                digest: *digest,
            })
            .collect(),
    }
}

/// The stored chain: entries 0..=3 with digests d(0)..d(3) under K.
fn stored(seq: u64) -> Result<Option<(Digest, KeyId)>, StoreError> {
    Ok((seq <= 3).then(|| (d(seq as u8), K)))
}

fn run(b: &BatchHeader) -> Link {
    decide(b, Some(3), &mut stored).expect("no store error")
}

#[test]
fn a_batch_is_appended_acked_or_refused_by_how_it_links() {
    let mut none = |_| Ok(None);
    assert_eq!(
        decide(&header(K, 0, d(9), &[d(0)]), None, &mut none).expect("ok"),
        Link::Append
    );
    assert_eq!(run(&header(K, 4, d(3), &[d(4), d(5)])), Link::Append);
    // A resend of a stored batch, or any stretch already held identically.
    assert_eq!(run(&header(K, 2, d(1), &[d(2), d(3)])), Link::AlreadyStored);
    assert_eq!(run(&header(K, 1, d(0), &[d(1), d(2)])), Link::AlreadyStored);
    // Different entries where the vault has some, under the same key: a fork.
    assert!(matches!(run(&header(K, 4, d(9), &[d(4)])), Link::Fork(_)));
    assert!(matches!(
        run(&header(K, 2, d(1), &[d(2), d(8), d(4)])),
        Link::Fork(_)
    ));
    // Same entries, running past the head: refused, not a fork.
    assert!(matches!(
        run(&header(K, 3, d(2), &[d(3), d(4)])),
        Link::Unlinked(_)
    ));
    // A gap.
    assert!(matches!(
        run(&header(K, 6, d(5), &[d(6)])),
        Link::Unlinked(_)
    ));
}

#[test]
fn digests_under_another_chain_key_are_never_compared() {
    // A new chain key may start right after the head: its prev cannot be
    // checked here, and `nd7 admin pull` checks the join.
    assert_eq!(run(&header(OTHER, 4, d(42), &[d(40)])), Link::Append);
    // Anywhere else it is refused, neither stored nor taken for a fork.
    for b in [
        header(OTHER, 2, d(1), &[d(2), d(3)]),
        header(OTHER, 3, d(2), &[d(3), d(4)]),
        header(OTHER, 0, d(0), &[d(0)]),
    ] {
        assert!(matches!(run(&b), Link::Unlinked(w) if w.contains("another chain key")));
    }
}
