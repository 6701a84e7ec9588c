use super::*;

/// Deterministic "randomness" for tests: a counter run through BLAKE3.
fn rng(seed: u8) -> impl FnMut(&mut [u8]) {
    let mut n = 0u64;
    move |buf: &mut [u8]| {
        n += 1;
        let mut h = blake3::Hasher::new();
        h.update(&[seed]);
        h.update(&n.to_le_bytes());
        h.finalize_xof().fill(buf);
    }
}

fn secret(seed: u8) -> Secret32 {
    let mut b = [0u8; 32];
    rng(seed)(&mut b);
    Secret32::from_bytes(b)
}

fn entries(session: &str, n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut prev = Hash::session_fingerprint(session);
    for seq in 0..n {
        let line = chain::seal(
            format!(
                "{{\"seq\":{seq},\"ts\":{},\"body\":{{}},\"prev\":\"{prev}\"}}",
                1000 + seq
            )
            .as_bytes(),
        );
        prev = chain::read_stated(&line[..line.len() - 1])
            .expect("sealed")
            .hash;
        out.extend_from_slice(&line);
    }
    out
}

#[test]
fn age_wrap_round_trips_for_each_recipient_and_refuses_others() {
    let admins: Vec<AgeIdentity> = (1..=3)
        .map(|s| AgeIdentity::from_secret(&secret(s)))
        .collect();
    let recipients: Vec<AgeRecipient> = admins.iter().map(AgeIdentity::recipient).collect();
    let key = secret(9);
    let file = wrap_chain_key(&key, &recipients, &mut rng(7));
    assert!(file.starts_with(b"age-encryption.org/v1\n-> X25519 "));
    for admin in &admins {
        let got = unwrap_chain_key(&file, admin).expect("each admin opens it");
        assert_eq!(got.expose_secret(), key.expose_secret());
    }
    let stranger = AgeIdentity::from_secret(&secret(4));
    assert_eq!(
        unwrap_chain_key(&file, &stranger).map(|_| ()),
        Err(Error::NoMatchingStanza)
    );
    // The MAC covers the header: a changed MAC is refused.
    let mac_at = file.windows(4).position(|w| w == b"--- ").expect("mac") + 4;
    let mut tampered = file.clone();
    tampered[mac_at] = if tampered[mac_at] == b'A' { b'B' } else { b'A' };
    assert_eq!(
        unwrap_chain_key(&tampered, &admins[0]).map(|_| ()),
        Err(Error::BadHeaderMac)
    );
}

#[test]
fn age_keys_round_trip_through_bech32() {
    let id = AgeIdentity::from_secret(&secret(1));
    let text = id.to_bech32();
    assert!(text.starts_with("AGE-SECRET-KEY-1"), "{text}");
    let back =
        AgeIdentity::parse(&format!("# created: now\n# public key: x\n{text}\n")).expect("parses");
    assert_eq!(back.recipient(), id.recipient());
    let r = id.recipient().to_string();
    assert!(r.starts_with("age1"), "{r}");
    assert_eq!(AgeRecipient::parse(&r), Ok(id.recipient()));
    assert!(AgeRecipient::parse(&r.to_uppercase()).is_err());
    assert!(AgeRecipient::parse("age1xyz").is_err());
}

