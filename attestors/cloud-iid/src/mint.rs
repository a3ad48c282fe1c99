//! Identity documents signed by test keys standing in for each provider: AWS documents with
//! their PKCS#7 signature, Azure attested data, GCP and OIDC identity tokens, and the bad
//! tokens an attacker would try (`alg: none`, HS256 keyed with the public key). For tests
//! only (the `mint` feature, never in the component).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::str::FromStr as _;
use std::time::Duration;

use base64::Engine as _;
use cms::builder::{SignedDataBuilder, SignerInfoBuilder};
use cms::cert::{CertificateChoices, IssuerAndSerialNumber};
use cms::signed_data::{EncapsulatedContentInfo, SignerIdentifier};
use der::asn1::{GeneralizedTime, OctetString};
use der::{Decode as _, Encode as _};
use gatehouse_proto::cloud_iid::{CloudIidEvidence, Provider};
use gatehouse_sdk::b64url;
use hmac::Mac as _;
use p256::ecdsa::signature::Signer as _;
use rsa::pkcs1v15;
use rsa::traits::PublicKeyParts as _;
use serde_json::{Value, json};
use spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};
use x509_cert::Certificate;
use x509_cert::builder::{Builder as _, CertificateBuilder, Profile};
use x509_cert::name::Name;
use x509_cert::serial_number::SerialNumber;
use x509_cert::time::{Time, Validity};

pub use p256::ecdsa::SigningKey as EcKey;
pub use rsa::RsaPrivateKey as RsaKey;

/// A fresh RSA-2048 key.
pub fn rsa_key() -> RsaKey {
    RsaKey::new(&mut rand_core::OsRng, 2048).unwrap()
}

/// A fresh P-256 key.
pub fn ec_key() -> EcKey {
    EcKey::random(&mut rand_core::OsRng)
}

/// The public RSA key as a JWK.
pub fn rsa_jwk(key: &RsaKey, kid: &str) -> Value {
    let public = key.to_public_key();
    json!({
        "kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
        "n": b64url::encode(&public.n().to_bytes_be()),
        "e": b64url::encode(&public.e().to_bytes_be()),
    })
}

/// The public P-256 key as a JWK.
pub fn ec_jwk(key: &EcKey, kid: &str) -> Value {
    let point = key.verifying_key().to_encoded_point(false);
    json!({
        "kty": "EC", "kid": kid, "crv": "P-256",
        "x": b64url::encode(point.x().unwrap()),
        "y": b64url::encode(point.y().unwrap()),
    })
}

/// A JWKS of `keys`.
pub fn jwks(keys: &[Value]) -> Value {
    json!({ "keys": keys })
}

/// The SubjectPublicKeyInfo (DER) of an RSA key.
pub fn rsa_spki(key: &RsaKey) -> Vec<u8> {
    use rsa::pkcs8::EncodePublicKey as _;
    key.to_public_key()
        .to_public_key_der()
        .unwrap()
        .as_bytes()
        .to_vec()
}

