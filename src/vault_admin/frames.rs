//! What the two readers of a pull share, the batches' ([`super::pull`]) and
//! the transcript pieces' ([`crate::transcript::pull`]): the tally of the
//! frames the vault's signed last frame vouches for, and the chain keys the
//! admin's identity unwrapped, each once.

use crate::vault::{self, AgeIdentity, ChainKey, KeyId, PublicKey, PullEnd, PullOf};

/// The frames of a reply before its last: how many, and the BLAKE3 of each
/// as it came (its length, then its bytes), which the last frame signs.
pub(crate) struct Tally {
    frames: u64,
    digest: blake3::Hasher,
}

impl Tally {
    pub(crate) fn new() -> Tally {
        Tally {
            frames: 0,
            digest: blake3::Hasher::new(),
        }
    }

    /// Counts a frame that is not the last.
    pub(crate) fn count(&mut self, body: &[u8]) {
        self.frames += 1;
        self.digest.update(&(body.len() as u32).to_be_bytes());
        self.digest.update(body);
    }

    /// Whether `body`, the vault's signed last frame, answers this request
    /// (`nonce`, of `machine`'s `session`) with every frame counted; why
    /// not, else.
    pub(crate) fn check_end(
        &self,
        body: &[u8],
        vault_key: &PublicKey,
        nonce: &[u8; 16],
        (machine, session): (&str, &str),
        of: PullOf,
    ) -> Result<(), String> {
        PullEnd::parse(body)
            .map_err(|e| e.to_string())
            .and_then(|end| {
                end.verify(
                    vault_key,
                    nonce,
                    machine,
                    session,
                    of,
                    self.frames,
                    self.digest.finalize().as_bytes(),
                )
            })
    }
}

/// The chain keys a pull unwrapped, by id.
#[derive(Default)]
pub(crate) struct ChainKeys(Vec<(KeyId, ChainKey)>);

impl ChainKeys {
    /// The chain key of id `id`, if unwrapped already.
    pub(crate) fn find(&self, id: KeyId) -> Option<&ChainKey> {
        self.0.iter().find(|(k, _)| *k == id).map(|(_, key)| key)
    }

    /// The chain key of id `id`, unwrapped from `wrapped` with `identity`
    /// the first time.
    pub(crate) fn get(
        &mut self,
        id: KeyId,
        wrapped: &[u8],
        identity: &AgeIdentity,
    ) -> Result<&ChainKey, vault::Error> {
        if let Some(i) = self.0.iter().position(|(k, _)| *k == id) {
            return Ok(&self.0[i].1);
        }
        let key = vault::unwrap_chain_key(wrapped, identity)?;
        self.0.push((KeyId::of(&key), key));
        Ok(&self.0[self.0.len() - 1].1)
    }
}