#[test]
fn recipients_document_is_pinned_to_the_org_key() {
    let org = SigningKey::from_seed(&secret(1));
    let other = SigningKey::from_seed(&secret(2));
    let vault_key = SigningKey::from_seed(&secret(8)).public();
    let admins = [AgeIdentity::from_secret(&secret(3)).recipient()];
    let doc = Recipients::sign(&org, 1, 9000, &vault_key, &admins);
    let fp = org.public().fingerprint();
    let parsed = Recipients::verify(&doc, &fp).expect("verifies");
    assert_eq!(parsed.recipients, admins);
    assert_eq!(
        (parsed.version, parsed.valid_until, parsed.vault),
        (1, 9000, vault_key)
    );
    assert!(!parsed.expired(9000) && parsed.expired(9001));
    // Signed by another key: refused with both fingerprints named.
    let forged = Recipients::sign(&other, 1, 9000, &vault_key, &admins);
    assert!(matches!(
        Recipients::verify(&forged, &fp),
        Err(Error::WrongOrgKey { .. })
    ));
    // The org line swapped to the pinned key, signature left: refused.
    let spliced = forged.replace(&other.public().to_hex(), &org.public().to_hex());
    assert_eq!(
        Recipients::verify(&spliced, &fp),
        Err(Error::BadDocumentSignature)
    );
    // A recipient added, the version raised or the vault key swapped after
    // signing: refused.
    let extra = AgeIdentity::from_secret(&secret(4)).recipient();
    for altered in [
        doc.replacen("signature", &format!("recipient {extra}\nsignature"), 1),
        doc.replacen("version 1", "version 9", 1),
        doc.replacen("valid-until 9000", "valid-until 9999", 1),
        doc.replacen(&vault_key.to_hex(), &other.public().to_hex(), 1),
    ] {
        assert_eq!(
            Recipients::verify(&altered, &fp),
            Err(Error::BadDocumentSignature)
        );
    }
}

#[test]
fn recipients_are_taken_only_at_a_higher_version() {
    let org = SigningKey::from_seed(&secret(1));
    let vault_key = SigningKey::from_seed(&secret(8)).public();
    let (a, b) = (
        AgeIdentity::from_secret(&secret(3)).recipient(),
        AgeIdentity::from_secret(&secret(4)).recipient(),
    );
    let doc = |version, recipients: &[AgeRecipient]| {
        Recipients::parse(&Recipients::sign(
            &org, version, 9000, &vault_key, recipients,
        ))
        .expect("doc")
    };
    let held = doc(2, &[a]);
    assert_eq!(held.update_to(&doc(3, &[a, b])), Update::Newer);
    assert_eq!(held.update_to(&doc(2, &[a])), Update::Same);
    assert!(
        matches!(held.update_to(&doc(1, &[a, b])), Update::Refused(w) if w.contains("rollback"))
    );
    assert!(matches!(
        held.update_to(&doc(2, &[a, b])),
        Update::Refused(_)
    ));
}

#[test]
fn an_enrolment_needs_a_token_the_organisation_signed() {
    let org = SigningKey::from_seed(&secret(1));
    let machine = SigningKey::from_seed(&secret(2)).public();
    let token = EnrolToken::mint(&org, &[9; 16], 5000, 3);
    let parsed = EnrolToken::parse(&token).expect("parses");
    assert_eq!((parsed.expires, parsed.recipients), (5000, 3));
    assert_eq!(parsed.check(&org.public()), Ok(()));
    let enrolment = parsed.enrolment(&machine, 4000);
    let back = Enrolment::parse(enrolment.render().as_bytes()).expect("round trip");
    assert_eq!(back, enrolment);
    assert_eq!(back.verify(&org.public(), Some(5000)), Ok(()));
    assert_eq!(back.verify(&org.public(), None), Ok(()));
    assert!(matches!(
        back.verify(&org.public(), Some(5001)),
        Err(Error::TokenExpired { .. })
    ));
    // Endorsed after the token expired: refused even without a clock (what
    // `nd7 admin pull` checks), and the date cannot be moved back.
    let late = parsed.enrolment(&machine, 5001);
    assert_eq!(
        late.verify(&org.public(), None),
        Err(Error::EndorsedLate {
            expires: 5000,
            endorsed: 5001
        })
    );
    let mut backdated = late.clone();
    backdated.endorsed = 4000;
    assert_eq!(
        backdated.verify(&org.public(), None),
        Err(Error::BadEndorsement)
    );
    // The recipients version is the organisation's: lowering it breaks its signature.
    let mut lowered = back.clone();
    lowered.recipients = 1;
    assert!(matches!(
        lowered.verify(&org.public(), None),
        Err(Error::BadTokenSignature(_))
    ));
    let mut lowered_token = EnrolToken::parse(&token.replacen(".3.", ".1.", 1)).expect("parses");
    assert!(lowered_token.check(&org.public()).is_err());
    lowered_token.recipients = 3;
    assert_eq!(lowered_token.check(&org.public()), Ok(()));
    // The secret never travels: the enrolment holds only the token's public key.
    assert!(!enrolment.render().contains(&hex(&[9; 16])));
    // Another organisation's key does not vouch for it.
    let other = SigningKey::from_seed(&secret(3)).public();
    assert!(matches!(
        back.verify(&other, None),
        Err(Error::BadTokenSignature(_))
    ));
    // The endorsement is of one machine key: swapping the key breaks it.
    let mut swapped = back.clone();
    swapped.key = other;
    assert_eq!(
        swapped.verify(&org.public(), None),
        Err(Error::BadEndorsement)
    );
    // A later expiry breaks the organisation's signature.
    let mut extended = back;
    extended.expires += 1;
    assert!(matches!(
        extended.verify(&org.public(), None),
        Err(Error::BadTokenSignature(_))
    ));
    assert!(EnrolToken::parse("abc.1.2").is_err());
    assert!(EnrolToken::parse(&format!("{}.1.{}", hex(&[9; 16]), "00".repeat(64))).is_err());
    assert_eq!(machine_id(&machine).len(), 32);
}

