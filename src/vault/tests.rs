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
    let admins = [AgeIdentity::from_secret(&secret(3)).recipient()];
    let doc = Recipients::sign(&org, &admins);
    let fp = org.public().fingerprint();
    let parsed = Recipients::verify(&doc, &fp).expect("verifies");
    assert_eq!(parsed.recipients, admins);
    // Signed by another key: refused with both fingerprints named.
    let forged = Recipients::sign(&other, &admins);
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
    // A recipient added after signing: refused.
    let extra = AgeIdentity::from_secret(&secret(4)).recipient();
    let added = doc.replacen("signature", &format!("recipient {extra}\nsignature"), 1);
    assert_eq!(
        Recipients::verify(&added, &fp),
        Err(Error::BadDocumentSignature)
    );
}

#[test]
fn request_signatures_cover_method_path_time_nonce_and_body() {
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
    for (method, path, body) in [
        ("GET", "/v1/batches", &b"body"[..]),
        ("POST", "/v1/other", b"body"),
        ("POST", "/v1/batches", b"bodY"),
    ] {
        assert_eq!(
            auth.verify(&pk, method, path, body, 1000),
            Err(Error::BadSignature)
        );
    }
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
        String::from_utf8(request_message("POST", "/v1/batches", 5, &[0xab; 16], b""))
            .expect("utf8"),
        format!(
            "nd7-request v1\nPOST\n/v1/batches\n5\n{}\n{}\n",
            "ab".repeat(16),
            blake3::hash(b"").to_hex()
        )
    );
    let header = BatchHeader {
        machine: "m1".into(),
        session: "s/x".replace('/', "-"),
        first: 3,
        prev: Hash::of(b"p"),
        index: vec![IndexEntry {
            seq: 3,
            hash: Hash::of(b"h"),
            ts: 9,
        }],
    };
    assert_eq!(
        String::from_utf8(header.render()).expect("utf8"),
        format!(
            "nd7-batch v1\nmachine m1\nsession 732d78\nfirst 3\nprev {}\nentries 1\n3 {} 9\n",
            Hash::of(b"p"),
            Hash::of(b"h")
        )
    );
    assert_eq!(BatchHeader::parse(&header.render()), Ok(header));
    let pk = SigningKey::from_seed(&secret(1)).public();
    assert_eq!(
        enroll_body("tok1", &pk),
        format!("nd7-enroll v1\ntoken tok1\nkey {}\n", pk.to_hex())
    );
    assert_eq!(
        parse_enroll_body(enroll_body("tok1", &pk).as_bytes()),
        Ok(("tok1".into(), pk))
    );
}

fn sealed_batch(n: u64) -> (Vec<u8>, Vec<u8>, ChainKey) {
    let lines = entries("sess", n);
    let header = BatchHeader {
        machine: "m1".into(),
        session: "sess".into(),
        first: 0,
        prev: Hash::session_fingerprint("sess"),
        index: index_lines(&lines).expect("index"),
    };
    let key = secret(5);
    let body = seal_batch(&header, &lines, &key, b"wrapped", [3; 24]);
    (body, lines, key)
}

#[test]
fn a_batch_opens_to_exactly_its_entries() {
    let (body, lines, key) = sealed_batch(50);
    let batch = parse_batch(&body).expect("parses");
    assert_eq!(batch.header.last().seq, 49);
    assert_eq!(batch.header.index[7].ts, 1007);
    assert_eq!(batch.wrapped_key, b"wrapped");
    assert_eq!(open_batch(&batch, &key).expect("opens"), lines);
    assert_eq!(
        open_batch(&batch, &secret(6)).map(|_| ()),
        Err(Error::BatchDecrypt)
    );
}

#[test]
fn altering_a_batch_or_its_header_stops_it_opening() {
    let (body, _, key) = sealed_batch(5);
    // A flipped ciphertext byte.
    let mut flipped = body.clone();
    let last = flipped.len() - 20;
    flipped[last] ^= 1;
    let batch = parse_batch(&flipped).expect("framing intact");
    assert_eq!(
        open_batch(&batch, &key).map(|_| ()),
        Err(Error::BatchDecrypt)
    );
    // A header re-rendered with a different ts, ciphertext untouched.
    let mut batch = parse_batch(&body).expect("parses");
    batch.header.index[2].ts += 1;
    batch.header_bytes = batch.header.render();
    assert_eq!(
        open_batch(&batch, &key).map(|_| ()),
        Err(Error::BatchDecrypt)
    );
}

#[test]
fn a_truthful_header_over_other_entries_is_caught_by_the_index_check() {
    let lines = entries("sess", 4);
    let mut header = BatchHeader {
        machine: "m1".into(),
        session: "sess".into(),
        first: 0,
        prev: Hash::session_fingerprint("sess"),
        index: index_lines(&lines).expect("index"),
    };
    assert_eq!(check_entries(&header, &lines), Ok(()));
    header.index[1].hash = Hash::of(b"x");
    assert!(matches!(
        check_entries(&header, &lines),
        Err(Error::IndexMismatch(_))
    ));
    header.index = index_lines(&lines).expect("index");
    header.prev = Hash::of(b"elsewhere");
    assert!(matches!(
        check_entries(&header, &lines),
        Err(Error::IndexMismatch(_))
    ));
}

#[test]
fn headers_have_one_spelling() {
    let (body, _, _) = sealed_batch(2);
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
