//! cloud-iid against an in-memory transaction and a real RSA / ECDSA verifier, with documents
//! minted by test keys standing in for each provider: admission, every refusal, the
//! configuration, BER and the timestamp formats.

use std::sync::OnceLock;

use gatehouse_proto::cloud_iid::{CloudIidEvidence, Provider};
use gatehouse_sdk::{HardwareClaims, JoinRole, NoTpm, OpenedToken};
use gatehouse_sdk_test::{Clock, MemoryTx, Op, SoftCrypto};
use serde_json::{Value, json};

use super::*;
use crate::mint::{self, Providers, Sign};

const NOW: TimestampMs = 1_790_000_000_000;
const MINUTE: i64 = 60_000;

/// One set of provider keys for every test (RSA key generation is the slow part).
fn keys() -> &'static Providers {
    static KEYS: OnceLock<Providers> = OnceLock::new();
    KEYS.get_or_init(Providers::new)
}

/// A transaction at [`NOW`] with an empty single-use ledger.
fn new_tx() -> MemoryTx {
    MemoryTx::new(NOW)
}

/// The kit's software cryptography at [`NOW`].
fn crypto() -> SoftCrypto {
    SoftCrypto::new("cloud-iid", Clock::new(NOW))
}

/// Providers' configuration plus a resolver: account `acct-<provider>` joins tenant `t1`,
/// pool `p1`, site `s1` as node; `site-acct` may join as site only.
fn config_json(max_age_ms: u64) -> Value {
    let mut config = keys().config(max_age_ms);
    let mut resolve = Vec::new();
    for p in Provider::ALL {
        resolve.push(json!({
            "provider": p.as_str(), "account": format!("acct-{p}"), "tenantId": "t1",
            "poolId": "p1", "siteId": "s1",
        }));
    }
    resolve.push(json!({
        "provider": "gcp", "account": "site-acct", "tenantId": "t2", "roles": ["site"],
    }));
    config["resolve"] = Value::Array(resolve);
    config
}

fn attestor() -> CloudIid {
    CloudIid::configure(&config_json(DEFAULT_MAX_AGE_MS).to_string()).unwrap()
}

fn request(attestation: Vec<u8>) -> JoinRequest {
    JoinRequest {
        attestor: "cloud-iid".into(),
        role: JoinRole::Node,
        attestation,
        token: None,
        csr_der: b"csr".to_vec(),
        csr_sha256: vec![0x11; 32],
        csr_spki_sha256: vec![0x22; 32],
        claims: HardwareClaims {
            macs: vec![],
            product_uuid: None,
        },
        round: 1,
    }
}

fn run(attestor: &CloudIid, tx: &MemoryTx, req: &JoinRequest) -> Outcome {
    let cx = Context {
        tx,
        crypto: &SoftCrypto::new("cloud-iid", tx.clock()),
        tpm: &NoTpm,
    };
    // Held to `CloudIid::CALLS`, as the component is.
    gatehouse_sdk_test::declared::<CloudIid, _>(&cx, |cx| attestor.verify(cx, req))
}

fn verify_evidence(tx: &MemoryTx, evidence: &CloudIidEvidence) -> Outcome {
    run(&attestor(), tx, &request(mint::bytes(evidence)))
}