#[test]
fn request_signatures_cover_method_path_time_nonce_length_and_body() {
    let key = SigningKey::from_seed(&secret(1));
    let auth = RequestAuth::sign(&key, "m1", "POST", "/v1/batches", 1000, [7; 16], b"body");
    let pk = key.public();
    assert_eq!(
        auth.verify(&pk, "POST", "/v1/batches", b"body", 1000),
        Ok(())
    );
    assert_eq!(
        auth.verify(&pk, "POST", "/v1/batches", b"body", 1290),
        Ok(())
    );
    // From the headers alone, before the body: the length is signed…
    assert_eq!(
        auth.verify_headers(&pk, "POST", "/v1/batches", 4, 1000),
        Ok(())
    );
    assert_eq!(
        auth.verify_headers(&pk, "POST", "/v1/batches", 5, 1000),
        Err(Error::BadSignature)
    );
    // …and so is the body's hash, which the body read must match.
    assert_eq!(auth.verify_body(b"body"), Ok(()));
    assert_eq!(auth.verify_body(b"bodY"), Err(Error::BodyMismatch));
    for (method, path) in [("GET", "/v1/batches"), ("POST", "/v1/other")] {
        assert_eq!(
            auth.verify(&pk, method, path, b"body", 1000),
            Err(Error::BadSignature)
        );
    }
    let mut claimed = auth.clone();
    claimed.body = *blake3::hash(b"bodY").as_bytes();
    assert_eq!(
        claimed.verify_headers(&pk, "POST", "/v1/batches", 4, 1000),
        Err(Error::BadSignature)
    );
    assert_eq!(
        auth.verify(&pk, "POST", "/v1/batches", b"body", 1301),
        Err(Error::Stale { skew: 301 })
    );
    let other = SigningKey::from_seed(&secret(2)).public();
    assert_eq!(
        auth.verify(&other, "POST", "/v1/batches", b"body", 1000),
        Err(Error::BadSignature)
    );
    let headers = auth.headers();
    let back = RequestAuth::from_headers(|name| {
        headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    });
    assert_eq!(back, Ok(auth));
}