/// How to sign a token.
pub enum Sign<'a> {
    /// RS256.
    Rs256(&'a RsaKey),
    /// ES256.
    Es256(&'a EcKey),
    /// HS256 with these key bytes (an attacker's algorithm confusion).
    Hs256(&'a [u8]),
    /// `alg: none`, empty signature.
    None,
}

/// A compact JWS over `claims`, with header `alg` from `sign` and `kid`.
pub fn jwt(claims: &Value, kid: Option<&str>, sign: Sign<'_>) -> String {
    let alg = match sign {
        Sign::Rs256(_) => "RS256",
        Sign::Es256(_) => "ES256",
        Sign::Hs256(_) => "HS256",
        Sign::None => "none",
    };
    let mut header = json!({ "alg": alg, "typ": "JWT" });
    if let Some(kid) = kid {
        header["kid"] = json!(kid);
    }
    let input = format!(
        "{}.{}",
        b64url::encode(header.to_string().as_bytes()),
        b64url::encode(claims.to_string().as_bytes())
    );
    let signature = match sign {
        Sign::Rs256(key) => {
            use rsa::signature::{SignatureEncoding as _, Signer as _};
            let signer = pkcs1v15::SigningKey::<sha2::Sha256>::new(key.clone());
            signer.sign(input.as_bytes()).to_vec()
        }
        Sign::Es256(key) => {
            let signature: p256::ecdsa::Signature = key.sign(input.as_bytes());
            signature.to_bytes().to_vec()
        }
        Sign::Hs256(secret) => {
            let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret).unwrap();
            mac.update(input.as_bytes());
            mac.finalize().into_bytes().to_vec()
        }
        Sign::None => Vec::new(),
    };
    format!("{input}.{}", b64url::encode(&signature))
}

/// The claims of a GCP identity token (`format=full`) issued at `iat_ms`, valid an hour.
pub fn gcp_claims(audience: &str, project: &str, instance: &str, iat_ms: i64) -> Value {
    let iat = iat_ms / 1000;
    json!({
        "iss": "https://accounts.google.com",
        "aud": audience,
        "azp": "1234567890",
        "sub": "1234567890",
        "iat": iat,
        "exp": iat + 3600,
        "google": { "compute_engine": {
            "project_id": project, "project_number": 1234567890,
            "zone": "europe-west1-b", "instance_id": instance, "instance_name": "vm-1",
            "instance_creation_timestamp": iat - 60,
        }},
    })
}

/// A certificate for `key` named `cn`: a self-signed CA, or a leaf issued by `issuer`.
pub fn certificate(key: &RsaKey, cn: &str, issuer: Option<(&RsaKey, &[u8])>) -> Vec<u8> {
    let subject = Name::from_str(&format!("CN={cn}")).unwrap();
    let spki = SubjectPublicKeyInfoOwned::from_key(key.to_public_key()).unwrap();
    // A fixed window (2020 to 2099), not "from now": the unit tests decide at a fixed database
    // time, and the integration tests at the host's; both fall inside it.
    let at = |secs| {
        Time::GeneralTime(GeneralizedTime::from_unix_duration(Duration::from_secs(secs)).unwrap())
    };
    let validity = Validity {
        not_before: at(1_577_836_800),
        not_after: at(4_102_358_400),
    };
    let serial = SerialNumber::from(u32::from(cn.len() as u8) * 7919 + 1);
    match issuer {
        None => {
            let signer = pkcs1v15::SigningKey::<sha2::Sha256>::new(key.clone());
            CertificateBuilder::new(Profile::Root, serial, validity, subject, spki, &signer)
                .unwrap()
                .build::<pkcs1v15::Signature>()
                .unwrap()
                .to_der()
                .unwrap()
        }
        Some((issuer_key, issuer_der)) => {
            let issuer = Certificate::from_der(issuer_der).unwrap();
            let signer = pkcs1v15::SigningKey::<sha2::Sha256>::new(issuer_key.clone());
            let profile = Profile::Leaf {
                issuer: issuer.tbs_certificate.subject,
                enable_key_agreement: false,
                enable_key_encipherment: false,
            };
            CertificateBuilder::new(profile, serial, validity, subject, spki, &signer)
                .unwrap()
                .build::<pkcs1v15::Signature>()
                .unwrap()
                .to_der()
                .unwrap()
        }
    }
}

/// PEM of DER certificates.
pub fn pem(certs: &[&[u8]]) -> String {
    certs
        .iter()
        .map(|der| {
            let body = base64::engine::general_purpose::STANDARD.encode(der);
            let lines: Vec<&str> = body
                .as_bytes()
                .chunks(64)
                .map(|c| std::str::from_utf8(c).unwrap())
                .collect();
            format!(
                "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
                lines.join("\n")
            )
        })
        .collect()
}

/// PKCS#7 SignedData (DER) carrying `content`, signed with `key` as the holder of `cert`
/// (SHA-256, RSA PKCS#1 v1.5, content type and digest attributes), embedding `embed`.
pub fn pkcs7(content: &[u8], key: &RsaKey, cert: &[u8], embed: &[&[u8]]) -> Vec<u8> {
    let cert = Certificate::from_der(cert).unwrap();
    let econtent = EncapsulatedContentInfo {
        econtent_type: const_oid::db::rfc5911::ID_DATA,
        econtent: Some(der::Any::encode_from(&OctetString::new(content).unwrap()).unwrap()),
    };
    let sid = SignerIdentifier::IssuerAndSerialNumber(IssuerAndSerialNumber {
        issuer: cert.tbs_certificate.issuer.clone(),
        serial_number: cert.tbs_certificate.serial_number.clone(),
    });
    let sha256 = AlgorithmIdentifierOwned {
        oid: const_oid::db::rfc5912::ID_SHA_256,
        parameters: None,
    };
    let signer = pkcs1v15::SigningKey::<sha2::Sha256>::new(key.clone());
    let signer_info =
        SignerInfoBuilder::new(&signer, sid, sha256.clone(), &econtent, None).unwrap();
    let mut builder = SignedDataBuilder::new(&econtent);
    builder.add_digest_algorithm(sha256).unwrap();
    for der in embed {
        builder
            .add_certificate(CertificateChoices::Certificate(
                Certificate::from_der(der).unwrap(),
            ))
            .unwrap();
    }
    builder
        .add_signer_info::<_, pkcs1v15::Signature>(signer_info)
        .unwrap()
        .build()
        .unwrap()
        .to_der()
        .unwrap()
}

/// Standard base64 with line breaks every 64 characters, as AWS serves `/pkcs7`.
pub fn base64_lines(der: &[u8]) -> String {
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    body.as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The date and time of `ms` since the epoch: (year, month, day, hour, minute, second).
fn civil(ms: i64) -> (i64, i64, i64, i64, i64, i64) {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, rem / 3600, rem % 3600 / 60, rem % 60)
}

/// `ms` as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn rfc3339(ms: i64) -> String {
    let (y, mo, d, h, mi, s) = civil(ms);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// `ms` as Azure's `MM/DD/YY HH:MM:SS -0000`.
pub fn azure_time(ms: i64) -> String {
    let (y, mo, d, h, mi, s) = civil(ms);
    format!("{mo:02}/{d:02}/{:02} {h:02}:{mi:02}:{s:02} -0000", y % 100)
}

/// An AWS instance identity document for an instance launched at `pending_ms`.
pub fn aws_document(account: &str, instance: &str, pending_ms: i64) -> String {
    json!({
        "accountId": account,
        "architecture": "x86_64",
        "availabilityZone": "eu-west-1a",
        "imageId": "ami-0123456789abcdef0",
        "instanceId": instance,
        "instanceType": "m5.large",
        "pendingTime": rfc3339(pending_ms),
        "privateIp": "10.0.0.12",
        "region": "eu-west-1",
        "version": "2017-09-30",
    })
    .to_string()
}

/// Azure attested data, created at `created_ms` and expiring 6 hours later.
pub fn azure_document(subscription: &str, vm: &str, created_ms: i64) -> String {
    azure_document_with_nonce(subscription, vm, created_ms, "20181128-001617")
}

/// [`azure_document`] with the nonce the VM asked for.
pub fn azure_document_with_nonce(
    subscription: &str,
    vm: &str,
    created_ms: i64,
    nonce: &str,
) -> String {
    json!({
        "licenseType": "",
        "nonce": nonce,
        "plan": { "name": "", "product": "", "publisher": "" },
        "sku": "22_04-lts-gen2",
        "subscriptionId": subscription,
        "timeStamp": {
            "createdOn": azure_time(created_ms),
            "expiresOn": azure_time(created_ms + 6 * 3_600_000),
        },
        "vmId": vm,
    })
    .to_string()
}

/// The audience tokens are minted for.
pub const AUDIENCE: &str = "https://gatehouse.test";
/// The issuer of OIDC tokens.
pub const OIDC_ISSUER: &str = "https://issuer.test";

/// Keys and certificates standing in for all four providers.
pub struct Providers {
    /// AWS's regional key and its (self-signed, configured) certificate.
    pub aws_key: RsaKey,
    /// AWS's certificate.
    pub aws_cert: Vec<u8>,
    /// Azure's CA certificate (configured).
    pub azure_ca: Vec<u8>,
    /// Azure's signing key.
    pub azure_key: RsaKey,
    /// Azure's signer certificate, issued by the CA (embedded).
    pub azure_leaf: Vec<u8>,
    /// Google's signing key (kid `gcp-1`).
    pub gcp_key: RsaKey,
    /// The OIDC issuer's RSA key (kid `oidc-rsa`).
    pub oidc_rsa: RsaKey,
    /// The OIDC issuer's P-256 key (kid `oidc-ec`).
    pub oidc_ec: EcKey,
}

impl Default for Providers {
    fn default() -> Self {
        Self::new()
    }
}

impl Providers {
    /// Fresh keys and certificates for every provider.
    pub fn new() -> Self {
        let aws_key = rsa_key();
        let aws_cert = certificate(&aws_key, "Amazon Web Services LLC test", None);
        let azure_ca_key = rsa_key();
        let azure_ca = certificate(&azure_ca_key, "Azure test CA", None);
        let azure_key = rsa_key();
        let azure_leaf = certificate(
            &azure_key,
            "metadata.azure.test",
            Some((&azure_ca_key, &azure_ca)),
        );
        Providers {
            aws_key,
            aws_cert,
            azure_ca,
            azure_key,
            azure_leaf,
            gcp_key: rsa_key(),
            oidc_rsa: rsa_key(),
            oidc_ec: ec_key(),
        }
    }

    /// The `providers` table trusting these keys, with `max_age_ms` for each.
    pub fn config(&self, max_age_ms: u64) -> Value {
        json!({
            "maxAgeMs": max_age_ms,
            "providers": {
                "aws": { "certificates": pem(&[&self.aws_cert]) },
                "azure": {
                    "certificates": pem(&[&self.azure_ca]),
                    "signerNames": ["metadata.azure.test"],
                },
                "gcp": {
                    "audience": AUDIENCE,
                    "jwks": jwks(&[rsa_jwk(&self.gcp_key, "gcp-1")]).to_string(),
                },
                "oidc": {
                    "issuer": OIDC_ISSUER,
                    "audience": AUDIENCE,
                    "jwks": jwks(&[rsa_jwk(&self.oidc_rsa, "oidc-rsa"), ec_jwk(&self.oidc_ec, "oidc-ec")]),
                    "accountClaim": "tenant",
                    "instanceClaim": "sub",
                },
            },
        })
    }

    /// AWS evidence for (`account`, `instance`) launched at `made_ms`.
    pub fn aws(&self, account: &str, instance: &str, made_ms: i64) -> CloudIidEvidence {
        let document = aws_document(account, instance, made_ms);
        let signed = pkcs7(document.as_bytes(), &self.aws_key, &self.aws_cert, &[]);
        CloudIidEvidence {
            provider: Provider::Aws,
            document,
            signature: Some(base64_lines(&signed)),
        }
    }

    /// Azure evidence for (`subscription`, `vm`) created at `made_ms`.
    pub fn azure(&self, subscription: &str, vm: &str, made_ms: i64) -> CloudIidEvidence {
        self.azure_with_nonce(subscription, vm, made_ms, "20181128-001617")
    }

    /// [`Providers::azure`] with the nonce the VM asked IMDS for.
    pub fn azure_with_nonce(
        &self,
        subscription: &str,
        vm: &str,
        made_ms: i64,
        nonce: &str,
    ) -> CloudIidEvidence {
        let document = azure_document_with_nonce(subscription, vm, made_ms, nonce);
        let signed = pkcs7(
            document.as_bytes(),
            &self.azure_key,
            &self.azure_leaf,
            &[&self.azure_leaf],
        );
        CloudIidEvidence {
            provider: Provider::Azure,
            document: base64::engine::general_purpose::STANDARD.encode(signed),
            signature: None,
        }
    }

    /// GCP evidence for (`project`, `instance`) issued at `made_ms`, signed as `sign` says
    /// under `kid`.
    pub fn gcp_with(
        &self,
        project: &str,
        instance: &str,
        made_ms: i64,
        kid: Option<&str>,
        sign: Sign<'_>,
    ) -> CloudIidEvidence {
        CloudIidEvidence {
            provider: Provider::Gcp,
            document: jwt(&gcp_claims(AUDIENCE, project, instance, made_ms), kid, sign),
            signature: None,
        }
    }

    /// GCP evidence signed by Google's stand-in key.
    pub fn gcp(&self, project: &str, instance: &str, made_ms: i64) -> CloudIidEvidence {
        self.gcp_with(
            project,
            instance,
            made_ms,
            Some("gcp-1"),
            Sign::Rs256(&self.gcp_key),
        )
    }

    /// OIDC claims for (`account`, `instance`) issued at `made_ms`.
    pub fn oidc_claims(account: &str, instance: &str, made_ms: i64) -> Value {
        let iat = made_ms / 1000;
        json!({
            "iss": OIDC_ISSUER, "aud": [AUDIENCE, "other"], "sub": instance,
            "tenant": account, "iat": iat, "exp": iat + 3600,
        })
    }

    /// OIDC evidence signed ES256 by the issuer's P-256 key.
    pub fn oidc(&self, account: &str, instance: &str, made_ms: i64) -> CloudIidEvidence {
        CloudIidEvidence {
            provider: Provider::Oidc,
            document: jwt(
                &Self::oidc_claims(account, instance, made_ms),
                Some("oidc-ec"),
                Sign::Es256(&self.oidc_ec),
            ),
            signature: None,
        }
    }

    /// Evidence of `provider` for (`account`, `instance`) made at `made_ms`, by the right key.
    pub fn evidence(
        &self,
        provider: Provider,
        account: &str,
        instance: &str,
        made_ms: i64,
    ) -> CloudIidEvidence {
        match provider {
            Provider::Aws => self.aws(account, instance, made_ms),
            Provider::Gcp => self.gcp(account, instance, made_ms),
            Provider::Azure => self.azure(account, instance, made_ms),
            Provider::Oidc => self.oidc(account, instance, made_ms),
        }
    }
}

/// Evidence as the bytes of a join request's `attestation`.
pub fn bytes(evidence: &CloudIidEvidence) -> Vec<u8> {
    serde_json::to_vec(evidence).unwrap()
}