/// The reason of a refusal, or a panic naming what came instead.
#[track_caller]
fn reason_of(outcome: Outcome) -> String {
    match outcome {
        Outcome::Refused(r) => r.reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn evidence(p: Provider, account: &str, instance: &str, made: i64) -> CloudIidEvidence {
    keys().evidence(p, account, instance, made)
}

#[test]
fn each_provider_admits_once_then_refuses_instance_reused() {
    for p in Provider::ALL {
        let tx = new_tx();
        let account = format!("acct-{p}");
        let ev = evidence(p, &account, "inst-1", NOW - MINUTE);
        let outcome = verify_evidence(&tx, &ev);
        let subject = format!("cloud:{p}:{account}:inst-1");
        assert_eq!(
            outcome,
            Outcome::Admitted(AttestationResult {
                tenant_id: Some("t1".into()),
                pool_id: Some("p1".into()),
                site_id: Some("s1".into()),
                subject: Some(subject.clone()),
                ..AttestationResult::default()
            }),
            "{p}"
        );
        assert_eq!(
            tx.uses().into_iter().find(|(s, _)| *s == subject),
            Some((subject.clone(), TimestampMs::MAX)),
            "{p}: recorded forever"
        );
        // The same document again, and a fresh document of the same instance.
        assert_eq!(
            reason_of(verify_evidence(&tx, &ev)),
            "instance-reused",
            "{p}"
        );
        let fresh = evidence(p, &account, "inst-1", NOW);
        assert_eq!(
            reason_of(verify_evidence(&tx, &fresh)),
            "instance-reused",
            "{p}"
        );
        // Another instance of the account is another machine.
        let other = evidence(p, &account, "inst-2", NOW);
        assert!(
            matches!(verify_evidence(&tx, &other), Outcome::Admitted(_)),
            "{p}"
        );
    }
}

#[test]
fn too_old_and_future_documents_are_refused() {
    for p in Provider::ALL {
        let account = format!("acct-{p}");
        let tx = new_tx();
        let old = evidence(p, &account, "i", NOW - DEFAULT_MAX_AGE_MS as i64 - 1000);
        assert_eq!(reason_of(verify_evidence(&tx, &old)), "too-old", "{p}");
        let edge = evidence(p, &account, "i", NOW - DEFAULT_MAX_AGE_MS as i64);
        assert!(
            matches!(verify_evidence(&tx, &edge), Outcome::Admitted(_)),
            "{p}"
        );
        let future = evidence(p, &account, "j", NOW + 2 * MINUTE);
        assert_eq!(
            reason_of(verify_evidence(&tx, &future)),
            "not-yet-valid",
            "{p}"
        );
        assert!(!tx.used(&format!("cloud:{p}:{account}:j")));
    }
}

#[test]
fn max_age_is_configurable_per_provider() {
    let mut config = config_json(DEFAULT_MAX_AGE_MS);
    config["providers"]["aws"]["maxAgeMs"] = json!(30 * 24 * 3_600_000u64);
    let attestor = CloudIid::configure(&config.to_string()).unwrap();
    let tx = new_tx();
    let launched_last_week = NOW - 7 * 24 * 3_600_000;
    let aws = evidence(Provider::Aws, "acct-aws", "i", launched_last_week);
    assert!(matches!(
        run(&attestor, &tx, &request(mint::bytes(&aws))),
        Outcome::Admitted(_)
    ));
    // Still within its hour of validity, but older than GCP's (default) 10 minutes.
    let gcp = evidence(Provider::Gcp, "acct-gcp", "i", NOW - 30 * MINUTE);
    assert_eq!(
        reason_of(run(&attestor, &tx, &request(mint::bytes(&gcp)))),
        "too-old"
    );
}

#[test]
fn unknown_accounts_and_unconfigured_providers_are_refused() {
    for p in Provider::ALL {
        let tx = new_tx();
        let ev = evidence(p, "someone-else", "i", NOW);
        assert_eq!(
            reason_of(verify_evidence(&tx, &ev)),
            "unknown-instance",
            "{p}"
        );
        assert!(tx.uses().is_empty());
    }
    let attestor = CloudIid::configure(r#"{"resolve": []}"#).unwrap();
    for p in Provider::ALL {
        let ev = evidence(p, &format!("acct-{p}"), "i", NOW);
        assert_eq!(
            reason_of(run(&attestor, &new_tx(), &request(mint::bytes(&ev)))),
            "unknown-provider",
            "{p}"
        );
    }
}

#[test]
fn roles_come_from_the_resolver() {
    let tx = new_tx();
    let ev = evidence(Provider::Gcp, "acct-gcp", "i", NOW);
    let mut req = request(mint::bytes(&ev));
    req.role = JoinRole::Site;
    let outcome = run(&attestor(), &tx, &req);
    assert_eq!(outcome, Outcome::Refused(refuse("wrong-role").tenant("t1")));
    let ev = evidence(Provider::Gcp, "site-acct", "i", NOW);
    let mut req = request(mint::bytes(&ev));
    assert_eq!(reason_of(run(&attestor(), &tx, &req)), "wrong-role");
    req.role = JoinRole::Site;
    let Outcome::Admitted(result) = run(&attestor(), &tx, &req) else {
        panic!("a site account joins as site")
    };
    assert_eq!(result.tenant_id.as_deref(), Some("t2"));
    assert_eq!(result.pool_id, None);
}

/// The token attacks: `alg: none`, HS256 keyed with the public key, a kid not configured or
/// missing, an algorithm not the key's, a key not the kid's.
#[test]
fn token_attacks_are_refused() {
    let k = keys();
    let claims = mint::gcp_claims(mint::AUDIENCE, "acct-gcp", "i", NOW);
    let oidc_claims = Providers::oidc_claims("acct-oidc", "i", NOW);
    let public_spki = mint::rsa_spki(&k.gcp_key);
    let public_jwk = mint::rsa_jwk(&k.gcp_key, "gcp-1").to_string();
    let gcp = |document: String| CloudIidEvidence {
        provider: Provider::Gcp,
        document,
        signature: None,
    };
    let oidc = |document: String| CloudIidEvidence {
        provider: Provider::Oidc,
        document,
        signature: None,
    };
    let other = mint::rsa_key();
    let cases: Vec<(&str, CloudIidEvidence, &str)> = vec![
        (
            "alg none",
            gcp(mint::jwt(&claims, Some("gcp-1"), Sign::None)),
            "bad-algorithm",
        ),
        (
            "HS256 keyed with the SPKI",
            gcp(mint::jwt(&claims, Some("gcp-1"), Sign::Hs256(&public_spki))),
            "bad-algorithm",
        ),
        (
            "HS256 keyed with the JWK",
            gcp(mint::jwt(
                &claims,
                Some("gcp-1"),
                Sign::Hs256(public_jwk.as_bytes()),
            )),
            "bad-algorithm",
        ),
        (
            "oidc alg none",
            oidc(mint::jwt(&oidc_claims, Some("oidc-ec"), Sign::None)),
            "bad-algorithm",
        ),
        (
            "oidc HS256",
            oidc(mint::jwt(
                &oidc_claims,
                Some("oidc-rsa"),
                Sign::Hs256(&mint::rsa_spki(&k.oidc_rsa)),
            )),
            "bad-algorithm",
        ),
        (
            "ES256 is not Google's",
            gcp(mint::jwt(&claims, Some("gcp-1"), Sign::Es256(&k.oidc_ec))),
            "bad-algorithm",
        ),
        (
            "ES256 under an RSA key's kid",
            oidc(mint::jwt(
                &oidc_claims,
                Some("oidc-rsa"),
                Sign::Es256(&k.oidc_ec),
            )),
            "bad-algorithm",
        ),
        (
            "RS256 under an EC key's kid",
            oidc(mint::jwt(
                &oidc_claims,
                Some("oidc-ec"),
                Sign::Rs256(&k.oidc_rsa),
            )),
            "bad-algorithm",
        ),
        (
            "kid not configured",
            gcp(mint::jwt(&claims, Some("gcp-2"), Sign::Rs256(&k.gcp_key))),
            "unknown-key",
        ),
        (
            "no kid",
            gcp(mint::jwt(&claims, None, Sign::Rs256(&k.gcp_key))),
            "unknown-key",
        ),
        (
            "another key under the configured kid",
            gcp(mint::jwt(&claims, Some("gcp-1"), Sign::Rs256(&other))),
            "bad-signature",
        ),
        (
            "another provider's key",
            gcp(mint::jwt(
                &claims,
                Some("oidc-rsa"),
                Sign::Rs256(&k.oidc_rsa),
            )),
            "unknown-key",
        ),
    ];
    for (what, ev, expected) in cases {
        let tx = new_tx();
        assert_eq!(reason_of(verify_evidence(&tx, &ev)), expected, "{what}");
        assert!(tx.uses().is_empty(), "{what}");
    }
}

#[test]
fn token_claims_are_checked() {
    let k = keys();
    let base = mint::gcp_claims(mint::AUDIENCE, "acct-gcp", "i", NOW);
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut claims = base.clone();
        edit(&mut claims);
        CloudIidEvidence {
            provider: Provider::Gcp,
            document: mint::jwt(&claims, Some("gcp-1"), Sign::Rs256(&k.gcp_key)),
            signature: None,
        }
    };
    let cases: Vec<(&str, CloudIidEvidence, &str)> = vec![
        (
            "another audience",
            with(&|c| c["aud"] = json!("https://else")),
            "bad-audience",
        ),
        (
            "no audience",
            with(&|c| drop(c.as_object_mut().unwrap().remove("aud"))),
            "bad-audience",
        ),
        (
            "another issuer",
            with(&|c| c["iss"] = json!("https://evil")),
            "bad-issuer",
        ),
        (
            "expired",
            with(&|c| c["exp"] = json!(NOW / 1000 - 1)),
            "expired",
        ),
        (
            "no exp",
            with(&|c| drop(c.as_object_mut().unwrap().remove("exp"))),
            "missing-claim",
        ),
        (
            "no iat",
            with(&|c| drop(c.as_object_mut().unwrap().remove("iat"))),
            "missing-claim",
        ),
        (
            "iat a string",
            with(&|c| c["iat"] = json!("1")),
            "missing-claim",
        ),
        (
            "nbf later",
            with(&|c| c["nbf"] = json!(NOW / 1000 + 3600)),
            "not-yet-valid",
        ),
        (
            "not full format",
            with(&|c| drop(c.as_object_mut().unwrap().remove("google"))),
            "missing-claim",
        ),
        (
            "project with a colon",
            with(&|c| c["google"]["compute_engine"]["project_id"] = json!("a:b")),
            "missing-claim",
        ),
    ];
    for (what, ev, expected) in cases {
        assert_eq!(
            reason_of(verify_evidence(&new_tx(), &ev)),
            expected,
            "{what}"
        );
    }
    // A numeric instance id reads as its decimal.
    let ev = with(&|c| c["google"]["compute_engine"]["instance_id"] = json!(4_242_424_242u64));
    let Outcome::Admitted(result) = verify_evidence(&new_tx(), &ev) else {
        panic!("numeric instance id")
    };
    assert_eq!(
        result.subject.as_deref(),
        Some("cloud:gcp:acct-gcp:4242424242")
    );
}

#[test]
fn aws_signature_attacks_are_refused() {
    let k = keys();
    let good = k.aws("acct-aws", "i-1", NOW);
    // The document beside the signature is not the one it signs.
    let mut swapped = good.clone();
    swapped.document = mint::aws_document("acct-aws", "i-2", NOW);
    assert_eq!(
        reason_of(verify_evidence(&new_tx(), &swapped)),
        "malformed-evidence"
    );
    // Signed by a key whose certificate is not configured.
    let rogue_key = mint::rsa_key();
    let rogue_cert = mint::certificate(&rogue_key, "Rogue", None);
    let document = mint::aws_document("acct-aws", "i-1", NOW);
    let rogue = CloudIidEvidence {
        signature: Some(mint::base64_lines(&mint::pkcs7(
            document.as_bytes(),
            &rogue_key,
            &rogue_cert,
            &[],
        ))),
        document: document.clone(),
        provider: Provider::Aws,
    };
    assert_eq!(
        reason_of(verify_evidence(&new_tx(), &rogue)),
        "untrusted-signer"
    );
    // Signed by another key claiming AWS's certificate.
    let forged = CloudIidEvidence {
        signature: Some(mint::base64_lines(&mint::pkcs7(
            document.as_bytes(),
            &rogue_key,
            &k.aws_cert,
            &[],
        ))),
        document,
        provider: Provider::Aws,
    };
    assert_eq!(
        reason_of(verify_evidence(&new_tx(), &forged)),
        "bad-signature"
    );
    // Missing or garbled signature text.
    let mut none = good.clone();
    none.signature = None;
    assert_eq!(
        reason_of(verify_evidence(&new_tx(), &none)),
        "malformed-evidence"
    );
    let mut garbled = good.clone();
    garbled.signature = Some("not base64!".into());
    assert_eq!(
        reason_of(verify_evidence(&new_tx(), &garbled)),
        "malformed-evidence"
    );
    // PEM armour is accepted.
    let mut armoured = good.clone();
    armoured.signature = Some(format!(
        "-----BEGIN PKCS7-----\n{}\n-----END PKCS7-----\n",
        good.signature.clone().unwrap()
    ));
    assert!(matches!(
        verify_evidence(&new_tx(), &armoured),
        Outcome::Admitted(_)
    ));
    // A signature on a provider that takes none.
    let mut gcp = k.gcp("acct-gcp", "i", NOW);
    gcp.signature = good.signature;
    assert_eq!(
        reason_of(verify_evidence(&new_tx(), &gcp)),
        "malformed-evidence"
    );
}

#[test]
fn azure_signer_must_chain_to_a_configured_certificate() {
    use base64::Engine as _;
    let k = keys();
    // A signer issued by another CA.
    let rogue_ca_key = mint::rsa_key();
    let rogue_ca = mint::certificate(&rogue_ca_key, "Rogue CA", None);
    let rogue_leaf = mint::certificate(
        &k.azure_key,
        "metadata.azure.test",
        Some((&rogue_ca_key, &rogue_ca)),
    );
    let document = mint::azure_document("acct-azure", "vm-1", NOW);
    let signed = mint::pkcs7(
        document.as_bytes(),
        &k.azure_key,
        &rogue_leaf,
        &[&rogue_leaf, &rogue_ca],
    );
    let ev = CloudIidEvidence {
        provider: Provider::Azure,
        document: base64::engine::general_purpose::STANDARD.encode(signed),
        signature: None,
    };
    assert_eq!(
        reason_of(verify_evidence(&new_tx(), &ev)),
        "untrusted-signer"
    );
    // No signer certificate at all.
    let bare = mint::pkcs7(document.as_bytes(), &k.azure_key, &k.azure_leaf, &[]);
    let ev = CloudIidEvidence {
        provider: Provider::Azure,
        document: base64::engine::general_purpose::STANDARD.encode(bare),
        signature: None,
    };
    assert_eq!(
        reason_of(verify_evidence(&new_tx(), &ev)),
        "untrusted-signer"
    );
    // The signer certificate pinned directly works without a chain.
    let mut config = config_json(DEFAULT_MAX_AGE_MS);
    config["providers"]["azure"]["certificates"] = json!(mint::pem(&[&k.azure_leaf]));
    let pinned = CloudIid::configure(&config.to_string()).unwrap();
    let ev = k.azure("acct-azure", "vm-1", NOW);
    assert!(matches!(
        run(&pinned, &new_tx(), &request(mint::bytes(&ev))),
        Outcome::Admitted(_)
    ));
    // Past expiresOn (6 hours after createdOn), even with a generous maxAgeMs.
    config["providers"]["azure"]["maxAgeMs"] = json!(24 * 3_600_000u64);
    let lenient = CloudIid::configure(&config.to_string()).unwrap();
    let stale = k.azure("acct-azure", "vm-1", NOW - 7 * 3_600_000);
    assert_eq!(
        reason_of(run(&lenient, &new_tx(), &request(mint::bytes(&stale)))),
        "expired"
    );
}

#[test]
fn malformed_requests_are_refused() {
    let tx = new_tx();
    for bytes in [
        &b""[..],
        b"{}",
        br#"{"provider":"ibm","document":"x"}"#,
        br#"{"provider":"gcp","document":"a.b"}"#,
        br#"{"provider":"gcp","document":"a.b.c.d"}"#,
        br#"{"provider":"gcp","document":"!!.!!.!!"}"#,
        br#"{"provider":"azure","document":"AAAA"}"#,
        br#"{"provider":"aws","document":"{}","signature":"MAA="}"#,
    ] {
        assert_eq!(
            reason_of(run(&attestor(), &tx, &request(bytes.to_vec()))),
            "malformed-evidence",
            "{}",
            String::from_utf8_lossy(bytes)
        );
    }
    // A token beside the document.
    let ev = evidence(Provider::Gcp, "acct-gcp", "i", NOW);
    let mut req = request(mint::bytes(&ev));
    req.token = Some(OpenedToken {
        id: "tok_1".into(),
        secret: vec![1],
    });
    assert_eq!(reason_of(run(&attestor(), &tx, &req)), "malformed-evidence");
    assert!(tx.uses().is_empty());
}

#[test]
fn a_ledger_failure_refuses() {
    let tx = new_tx();
    tx.fail(Op::RecordUse);
    let ev = evidence(Provider::Oidc, "acct-oidc", "i", NOW);
    assert_eq!(
        verify_evidence(&tx, &ev),
        Outcome::Refused(refuse("storage-error").tenant("t1"))
    );
}

#[test]
fn oidc_identity_claims_are_configurable() {
    let k = keys();
    let mut config = config_json(DEFAULT_MAX_AGE_MS);
    config["providers"]["oidc"]["accountClaim"] = json!("org.id");
    config["providers"]["oidc"]["instanceClaim"] = json!("machine");
    let attestor = CloudIid::configure(&config.to_string()).unwrap();
    let claims = json!({
        "iss": mint::OIDC_ISSUER, "aud": mint::AUDIENCE, "sub": "ignored",
        "org": { "id": "acct-oidc" }, "machine": "m-7", "iat": NOW / 1000, "exp": NOW / 1000 + 60,
    });
    let ev = CloudIidEvidence {
        provider: Provider::Oidc,
        document: mint::jwt(&claims, Some("oidc-rsa"), Sign::Rs256(&k.oidc_rsa)),
        signature: None,
    };
    let Outcome::Admitted(result) = run(&attestor, &new_tx(), &request(mint::bytes(&ev))) else {
        panic!("configured claims")
    };
    assert_eq!(result.subject.as_deref(), Some("cloud:oidc:acct-oidc:m-7"));
}

#[test]
fn configuration_is_validated() {
    assert!(CloudIid::configure("{}").is_ok());
    let k = keys();
    let good = config_json(DEFAULT_MAX_AGE_MS);
    let broken = |edit: &dyn Fn(&mut Value)| {
        let mut c = good.clone();
        edit(&mut c);
        CloudIid::configure(&c.to_string()).unwrap_err()
    };
    let cases: Vec<(String, &str)> = vec![
        (broken(&|c| c["maxAgeMs"] = json!(10)), "maxAgeMs 10"),
        (
            broken(&|c| c["providers"]["aws"]["maxAgeMs"] = json!(0)),
            "providers.aws.maxAgeMs",
        ),
        (
            broken(&|c| c["providers"]["aws"]["certificates"] = json!("nope")),
            "providers.aws.certificates",
        ),
        (
            broken(&|c| c["providers"]["gcp"]["jwks"] = json!("{")),
            "providers.gcp.jwks: not JSON",
        ),
        (
            broken(&|c| c["providers"]["gcp"]["jwks"] = json!({"keys": []})),
            "no RSA or P-256",
        ),
        (
            broken(&|c| {
                c["providers"]["gcp"]["jwks"] = mint::jwks(&[
                    mint::rsa_jwk(&k.gcp_key, "a"),
                    mint::rsa_jwk(&k.gcp_key, "a"),
                ])
            }),
            "twice",
        ),
        (
            broken(&|c| {
                let mut jwk = mint::ec_jwk(&k.oidc_ec, "e");
                jwk["alg"] = json!("RS256");
                c["providers"]["oidc"]["jwks"] = mint::jwks(&[jwk]);
            }),
            "does not fit",
        ),
        (
            broken(&|c| c["providers"]["gcp"]["accountClaim"] = json!("x")),
            "takes no accountClaim",
        ),
        (
            broken(&|c| {
                drop(
                    c["providers"]["oidc"]
                        .as_object_mut()
                        .unwrap()
                        .remove("issuer"),
                )
            }),
            "issuer is required",
        ),
        (
            broken(&|c| {
                drop(
                    c["providers"]["oidc"]
                        .as_object_mut()
                        .unwrap()
                        .remove("accountClaim"),
                )
            }),
            "accountClaim is required",
        ),
        (
            broken(&|c| c["providers"]["ibm"] = json!({})),
            "unknown field `ibm`",
        ),
        (
            broken(&|c| c["resolve"][0]["account"] = json!("a:b")),
            "without ':'",
        ),
        (
            broken(&|c| c["resolve"][0]["roles"] = json!(["admin"])),
            "role \"admin\"",
        ),
        (
            broken(&|c| c["resolve"][0]["roles"] = json!([])),
            "empty roles",
        ),
        (
            broken(&|c| {
                let first = c["resolve"][0].clone();
                c["resolve"].as_array_mut().unwrap().push(first);
            }),
            "twice",
        ),
    ];
    for (error, expected) in cases {
        assert!(error.contains(expected), "{error:?} lacks {expected:?}");
        assert!(error.starts_with("invalid configuration"), "{error}");
    }
    // A small RSA key in a JWKS.
    let small = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, 1024).unwrap();
    let error =
        broken(&|c| c["providers"]["gcp"]["jwks"] = mint::jwks(&[mint::rsa_jwk(&small, "s")]));
    assert!(error.contains("shorter than 2048"), "{error}");
}

#[test]
fn jwk_spki_matches_the_keys_own_encoding() {
    use p256::pkcs8::EncodePublicKey as _;
    let k = keys();
    let set = jwt::KeySet::parse(&mint::jwks(&[
        mint::rsa_jwk(&k.gcp_key, "r"),
        mint::ec_jwk(&k.oidc_ec, "e"),
        json!({"kty": "oct", "kid": "h", "k": "c2VjcmV0"}),
        json!({"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"}),
    ]))
    .unwrap();
    assert_eq!(set.get("r").unwrap().spki, mint::rsa_spki(&k.gcp_key));
    assert_eq!(set.get("r").unwrap().alg, jwt::Alg::Rs256);
    let ec_spki = k.oidc_ec.verifying_key().to_public_key_der().unwrap();
    assert_eq!(set.get("e").unwrap().spki, ec_spki.as_bytes());
    assert!(set.get("h").is_none(), "symmetric keys are never used");
    assert!(set.get("enc").is_none(), "encryption keys are skipped");
}

#[test]
fn ber_signed_data_verifies_like_der() {
    let k = keys();
    let document = mint::aws_document("acct-aws", "i-ber", NOW);
    let der = mint::pkcs7(document.as_bytes(), &k.aws_key, &k.aws_cert, &[]);
    assert_eq!(pkcs7::ber_to_der(&der).as_deref(), Some(der.as_slice()));
    let ber = to_indefinite(&der);
    assert_ne!(ber, der);
    assert_eq!(pkcs7::ber_to_der(&ber).as_deref(), Some(der.as_slice()));
    let trusted = pkcs7::Trusted::from_pem(&mint::pem(&[&k.aws_cert])).unwrap();
    let content = pkcs7::verify(&ber, None, &trusted, NOW, &crypto())
        .unwrap()
        .content;
    assert_eq!(content, document.as_bytes());
}

/// Re-encodes every constructed value of DER with indefinite lengths, and splits primitive
/// OCTET STRINGs longer than 16 bytes into a constructed string of pieces: what BER PKCS#7
/// producers emit.
fn to_indefinite(der: &[u8]) -> Vec<u8> {
    fn walk(mut input: &[u8], out: &mut Vec<u8>) {
        while !input.is_empty() {
            let tag = input[0];
            let (len, header) = match input[1] {
                n if n < 0x80 => (usize::from(n), 2),
                n => {
                    let count = usize::from(n & 0x7f);
                    let len = input[2..2 + count]
                        .iter()
                        .fold(0usize, |a, b| (a << 8) | usize::from(*b));
                    (len, 2 + count)
                }
            };
            let value = &input[header..header + len];
            if tag & 0x20 != 0 {
                out.extend_from_slice(&[tag, 0x80]);
                walk(value, out);
                out.extend_from_slice(&[0, 0]);
            } else if tag == 0x04 && value.len() > 16 {
                out.extend_from_slice(&[0x24, 0x80]);
                for piece in value.chunks(16) {
                    out.extend_from_slice(&[0x04, piece.len() as u8]);
                    out.extend_from_slice(piece);
                }
                out.extend_from_slice(&[0, 0]);
            } else {
                out.extend_from_slice(&input[..header + len]);
            }
            input = &input[header + len..];
        }
    }
    let mut out = Vec::new();
    walk(der, &mut out);
    out
}

#[test]
fn ber_to_der_is_total() {
    for input in [
        &[][..],
        &[0x30],
        &[0x30, 0x80],
        &[0x30, 0x80, 0x00],
        &[0x30, 0x05, 0x04, 0x01],
        &[0x04, 0x80, 0x00, 0x00],
        &[0x30, 0x84, 0xff, 0xff, 0xff, 0xff],
        &[0x30, 0x85, 1, 1, 1, 1, 1],
        &[0x1f, 0xff, 0xff, 0xff, 0xff, 0xff],
        &[0x24, 0x80, 0x02, 0x01, 0x00, 0x00, 0x00],
        &[0x30, 0x00, 0x00],
    ] {
        assert_eq!(pkcs7::ber_to_der(input), None, "{input:02x?}");
    }
    // Deep nesting is refused, not followed.
    let mut deep = Vec::new();
    for _ in 0..10_000 {
        deep.extend_from_slice(&[0x30, 0x80]);
    }
    for _ in 0..10_000 {
        deep.extend_from_slice(&[0, 0]);
    }
    assert_eq!(pkcs7::ber_to_der(&deep), None);
    // Non-minimal lengths become minimal.
    assert_eq!(
        pkcs7::ber_to_der(&[0x04, 0x82, 0x00, 0x01, 0xaa]),
        Some(vec![0x04, 0x01, 0xaa])
    );
}

#[test]
fn timestamps_parse() {
    assert_eq!(
        parse_rfc3339("2016-11-19T16:32:11Z"),
        Some(1_479_573_131_000)
    );
    assert_eq!(
        parse_rfc3339("2016-11-19T16:32:11.250Z"),
        Some(1_479_573_131_000)
    );
    assert_eq!(
        parse_rfc3339("2024-02-29T23:59:59Z"),
        Some(1_709_251_199_000)
    );
    for bad in [
        "",
        "2016-11-19",
        "2016-11-19T16:32:11",
        "2016-11-19T16:32:11+01:00",
        "2023-02-29T00:00:00Z",
        "2016-13-01T00:00:00Z",
        "2016-11-19T24:00:00Z",
        "2016-11-19T16:32:11.Z",
        "+016-11-19T16:32:11Z",
        "2016-11-19T16:32:1\u{e9}Z",
    ] {
        assert_eq!(parse_rfc3339(bad), None, "{bad}");
    }
    assert_eq!(
        parse_azure_time("11/28/18 00:16:17 -0000"),
        Some(1_543_364_177_000)
    );
    for bad in [
        "",
        "11/28/18 00:16:17",
        "11/28/2018 00:16:17 -0000",
        "13/28/18 00:16:17 -0000",
        "11/28/18 00:16:17 +0100",
    ] {
        assert_eq!(parse_azure_time(bad), None, "{bad}");
    }
    // The mint's formatting round-trips.
    for ms in [NOW, 1_709_251_199_000, 951_782_400_000, 946_684_800_000] {
        assert_eq!(parse_rfc3339(&mint::rfc3339(ms)), Some(ms));
        assert_eq!(parse_azure_time(&mint::azure_time(ms)), Some(ms));
    }
    assert_eq!(parse_rfc3339(&mint::rfc3339(0)), Some(0));
}

#[test]
fn info_names_the_attestor() {
    let info = CloudIid::info();
    assert_eq!(info.id, "cloud-iid");
    assert_eq!(info.rounds, 1);
    for code in [
        codes::UNKNOWN_PROVIDER,
        codes::BAD_ALGORITHM,
        codes::UNKNOWN_KEY,
        codes::UNTRUSTED_SIGNER,
        codes::BAD_SIGNATURE,
        codes::BAD_ISSUER,
        codes::BAD_AUDIENCE,
        codes::TOO_OLD,
        codes::NOT_YET_VALID,
        codes::MISSING_CLAIM,
        codes::LEGACY_ALGORITHM,
        codes::NONCE_MISMATCH,
        codes::SIGNATURE_NOT_ENABLED,
    ] {
        assert!(reason::is_valid(code), "{code}");
    }
}

/// cloud-iid with Azure's nonce bound to the node key (`nonce = "csr"`).
fn bound_azure() -> CloudIid {
    let mut config = config_json(DEFAULT_MAX_AGE_MS);
    config["providers"]["azure"]["nonce"] = json!("csr");
    CloudIid::configure(&config.to_string()).unwrap()
}

#[test]
fn azure_nonce_bound_to_the_node_key() {
    let attestor = bound_azure();
    // `request` carries csr_spki_sha256 = [0x22; 32].
    let nonce = gatehouse_proto::cloud_iid::azure_nonce(&[0x22; 32]);
    let good = keys().azure_with_nonce("acct-azure", "vm-n1", NOW - MINUTE, &nonce);
    assert!(matches!(
        run(&attestor, &new_tx(), &request(mint::bytes(&good))),
        Outcome::Admitted(_)
    ));
    let other_key = gatehouse_proto::cloud_iid::azure_nonce(&[0x23; 32]);
    for nonce in [other_key.as_str(), "20181128-001617", ""] {
        let bad = keys().azure_with_nonce("acct-azure", "vm-n2", NOW - MINUTE, nonce);
        assert_eq!(
            reason_of(run(&attestor, &new_tx(), &request(mint::bytes(&bad)))),
            codes::NONCE_MISMATCH,
            "{nonce:?}"
        );
    }
    // Without the setting, any nonce.
    let any = keys().azure_with_nonce("acct-azure", "vm-n3", NOW - MINUTE, "x");
    assert!(matches!(
        verify_evidence(&new_tx(), &any),
        Outcome::Admitted(_)
    ));
}

#[test]
fn azure_signer_must_be_imds() {
    let mut config = config_json(DEFAULT_MAX_AGE_MS);
    config["providers"]["azure"]["signerNames"] = json!([".metadata.azure.com"]);
    let attestor = CloudIid::configure(&config.to_string()).unwrap();
    let evidence = keys().azure("acct-azure", "vm-s1", NOW - MINUTE);
    assert_eq!(
        reason_of(run(&attestor, &new_tx(), &request(mint::bytes(&evidence)))),
        codes::UNTRUSTED_SIGNER
    );
}

#[test]
fn provider_settings_belong_to_their_provider() {
    let k = keys();
    for (provider, key, value) in [
        ("aws", "nonce", json!("csr")),
        ("aws", "signerNames", json!(["metadata.azure.com"])),
        (
            "azure",
            "signatureCertificates",
            json!(mint::pem(&[&k.aws_cert])),
        ),
        ("azure", "nonce", json!("maybe")),
        ("azure", "signerNames", json!([])),
        ("aws", "signatureCertificates", json!("not pem")),
    ] {
        let mut config = config_json(DEFAULT_MAX_AGE_MS);
        config["providers"][provider][key] = value;
        assert!(
            CloudIid::configure(&config.to_string()).is_err(),
            "{provider}.{key}"
        );
    }
    // An RSA-2048 certificate is accepted for /signature too (1024 to 4096 bits).
    let mut config = config_json(DEFAULT_MAX_AGE_MS);
    config["providers"]["aws"]["signatureCertificates"] = json!(mint::pem(&[&k.aws_cert]));
    assert!(CloudIid::configure(&config.to_string()).is_ok());
}

/// The prepared form (`Attestor::prepare`, kept by the host after `configure`) is the validated
/// configuration itself: a join that starts from it decides as one that parses the text, every
/// provider included, and bytes that are not a whole prepared form are not read as one (the
/// SDK then configures from the text).
#[test]
fn the_prepared_form_reads_back_as_the_configuration() {
    let mut config = config_json(DEFAULT_MAX_AGE_MS);
    config["providers"]["azure"]["nonce"] = json!("csr");
    let configured = CloudIid::configure(&config.to_string()).unwrap();
    assert!(configured.config.aws.is_some() && configured.config.gcp.is_some());
    let prepared = configured.prepare();
    let again = CloudIid::from_prepared(&prepared).expect("the prepared form reads back");
    assert_eq!(again.config, configured.config);
    for p in Provider::ALL {
        let ev = evidence(p, &format!("acct-{p}"), "inst-1", NOW - MINUTE);
        let req = request(mint::bytes(&ev));
        if p == Provider::Azure {
            // Bound to the node key: refused alike from either form.
            assert_eq!(
                run(&again, &new_tx(), &req),
                run(&configured, &new_tx(), &req)
            );
            continue;
        }
        assert!(
            matches!(run(&again, &new_tx(), &req), Outcome::Admitted(_)),
            "{p}"
        );
    }
    // The site role of the resolver survives the round trip.
    assert_eq!(again.config.resolve, configured.config.resolve);
    for bad in [
        &[][..],
        &prepared[..prepared.len() / 2],
        &prepared[..prepared.len() - 1],
        &[0xff; 64][..],
    ] {
        assert!(CloudIid::from_prepared(bad).is_none());
    }
}