#[test]
fn signed_and_authenticated_bytes_are_frozen() {
    // These bytes are signed or authenticated; changing them breaks every
    // vault and every machine in the field.
    assert_eq!(
        String::from_utf8(request_message(
            "POST",
            "/v1/batches",
            5,
            &[0xab; 16],
            9,
            &[0xcd; 32]
        ))
        .expect("utf8"),
        format!(
            "nd7-request v2\nPOST\n/v1/batches\n5\n{}\n9\n{}\n",
            "ab".repeat(16),
            "cd".repeat(32)
        )
    );
    let d = |b: &[u8]| Digest(*blake3::hash(b).as_bytes());
    let header = BatchHeader {
        machine: "m1".into(),
        session: "s/x".replace('/', "-"),
        key: KeyId([0x11; 16]),
        first: 3,
        prev: d(b"p"),
        index: vec![IndexEntry {
            seq: 3,
            digest: d(b"h"),
        }],
    };
    assert_eq!(
        String::from_utf8(header.render()).expect("utf8"),
        format!(
            "nd7-batch v2\nmachine m1\nsession 732d78\nkey {}\nfirst 3\nprev {}\nentries 1\n3 {}\n",
            "11".repeat(16),
            d(b"p"),
            d(b"h")
        )
    );
    assert_eq!(BatchHeader::parse(&header.render()), Ok(header.clone()));
    let checkpoint = Checkpoint::of(&header, [0x22; 32]);
    assert_eq!(
        checkpoint.render(),
        format!(
            "nd7-checkpoint v2\nmachine m1\nsession 732d78\nkey {}\nfirst 3\nlast 3\nhead {}\nbatch {}\n",
            "11".repeat(16),
            d(b"h"),
            "22".repeat(32)
        )
    );
    let org = SigningKey::from_seed(&secret(1));
    let pk = org.public();
    let enrolment = Enrolment {
        key: pk,
        token_key: pk,
        expires: 7,
        recipients: 2,
        endorsed: 6,
        token_signature: [1; 64],
        endorsement: [2; 64],
    };
    assert_eq!(
        enrolment.render(),
        format!(
            "nd7-enroll v3\nkey {k}\ntoken-key {k}\nexpires 7\nrecipients 2\nendorsed 6\ntoken-signature {}\nendorsement {}\n",
            "01".repeat(64),
            "02".repeat(64),
            k = pk.to_hex()
        )
    );
    let admin = AgeIdentity::from_secret(&secret(3)).recipient();
    let doc = Recipients::sign(&org, 2, 99, &pk, &[admin]);
    assert_eq!(
        doc.rsplit_once("signature ").expect("signed").0,
        format!(
            "nd7-recipients v3\norg {k}\nversion 2\nvalid-until 99\nvault {k}\nrecipient {admin}\n",
            k = pk.to_hex()
        )
    );
    let token = EnrolToken::parse(&EnrolToken::mint(&org, &[4; 16], 7, 2)).expect("token");
    let token_key = token.public();
    assert!(
        pk.verify(
            format!(
                "nd7-token v3\norg {}\nkey {}\nexpires 7\nrecipients 2\n",
                pk.to_hex(),
                token_key.to_hex()
            )
            .as_bytes(),
            &token.signature
        )
    );
    let endorsed = token.enrolment(&pk, 6);
    assert!(token_key.verify(
        format!("nd7-endorse v3\nkey {}\nat 6\n", pk.to_hex()).as_bytes(),
        &endorsed.endorsement
    ));
    // Derivations: contexts and lengths are part of the format.
    let key = Secret32::from_bytes([5; 32]);
    assert_eq!(
        KeyId::of(&key).to_hex(),
        hex(&blake3::derive_key("nd7 2026-12 vault chain key id v2", &[5; 32])[..16])
    );
    let h = Hash::of(b"e");
    let index_key = blake3::derive_key("nd7 2026-12 vault index key v2", &[5; 32]);
    assert_eq!(
        IndexKey::of(&key).digest(&h).0,
        *blake3::keyed_hash(&index_key, h.as_bytes()).as_bytes()
    );
    assert_eq!(
        machine_id(&pk),
        hex(&blake3::derive_key("nd7 2026-12 vault machine id v2", &pk.0)[..16])
    );
    let notice = RestoreNotice::sign(&org, 10, 20);
    assert_eq!(
        notice.render(),
        format!(
            "nd7-restore v2\nvault {}\nbackup 10\nrestored 20\nsignature {}\n",
            pk.to_hex(),
            hex(&notice.signature)
        )
    );
}

