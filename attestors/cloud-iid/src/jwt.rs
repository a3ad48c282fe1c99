//! Identity tokens (GCP, generic OIDC): JWS compact JWTs checked against keys from the
//! configuration.
//!
//! Parsed by hand with base64url and serde_json, and verified through the host's native
//! `crypto.verify-signature`, rather than with a JOSE crate. `jsonwebtoken` 10 does build for
//! wasm32-wasip2 with its `rust_crypto` provider, but then verifies RSA in the component, about
//! 10x slower than the host's aws-lc-rs; its pluggable `CryptoProvider` is a set of plain `fn`s
//! with no way to reach the join's `Crypto` (it would take process-global state), and its
//! `DecodingKey` is not what the prepared configuration can keep. `josekit` needs OpenSSL. What
//! is left is small: split three base64url parts, read two JSON objects, and refuse everything
//! but the two algorithms below, each only with a key of its own type.

use std::collections::BTreeMap;

use der::Encode as _;
use der::asn1::{BitString, ObjectIdentifier, UintRef};
use gatehouse_sdk::{Crypto, Refusal, SignatureScheme, b64url, refuse};
use serde::{Deserialize, Serialize};
use spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};

use crate::codes;

/// Most bytes of a token: real identity tokens are 1 to 2 KiB.
pub const MAX_TOKEN_LEN: usize = 16 * 1024;
/// Most keys in one configured JWKS.
pub const MAX_KEYS: usize = 64;

/// The algorithms a token may be signed with. Anything else (`none`, every `HS*`, `PS*`,
/// `ES384`…) is refused before a key is looked at: an `HS256` token "keyed" with a public key
/// must never reach a verifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Alg {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
    /// ECDSA P-256 with SHA-256, signature `r || s`.
    Es256,
}

impl Alg {
    fn parse(name: &str) -> Option<Alg> {
        match name {
            "RS256" => Some(Alg::Rs256),
            "ES256" => Some(Alg::Es256),
            _ => None,
        }
    }

    fn scheme(self) -> SignatureScheme {
        match self {
            Alg::Rs256 => SignatureScheme::RsaPkcs1Sha256,
            Alg::Es256 => SignatureScheme::EcdsaP256Sha256Fixed,
        }
    }
}

/// A verification key from a JWKS: the algorithm it is for (by its type) and its
/// SubjectPublicKeyInfo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    /// The only algorithm this key verifies (RSA keys RS256, P-256 keys ES256).
    pub alg: Alg,
    /// SubjectPublicKeyInfo, DER.
    pub spki: Vec<u8>,
}

/// A configured key set, by `kid`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeySet {
    keys: BTreeMap<String, Key>,
}

/// One JWK, as much of it as matters.
#[derive(Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    #[serde(rename = "use")]
    use_: Option<String>,
    alg: Option<String>,
    n: Option<String>,
    e: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

#[derive(Deserialize)]
struct Jwks {
    keys: Vec<Jwk>,
}

impl KeySet {
    /// Parses a JWKS (RFC 7517 `{"keys": [...]}`): RSA keys (`n`, `e`, at least 2048 bits) and
    /// EC P-256 keys (`x`, `y`), each with a unique `kid`. Keys with `use` other than `sig`
    /// are skipped, as are key types this attestor cannot use; a key whose `alg` contradicts
    /// its type is an error.
    pub fn parse(jwks: &serde_json::Value) -> Result<KeySet, String> {
        let jwks: Jwks = serde_json::from_value(jwks.clone())
            .map_err(|e| format!("not a JWKS ({{\"keys\": [...]}}): {e}"))?;
        if jwks.keys.len() > MAX_KEYS {
            return Err(format!("more than {MAX_KEYS} keys"));
        }
        let mut keys = BTreeMap::new();
        for jwk in jwks.keys {
            if jwk.use_.as_deref().is_some_and(|u| u != "sig") {
                continue;
            }
            let Some(kid) = jwk.kid.clone() else {
                return Err("a key without a kid".into());
            };
            let key = match jwk.kty.as_str() {
                "RSA" => rsa_key(&jwk),
                "EC" => ec_key(&jwk),
                _ => continue,
            }
            .map_err(|e| format!("key {kid:?}: {e}"))?;
            if let Some(alg) = &jwk.alg
                && Alg::parse(alg) != Some(key.alg)
            {
                return Err(format!(
                    "key {kid:?}: alg {alg} does not fit a {} key",
                    jwk.kty
                ));
            }
            if keys.insert(kid.clone(), key).is_some() {
                return Err(format!("kid {kid:?} twice"));
            }
        }
        if keys.is_empty() {
            return Err("no RSA or P-256 signing key".into());
        }
        Ok(KeySet { keys })
    }

    /// The key with `kid`.
    pub fn get(&self, kid: &str) -> Option<&Key> {
        self.keys.get(kid)
    }
}

