//! Real, public evidence (`tests/vectors`, each file's origin and OpenSSL check in its
//! `PROVENANCE.md`) through the code production runs: the cloud-iid attestor (the crate the
//! built-in component is built from) with the host's own verification functions
//! (`gatehouse::pki::native`, what the component's `crypto` import calls) and the SDK test
//! kit's transaction with its clock set to the document's time, with `maxAgeMs` wide enough that age is not what
//! is tested. Every vector is admitted, and refused with one byte changed.
//!
//! The host's database clock cannot be set, which is why these run the attestor natively
//! rather than through a running host: the real signer certificates expired years ago.

use std::sync::OnceLock;

use gatehouse::pki::Pki;
use gatehouse::pki::native::NativeCrypto;
use gatehouse_attestor_cloud_iid::CloudIid;
use gatehouse_proto::cloud_iid::{CloudIidEvidence, Provider};
use gatehouse_sdk::{Attestor, Context, HardwareClaims, JoinRequest, JoinRole, NoTpm, Outcome};
use gatehouse_sdk_test::MemoryTx;
use serde_json::{Value, json};

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/vectors");
const DAY: i64 = 86_400_000;

fn vector(path: &str) -> String {
    std::fs::read_to_string(format!("{VECTORS}/{path}")).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The host's PKI, for the host's own verification functions (cloud-iid seals nothing).
fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(|| Pki::generate("vectors.invalid").unwrap())
}

/// cloud-iid configured with `providers`, admitting `account` of `provider` into `t1`.
fn attestor(providers: Value, provider: Provider, account: &str) -> CloudIid {
    let config = json!({
        "maxAgeMs": 3650u64 * DAY as u64,
        "providers": providers,
        "resolve": [{ "provider": provider.as_str(), "account": account, "tenantId": "t1" }],
    });
    CloudIid::configure(&config.to_string()).unwrap_or_else(|e| panic!("configure: {e}"))
}

/// The outcome of one join with `evidence` at `now`; `node_key_sha256` is the CSR key's hash.
fn join(attestor: &CloudIid, evidence: &CloudIidEvidence, now: i64, node_key: [u8; 32]) -> Outcome {
    let tx = MemoryTx::new(now);
    let request = JoinRequest {
        attestor: "cloud-iid".into(),
        role: JoinRole::Node,
        attestation: serde_json::to_vec(evidence).unwrap(),
        token: None,
        csr_der: b"csr".to_vec(),
        csr_sha256: vec![0x11; 32],
        csr_spki_sha256: node_key.to_vec(),
        claims: HardwareClaims {
            macs: vec![],
            product_uuid: None,
        },
        round: 1,
    };
    attestor.verify(
        &Context {
            tx: &tx,
            crypto: &NativeCrypto {
                pki: pki(),
                attestor: "cloud-iid",
            },
            tpm: &NoTpm,
        },
        &request,
    )
}

#[track_caller]
fn admitted(outcome: Outcome, subject: &str) {
    match outcome {
        Outcome::Admitted(result) => {
            assert_eq!(result.subject.as_deref(), Some(subject));
            assert_eq!(result.tenant_id.as_deref(), Some("t1"));
        }
        other => panic!("{subject}: expected admission, got {other:?}"),
    }
}

#[track_caller]
fn refused(outcome: Outcome, reason: &str) {
    match outcome {
        Outcome::Refused(r) => assert_eq!(r.reason, reason),
        other => panic!("expected refusal {reason}, got {other:?}"),
    }
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .unwrap()
}

/// `text` (base64) with byte `at` of what it encodes flipped (negative: from the end).
fn flip(text: &str, at: isize) -> String {
    let mut bytes = unb64(text);
    let i = if at < 0 {
        bytes.len() - at.unsigned_abs()
    } else {
        at as usize
    };
    bytes[i] ^= 0x01;
    b64(&bytes)
}

fn aws_evidence(document: &str, signature: &str) -> CloudIidEvidence {
    CloudIidEvidence {
        provider: Provider::Aws,
        document: document.to_owned(),
        signature: Some(signature.to_owned()),
    }
}