fn sealed_batch(n: u64) -> (Vec<u8>, Vec<u8>, ChainKey, SigningKey) {
    let lines = entries("sess", n);
    let key = secret(5);
    let ik = IndexKey::of(&key);
    let header = BatchHeader {
        machine: "m1".into(),
        session: "sess".into(),
        key: KeyId::of(&key),
        first: 0,
        prev: ik.digest(&Hash::session_fingerprint("sess")),
        index: index_lines(&lines, &ik).expect("index"),
    };
    let machine = SigningKey::from_seed(&secret(7));
    let (body, checkpoint) = seal_batch(&header, &lines, &key, b"wrapped", [3; 24], &machine);
    assert_eq!(parse_batch(&body).expect("parses").checkpoint, checkpoint);
    (body, lines, key, machine)
}

#[test]
fn a_batch_opens_to_exactly_its_entries() {
    let (body, lines, key, machine) = sealed_batch(50);
    let batch = parse_batch(&body).expect("parses");
    assert_eq!(batch.header.last().seq, 49);
    assert_eq!(batch.wrapped_key, b"wrapped");
    assert!(batch.signed_by(&machine.public()));
    let opened = open_batch(&batch, &key).expect("opens");
    assert_eq!(opened.entries, lines);
    assert_eq!(opened.prev, Hash::session_fingerprint("sess"));
    let last = lines[..lines.len() - 1]
        .rsplit(|&b| b == b'\n')
        .next()
        .expect("last");
    assert_eq!(opened.last, chain::read_stated(last).expect("entry").hash);
    assert!(matches!(
        open_batch(&batch, &secret(6)).map(|_| ()),
        Err(Error::IndexMismatch(_))
    ));
}

#[test]
fn any_byte_changed_breaks_the_checkpoint_signature() {
    let (body, _, key, machine) = sealed_batch(5);
    let pk = machine.public();
    // Every part: magic-adjacent lengths aside, flip one byte in the header,
    // the wrapped key, the nonce, the ciphertext and the signature.
    let header_at = 5 + 4 + 10;
    let wrapped_at = body
        .windows(7)
        .position(|w| w == b"wrapped")
        .expect("wrapped");
    let nonce_at = wrapped_at + 7;
    for at in [
        header_at,
        wrapped_at,
        nonce_at,
        body.len() - 80,
        body.len() - 1,
    ] {
        let mut altered = body.clone();
        altered[at] ^= 1;
        if let Ok(batch) = parse_batch(&altered) {
            assert!(!batch.signed_by(&pk), "byte {at} changed, still signed");
        }
    }
    // Signed by another machine's key: not this machine's.
    let batch = parse_batch(&body).expect("parses");
    assert!(!batch.signed_by(&SigningKey::from_seed(&secret(8)).public()));
    // A flipped ciphertext byte also fails to decrypt.
    let mut flipped = body.clone();
    let at = flipped.len() - 80;
    flipped[at] ^= 1;
    assert_eq!(
        open_batch(&parse_batch(&flipped).expect("framing intact"), &key).map(|_| ()),
        Err(Error::BatchDecrypt)
    );
}

#[test]
fn a_truthful_header_over_other_entries_is_caught_by_the_index_check() {
    let lines = entries("sess", 4);
    let key = IndexKey::of(&secret(5));
    let mut header = BatchHeader {
        machine: "m1".into(),
        session: "sess".into(),
        key: KeyId::of(&secret(5)),
        first: 0,
        prev: key.digest(&Hash::session_fingerprint("sess")),
        index: index_lines(&lines, &key).expect("index"),
    };
    assert!(check_entries(&header, &lines, &key).is_ok());
    header.index[1].digest = Digest([0; 32]);
    assert!(matches!(
        check_entries(&header, &lines, &key),
        Err(Error::IndexMismatch(_))
    ));
    header.index = index_lines(&lines, &key).expect("index");
    header.prev = key.digest(&Hash::of(b"elsewhere"));
    assert!(matches!(
        check_entries(&header, &lines, &key),
        Err(Error::IndexMismatch(_))
    ));
    // Under another index key every digest differs.
    let other = IndexKey::of(&secret(6));
    assert!(matches!(
        check_entries(&header, &lines, &other),
        Err(Error::IndexMismatch(_))
    ));
}