fn b64(field: &Option<String>, name: &str) -> Result<Vec<u8>, String> {
    let text = field.as_deref().ok_or_else(|| format!("no {name}"))?;
    b64url::decode(text).map_err(|_| format!("{name} is not base64url"))
}

/// An RSA JWK as a SubjectPublicKeyInfo (rsaEncryption, NULL parameters, PKCS#1 key).
fn rsa_key(jwk: &Jwk) -> Result<Key, String> {
    let n = b64(&jwk.n, "n")?;
    let e = b64(&jwk.e, "e")?;
    let modulus = UintRef::new(&n).map_err(|e| e.to_string())?;
    if modulus.as_bytes().len() < 256 {
        return Err("an RSA key shorter than 2048 bits".into());
    }
    let public_key = pkcs1::RsaPublicKey {
        modulus,
        public_exponent: UintRef::new(&e).map_err(|e| e.to_string())?,
    };
    let pkcs1 = public_key.to_der().map_err(|e| e.to_string())?;
    spki_der(
        const_oid::db::rfc5912::RSA_ENCRYPTION,
        Some(der::Any::null()),
        &pkcs1,
    )
    .map(|spki| Key {
        alg: Alg::Rs256,
        spki,
    })
}

/// A P-256 JWK as a SubjectPublicKeyInfo (id-ecPublicKey, prime256v1, uncompressed point).
fn ec_key(jwk: &Jwk) -> Result<Key, String> {
    if jwk.crv.as_deref() != Some("P-256") {
        return Err(format!("curve {:?} is not P-256", jwk.crv));
    }
    let x = b64(&jwk.x, "x")?;
    let y = b64(&jwk.y, "y")?;
    if x.len() != 32 || y.len() != 32 {
        return Err("x and y must be 32 bytes".into());
    }
    let mut point = Vec::with_capacity(65);
    point.push(0x04);
    point.extend_from_slice(&x);
    point.extend_from_slice(&y);
    let curve = der::Any::from(&const_oid::db::rfc5912::SECP_256_R_1);
    spki_der(
        const_oid::db::rfc5912::ID_EC_PUBLIC_KEY,
        Some(curve),
        &point,
    )
    .map(|spki| Key {
        alg: Alg::Es256,
        spki,
    })
}

fn spki_der(
    oid: ObjectIdentifier,
    parameters: Option<der::Any>,
    key: &[u8],
) -> Result<Vec<u8>, String> {
    SubjectPublicKeyInfoOwned {
        algorithm: AlgorithmIdentifierOwned { oid, parameters },
        subject_public_key: BitString::from_bytes(key).map_err(|e| e.to_string())?,
    }
    .to_der()
    .map_err(|e| e.to_string())
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
    crit: Option<serde_json::Value>,
}

/// Verifies a compact JWS with a key of `keys` that `allowed` permits, and returns its claims.
/// Refusals: [`codes::BAD_ALGORITHM`] for an algorithm not allowed (`none`, `HS*`…) or not the
/// key's, [`codes::UNKNOWN_KEY`] for a missing or unconfigured `kid`,
/// [`codes::BAD_SIGNATURE`], and `malformed-evidence` for anything that does not parse.
pub fn verify(
    token: &str,
    keys: &KeySet,
    allowed: &[Alg],
    crypto: &dyn Crypto,
) -> Result<serde_json::Map<String, serde_json::Value>, Refusal> {
    let malformed = || refuse(gatehouse_sdk::reason::MALFORMED_EVIDENCE);
    if token.len() > MAX_TOKEN_LEN {
        return Err(malformed());
    }
    let mut parts = token.split('.');
    let (Some(header_b64), Some(payload_b64), Some(signature_b64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed());
    };
    let header: Header = b64url::decode(header_b64)
        .ok()
        .and_then(|h| serde_json::from_slice(&h).ok())
        .ok_or_else(malformed)?;
    // No extension is understood, so a token that makes one critical is refused (RFC 7515
    // 4.1.11).
    if header.crit.is_some() {
        return Err(malformed());
    }
    let alg = Alg::parse(&header.alg)
        .filter(|alg| allowed.contains(alg))
        .ok_or_else(|| refuse(codes::BAD_ALGORITHM))?;
    let key = header
        .kid
        .as_deref()
        .and_then(|kid| keys.get(kid))
        .ok_or_else(|| refuse(codes::UNKNOWN_KEY))?;
    if key.alg != alg {
        return Err(refuse(codes::BAD_ALGORITHM));
    }
    let signature = b64url::decode(signature_b64).map_err(|_| malformed())?;
    let signing_input = &token[..header_b64.len() + 1 + payload_b64.len()];
    crypto
        .verify_signature(
            alg.scheme(),
            &key.spki,
            signing_input.as_bytes(),
            &signature,
        )
        .map_err(|_| refuse(codes::BAD_SIGNATURE))?;
    b64url::decode(payload_b64)
        .ok()
        .and_then(|p| serde_json::from_slice(&p).ok())
        .ok_or_else(malformed)
}