/// 2026-02-16T01:00:00Z, an hour after the 2026 instance launched.
const AWS_2026: i64 = 1_771_203_600_000;
/// 2025-02-06T00:00:00Z.
const AWS_2025: i64 = 1_738_800_000_000;
/// 2018-12-03T04:00:00Z.
const AWS_2018: i64 = 1_543_809_600_000;

#[test]
fn aws_rsa2048_is_admitted_and_a_changed_byte_refused() {
    let aws = attestor(
        json!({ "aws": { "certificates": vector("aws/rsa2048-ap-southeast-2.pem") } }),
        Provider::Aws,
        "189292791360",
    );
    let document = vector("aws/ap-southeast-2-2026.document.json");
    let rsa2048 = vector("aws/ap-southeast-2-2026.rsa2048.b64");
    admitted(
        join(&aws, &aws_evidence(&document, &rsa2048), AWS_2026, [0; 32]),
        "cloud:aws:189292791360:i-0c5541936caf78c12",
    );
    // The signature's last byte.
    refused(
        join(
            &aws,
            &aws_evidence(&document, &flip(&rsa2048, -10)),
            AWS_2026,
            [0; 32],
        ),
        "bad-signature",
    );
    // A byte of the document both inside and beside the SignedData: the signed digest no
    // longer matches.
    let inner = unb64(&rsa2048);
    let at = inner
        .windows(12)
        .position(|w| w == b"189292791360")
        .unwrap();
    let mut changed = inner.clone();
    changed[at] = b'2';
    let changed_document = document.replacen("189292791360", "289292791360", 1);
    refused(
        join(
            &aws,
            &aws_evidence(&changed_document, &b64(&changed)),
            AWS_2026,
            [0; 32],
        ),
        "bad-signature",
    );
    // The document beside it changed alone: it is not the one signed.
    refused(
        join(
            &aws,
            &aws_evidence(&changed_document, &rsa2048),
            AWS_2026,
            [0; 32],
        ),
        "malformed-evidence",
    );
    // Another region's certificate (the /signature one) does not verify /rsa2048.
    let wrong = attestor(
        json!({ "aws": { "certificates": vector("aws/rsa-ap-southeast-2.pem") } }),
        Provider::Aws,
        "189292791360",
    );
    refused(
        join(
            &wrong,
            &aws_evidence(&document, &rsa2048),
            AWS_2026,
            [0; 32],
        ),
        "untrusted-signer",
    );
}

#[test]
fn aws_signature_is_admitted_only_where_enabled() {
    let enabled = attestor(
        json!({ "aws": {
            "certificates": vector("aws/rsa2048-ap-southeast-2.pem"),
            "signatureCertificates": vector("aws/rsa-ap-southeast-2.pem"),
        } }),
        Provider::Aws,
        "189292791360",
    );
    for (year, now, instance) in [
        ("2026", AWS_2026, "i-0c5541936caf78c12"),
        ("2025", AWS_2025, "i-050c2e3dd07033e9e"),
    ] {
        let document = vector(&format!("aws/ap-southeast-2-{year}.document.json"));
        let signature = vector(&format!("aws/ap-southeast-2-{year}.signature.b64"));
        admitted(
            join(&enabled, &aws_evidence(&document, &signature), now, [0; 32]),
            &format!("cloud:aws:189292791360:{instance}"),
        );
        refused(
            join(
                &enabled,
                &aws_evidence(&document, &flip(&signature, -1)),
                now,
                [0; 32],
            ),
            "bad-signature",
        );
        let changed = document.replacen("ap-southeast-2a", "ap-southeast-2b", 1);
        refused(
            join(&enabled, &aws_evidence(&changed, &signature), now, [0; 32]),
            "bad-signature",
        );
    }
    let rsa2048_only = attestor(
        json!({ "aws": { "certificates": vector("aws/rsa2048-ap-southeast-2.pem") } }),
        Provider::Aws,
        "189292791360",
    );
    refused(
        join(
            &rsa2048_only,
            &aws_evidence(
                &vector("aws/ap-southeast-2-2026.document.json"),
                &vector("aws/ap-southeast-2-2026.signature.b64"),
            ),
            AWS_2026,
            [0; 32],
        ),
        "signature-not-enabled",
    );
}