#[test]
fn the_clear_index_holds_no_entry_hash() {
    // What the vault reads (header, checkpoint) never contains an entry's
    // hash or its timestamp: it could test a guessed entry against either.
    let (body, lines, _, _) = sealed_batch(3);
    let batch = parse_batch(&body).expect("parses");
    let clear = [
        batch.header_bytes.clone(),
        batch.checkpoint.render().into_bytes(),
    ]
    .concat();
    for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let stated = chain::read_stated(line).expect("entry");
        let hex = stated.hash.to_hex();
        assert!(
            !clear.windows(64).any(|w| w == hex.as_bytes()),
            "hash in clear"
        );
        assert!(!clear.windows(4).any(|w| w == b"1000"), "ts in clear");
    }
}

#[test]
fn receipts_check_both_signatures() {
    let (body, _, _, machine) = sealed_batch(3);
    let batch = parse_batch(&body).expect("parses");
    let vault_key = SigningKey::from_seed(&secret(9));
    let receipt = Receipt::sign(&vault_key, 77, &batch.checkpoint, &batch.signature);
    let back = Receipt::parse(&receipt.render()).expect("round trip");
    assert_eq!(back, receipt);
    assert_eq!(back.verify(&vault_key.public(), &machine.public()), Ok(()));
    let stranger = SigningKey::from_seed(&secret(10)).public();
    assert!(matches!(
        back.verify(&stranger, &machine.public()),
        Err(Error::BadReceiptSignature(_))
    ));
    assert_eq!(
        back.verify(&vault_key.public(), &stranger),
        Err(Error::BadCheckpointSignature)
    );
    // The vault re-dating a receipt breaks its own signature.
    let redated = receipt.render().replace("stored 77", "stored 78");
    assert!(matches!(
        Receipt::parse(&redated)
            .expect("parses")
            .verify(&vault_key.public(), &machine.public()),
        Err(Error::BadReceiptSignature(_))
    ));
    let notice = RestoreNotice::sign(&vault_key, 50, 100);
    let all = RestoreNotice::parse_all(&format!("{}{}", notice.render(), notice.render()))
        .expect("notices");
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].verify(&vault_key.public()), Ok(()));
    assert!(all[0].explains(&receipt));
    assert!(RestoreNotice::sign(&vault_key, 77, 100).explains(&receipt));
    assert!(!RestoreNotice::sign(&vault_key, 78, 100).explains(&receipt));
    assert!(!RestoreNotice::sign(&vault_key, 10, 76).explains(&receipt));
    // A notice a machine can believe: in the past, at most 30 days wide.
    let day = 86_400;
    let now = 100 * day;
    let credible =
        |backup, restored| RestoreNotice::sign(&vault_key, backup, restored).credible(now);
    assert_eq!(credible(now - day, now), Ok(()));
    assert_eq!(credible(now - 30 * day, now), Ok(()));
    assert_eq!(
        credible(now - day, now + 300),
        Ok(()),
        "within the clock skew"
    );
    assert!(credible(now - 31 * day, now).is_err(), "too wide");
    assert!(credible(0, now).is_err(), "everything since 1970");
    assert!(credible(now, now + 301).is_err(), "in the future");
    assert!(credible(now, u64::MAX).is_err(), "forever");
    assert!(
        credible(now, now - 1).is_err(),
        "restored before its backup"
    );
    // A batch the vault still holds, stored strictly between backup and
    // restore, gives the notice the lie.
    let n = RestoreNotice::sign(&vault_key, 50, 100);
    assert!(n.contradicted_by(51) && n.contradicted_by(99));
    assert!(!n.contradicted_by(50) && !n.contradicted_by(100) && !n.contradicted_by(10));
}

#[test]
fn headers_have_one_spelling() {
    let (body, _, _, _) = sealed_batch(2);
    let batch = parse_batch(&body).expect("parses");
    let text = String::from_utf8(batch.header_bytes).expect("utf8");
    for bad in [
        text.replace("first 0", "first 00"),
        text.replace("entries 2", "entries 3"),
        text.replace("\n1 ", "\n2 "),
        text.replace("session 73657373", "session 2e2e"),
        format!("{text}\n"),
    ] {
        assert!(BatchHeader::parse(bad.as_bytes()).is_err(), "{bad}");
    }
}

/// The envelope batches and transcript pieces travel in, byte for byte: a
/// batch and a piece sealed from fixed inputs hash to what this format has
/// always written (libzstd's frames; ruzstd writes others).
#[cfg(feature = "zstd-c")]
#[test]
fn sealed_batches_and_pieces_keep_their_bytes() {
    let (body, _, key, machine) = sealed_batch(5);
    let piece = PieceHeader {
        machine: "m1".into(),
        session: "sess".into(),
        key: KeyId::of(&key),
        anchor: 3,
        from: 0,
        to: 11,
        after: Some((1, 0)),
    };
    let sealed = seal_piece(&piece, b"hello world", &key, b"wrapped", [4; 24], &machine);
    assert_eq!(
        blake3::hash(&body).to_hex().as_str(),
        "45ab86933e0b6cb2c5a9f00206f2bb0b75790a2f4ba923e7c0ea6d892e4d8c42"
    );
    assert_eq!(
        blake3::hash(&sealed).to_hex().as_str(),
        "467c9ed976a834249490c51f343957621da18912b42d5362ac5f7e7298facf65"
    );
}

/// A receipt the vault key `[9; 32]` signed for a batch of `machine`'s in
/// `session`, entries `first..=last`, its checkpoint signed by `machine_key`.
fn tally_receipt(machine_key: &SigningKey, session: &str, first: u64, last: u64) -> Receipt {
    let checkpoint = Checkpoint {
        machine: "00112233445566778899aabbccddeeff".into(),
        session: session.into(),
        key: KeyId([1; 16]),
        first,
        last,
        head: Digest([2; 32]),
        batch: [3; 32],
    };
    let signature = machine_key.sign(checkpoint.render().as_bytes());
    let vault = SigningKey::from_seed(&Secret32::from_bytes([9u8; 32]));
    Receipt::sign(&vault, 1_799_999_000 + last, &checkpoint, &signature)
}