#[test]
fn aws_legacy_pkcs7_is_refused_as_legacy_even_with_its_certificate() {
    // The DSA certificate configured as if it were trusted: the algorithm is what refuses.
    let aws = attestor(
        json!({ "aws": { "certificates": vector("aws/dsa-ap-southeast-2.pem") } }),
        Provider::Aws,
        "568333322432",
    );
    let evidence = aws_evidence(
        &vector("aws/ap-southeast-2-2018.document.json"),
        &vector("aws/ap-southeast-2-2018.pkcs7.b64"),
    );
    refused(join(&aws, &evidence, AWS_2018, [0; 32]), "legacy-algorithm");
}

fn azure_evidence(document: &str) -> CloudIidEvidence {
    CloudIidEvidence {
        provider: Provider::Azure,
        document: document.to_owned(),
        signature: None,
    }
}

/// The configured CAs of both real documents: the intermediates and their roots.
fn azure_cas() -> String {
    [
        "azure/microsoft-rsa-tls-ca-01.pem",
        "azure/baltimore-cybertrust-root.pem",
        "azure/microsoft-azure-tls-issuing-ca-05.pem",
        "azure/digicert-global-root-g2.pem",
    ]
    .iter()
    .map(|p| vector(p))
    .collect()
}

/// 2022-04-19T02:00:00Z and 2023-03-08T18:00:00Z: inside each document's six hours.
const AZURE_2022: i64 = 1_650_333_600_000;
const AZURE_2023: i64 = 1_678_298_400_000;

#[test]
fn azure_attested_documents_are_admitted_and_a_changed_byte_refused() {
    for (file, now, subscription, vm) in [
        (
            "azure/southcentralus-2022.b64",
            AZURE_2022,
            "5f130ffc-0a3e-4795-b691-4f56a12a5547",
            "bd8e7443-24a0-41f3-b949-8baf4fd1c573",
        ),
        (
            "azure/usgovvirginia-2023.b64",
            AZURE_2023,
            "0afbfffa-5df9-4a3b-987e-fe7577624272",
            "990878d4-068a-4ac4-9ee9-1231d2218ef2",
        ),
    ] {
        let azure = attestor(
            json!({ "azure": { "certificates": azure_cas() } }),
            Provider::Azure,
            subscription,
        );
        let document = vector(file);
        admitted(
            join(&azure, &azure_evidence(&document), now, [0; 32]),
            &format!("cloud:azure:{subscription}:{vm}"),
        );
        // The signature's last byte, and a byte of the signed JSON (its vmId).
        refused(
            join(&azure, &azure_evidence(&flip(&document, -1)), now, [0; 32]),
            "bad-signature",
        );
        let der = unb64(&document);
        let at = der.windows(6).position(|w| w == b"\"vmId\"").unwrap() + 9;
        let mut changed = der.clone();
        changed[at] ^= 0x01;
        refused(
            join(&azure, &azure_evidence(&b64(&changed)), now, [0; 32]),
            "bad-signature",
        );
        // After the document's expiresOn.
        refused(
            join(&azure, &azure_evidence(&document), now + DAY, [0; 32]),
            "expired",
        );
    }
}