/// Pinned: tally v2 (ADR-0129), whose session lines carry the vault's
/// receipt, as a machine before ADR-0132 signs it (number 0): still read
/// and verified. The text changed from v1's deliberately; its BLAKE3 pins
/// the signatures too (Ed25519 signs deterministically).
#[test]
fn a_tally_renders_as_pinned_reads_back_and_verifies_only_by_its_machine() {
    let key = SigningKey::from_seed(&Secret32::from_bytes([7u8; 32]));
    let (s1, s2) = (
        tally_receipt(&key, "s1", 0, 4),
        tally_receipt(&key, "s2", 5, 9),
    );
    let tally = Tally::sign(
        &key,
        "00112233445566778899aabbccddeeff",
        1_800_000_000,
        0,
        vec![s2.clone(), s1.clone()],
    );
    let text = tally.render();
    let line = |r: &Receipt, session: &str, first: u64, last: u64| {
        format!(
            "{session} {last} {first} {} {} {} {} {} {} {}\n",
            hex(&[1; 16]),
            hex(&[2; 32]),
            hex(&[3; 32]),
            hex(&r.checkpoint_signature),
            r.vault.to_hex(),
            1_799_999_000 + last,
            hex(&r.signature)
        )
    };
    let signed = format!(
        "nd7-tally v2\nmachine 00112233445566778899aabbccddeeff\nat 1800000000\nsessions 2\n{}{}",
        line(&s1, "7331", 0, 4),
        line(&s2, "7332", 5, 9)
    );
    assert!(text.starts_with(&signed), "{text}");
    assert_eq!(
        blake3::hash(text.as_bytes()).to_hex().as_str(),
        "80445ae60a8b0eb9e76431ede46e60392077123650fe10f924120ad070849e37"
    );
    assert!(key.public().verify(signed.as_bytes(), &tally.signature));
    let twice = format!("{text}{text}");
    let read = Tally::parse_all(&twice).expect("reads");
    assert_eq!(read, vec![tally.clone(), tally.clone()]);
    assert_eq!(read[0].sessions, vec![s1.clone(), s2.clone()]);
    assert!(read[0].verify(&key.public()).is_ok());
    // Each receipt read back is the vault's, whole: it verifies as signed.
    let vault = SigningKey::from_seed(&Secret32::from_bytes([9u8; 32])).public();
    assert!(read[0].sessions[0].verify(&vault, &key.public()).is_ok());
    let other = SigningKey::from_seed(&Secret32::from_bytes([8u8; 32]));
    assert!(tally.verify(&other.public()).is_err());
    let edited = text.replace("7331 4 0", "7331 3 0");
    let (edited, _) = Tally::parse_one(&edited).expect("reads");
    assert!(edited.verify(&key.public()).is_err());
    assert!(edited.sessions[0].verify(&vault, &key.public()).is_err());
    let unsorted = format!(
        "nd7-tally v2\nmachine 00112233445566778899aabbccddeeff\nat 1800000000\nsessions 2\n{}{}",
        line(&s2, "7332", 5, 9),
        line(&s1, "7331", 0, 4)
    );
    assert!(Tally::parse_one(&format!("{unsorted}signature {}\n", hex(&[0u8; 64]))).is_err());
    let v1 = text.replacen("nd7-tally v2", "nd7-tally v1", 1);
    assert!(Tally::parse_one(&v1).is_err(), "v1 is not read");
}

/// Pinned: tally v3 (ADR-0132), numbered by its machine: the `number` line
/// after `at`, signed with the rest, so that two tallies of one second are
/// told apart and neither can be made the other. A v3 tally of number 0 is
/// not read (0 is a v2's), nor one whose number was edited.
#[test]
fn a_numbered_tally_renders_as_pinned_and_its_number_is_signed() {
    let key = SigningKey::from_seed(&Secret32::from_bytes([7u8; 32]));
    let s1 = tally_receipt(&key, "s1", 0, 4);
    let machine = "00112233445566778899aabbccddeeff";
    let tally = Tally::sign(&key, machine, 1_800_000_000, 12, vec![s1.clone()]);
    let text = tally.render();
    let signed =
        format!("nd7-tally v3\nmachine {machine}\nat 1800000000\nnumber 12\nsessions 1\n7331 4 0 ");
    assert!(text.starts_with(&signed), "{text}");
    assert_eq!(
        blake3::hash(text.as_bytes()).to_hex().as_str(),
        "dd3ef7ffbfbaa239978dc9140a3c47b1be60adafab11010d4f680262ae887395"
    );
    let v2 = Tally::sign(&key, machine, 1_800_000_000, 0, vec![s1]);
    let twice = format!("{text}{}", v2.render());
    let read = Tally::parse_all(&twice).expect("v3 then v2 read");
    assert_eq!(read, vec![tally.clone(), v2.clone()]);
    assert!(read.iter().all(|t| t.verify(&key.public()).is_ok()));
    assert!(tally.order() > v2.order());
    let edited = text.replacen("number 12\n", "number 13\n", 1);
    let (edited, _) = Tally::parse_one(&edited).expect("reads");
    assert!(edited.verify(&key.public()).is_err());
    let zero = text.replacen("number 12\n", "number 0\n", 1);
    assert!(Tally::parse_one(&zero).is_err(), "number 0 is a v2's");
    let unnumbered = text.replacen("number 12\n", "", 1);
    assert!(
        Tally::parse_one(&unnumbered).is_err(),
        "a v3 has its number"
    );
}