#[test]
fn azure_nonce_and_signer_name_are_checked() {
    let document = vector("azure/southcentralus-2022.b64");
    let subscription = "5f130ffc-0a3e-4795-b691-4f56a12a5547";
    // nonce = "csr": the real document was fetched with IMDS's default nonce (its request
    // time), not one derived from this node key.
    let bound = attestor(
        json!({ "azure": { "certificates": azure_cas(), "nonce": "csr" } }),
        Provider::Azure,
        subscription,
    );
    refused(
        join(&bound, &azure_evidence(&document), AZURE_2022, [0x22; 32]),
        "nonce-mismatch",
    );
    // A signer that is a Microsoft certificate but not IMDS's.
    let elsewhere = attestor(
        json!({ "azure": {
            "certificates": azure_cas(),
            "signerNames": ["login.microsoftonline.com"],
        } }),
        Provider::Azure,
        subscription,
    );
    refused(
        join(&elsewhere, &azure_evidence(&document), AZURE_2022, [0; 32]),
        "untrusted-signer",
    );
    // Only the other cloud's CA configured.
    let other_ca = attestor(
        json!({ "azure": { "certificates": vector("azure/microsoft-azure-tls-issuing-ca-05.pem") } }),
        Provider::Azure,
        subscription,
    );
    refused(
        join(&other_ca, &azure_evidence(&document), AZURE_2022, [0; 32]),
        "untrusted-signer",
    );
}

// --- GCE identity tokens ----------------------------------------------------------------------

fn gcp_evidence(token: &str) -> CloudIidEvidence {
    CloudIidEvidence {
        provider: Provider::Gcp,
        document: token.trim().to_owned(),
        signature: None,
    }
}

/// `token` with one character of its part `part` (0 header, 1 payload, 2 signature) changed,
/// at `at` characters into it.
fn change_part(token: &str, part: usize, at: usize) -> String {
    let mut parts: Vec<String> = token.trim().split('.').map(str::to_owned).collect();
    let mut chars: Vec<char> = parts[part].chars().collect();
    chars[at] = if chars[at] == 'A' { 'B' } else { 'A' };
    parts[part] = chars.into_iter().collect();
    parts.join(".")
}

#[test]
fn gce_identity_tokens_are_admitted_with_googles_keys_of_their_time() {
    for (name, audience, project, instance, iat) in [
        (
            "gce/2019-istio",
            "myaudience",
            "mesh-expansion-235023",
            "3860110238946415859",
            1_556_235_445_i64,
        ),
        (
            "gce/2020-ncbi",
            "https://www.ncbi.nlm.nih.gov",
            "gold-optics-262407",
            "2911665560261013853",
            1_596_892_352,
        ),
        (
            "gce/2024-infisical",
            "71d1b279-2fe3-4828-85f5-2f4a2fdb02a1",
            "infisical-dev",
            "8418160715288427941",
            1_715_962_787,
        ),
    ] {
        let jwks = vector(&format!("{name}.jwks.json"));
        let gcp = attestor(
            json!({ "gcp": { "jwks": jwks, "audience": audience } }),
            Provider::Gcp,
            project,
        );
        let token = vector(&format!("{name}.jwt"));
        // A minute after Google made it.
        let now = (iat + 60) * 1000;
        admitted(
            join(&gcp, &gcp_evidence(&token), now, [0; 32]),
            &format!("cloud:gcp:{project}:{instance}"),
        );
        // A changed byte in the signature and in the signed claims.
        for (part, at) in [(2, 10), (1, 40)] {
            refused(
                join(
                    &gcp,
                    &gcp_evidence(&change_part(&token, part, at)),
                    now,
                    [0; 32],
                ),
                "bad-signature",
            );
        }
        // After its hour, for another audience, and under another key set.
        refused(
            join(&gcp, &gcp_evidence(&token), now + DAY, [0; 32]),
            "expired",
        );
        let other_audience = attestor(
            json!({ "gcp": { "jwks": jwks, "audience": "another" } }),
            Provider::Gcp,
            project,
        );
        refused(
            join(&other_audience, &gcp_evidence(&token), now, [0; 32]),
            "bad-audience",
        );
    }
    // A token checked against another year's keys: its kid is unknown there.
    let keys_2024 = vector("gce/2024-infisical.jwks.json");
    let gcp = attestor(
        json!({ "gcp": { "jwks": keys_2024, "audience": "myaudience" } }),
        Provider::Gcp,
        "mesh-expansion-235023",
    );
    refused(
        join(
            &gcp,
            &gcp_evidence(&vector("gce/2019-istio.jwt")),
            (1_556_235_445 + 60) * 1000,
            [0; 32],
        ),
        "unknown-key",
    );
}
