//! PKCS#7 / CMS SignedData (AWS and Azure): the signed content, once its signature verifies
//! with a certificate from the configuration.
//!
//! Parsed with RustCrypto's `cms`; the signature is verified by the host's native
//! `crypto.verify-signature` and a signer certificate that is not itself configured must chain
//! to a configured one through `crypto.verify-chain`.

use cms::cert::CertificateChoices;
use cms::content_info::ContentInfo;
use cms::signed_data::{SignedData, SignerIdentifier};
use const_oid::db::{rfc5911, rfc5912};
use der::asn1::OctetStringRef;
use der::{Decode as _, Encode as _, Tag, Tagged as _};
use gatehouse_sdk::{Crypto, Refusal, SignatureScheme, TimestampMs, reason, refuse};
use x509_cert::Certificate;

use crate::codes;

/// Most bytes of a SignedData: AWS's is about 1 KiB, Azure's (with its certificate) about 4.
pub const MAX_LEN: usize = 64 * 1024;
/// How deep [`ber_to_der`] follows nested values: SignedData with a certificate nests about 12
/// deep. The limit keeps recursion on hostile input bounded.
const MAX_DEPTH: usize = 32;
/// Most certificates a SignedData may carry (the host's chain check takes at most 8).
const MAX_CERTS: usize = 7;

/// The certificates one provider's documents are signed with (or by a CA of), DER.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Trusted {
    /// Each certificate's DER.
    pub certs: Vec<Vec<u8>>,
}

impl Trusted {
    /// Parses one or more PEM `CERTIFICATE` blocks.
    pub fn from_pem(pem: &str) -> Result<Trusted, String> {
        let certs = Certificate::load_pem_chain(pem.as_bytes())
            .map_err(|e| format!("certificates: not PEM certificates: {e}"))?;
        if certs.is_empty() {
            return Err("certificates: no certificate".into());
        }
        let certs = certs
            .iter()
            .map(|c| c.to_der().map_err(|e| format!("certificates: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Trusted { certs })
    }
}

/// sha1 (1.3.14.3.2.26): the digest of AWS's legacy `/pkcs7`.
const SHA1: der::asn1::ObjectIdentifier = der::asn1::ObjectIdentifier::new_unwrap("1.3.14.3.2.26");
/// id-dsa (1.2.840.10040.4.1) and id-dsa-with-sha1 (1.2.840.10040.4.3).
const DSA: der::asn1::ObjectIdentifier =
    der::asn1::ObjectIdentifier::new_unwrap("1.2.840.10040.4.1");
const DSA_WITH_SHA1: der::asn1::ObjectIdentifier =
    der::asn1::ObjectIdentifier::new_unwrap("1.2.840.10040.4.3");

/// What a verified SignedData yields.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The signed content.
    pub content: Vec<u8>,
    /// The certificate whose key verified the signature (configured, or embedded and chained to
    /// a configured one).
    pub signer: Certificate,
}

/// Whether `bytes` are one whole BER/DER element (what a PKCS#7 is, well formed or not), as
/// opposed to a bare signature, whose bytes are random: one of them parsing as a complete
/// element of exactly its length is vanishingly unlikely.
pub fn is_ber_element(bytes: &[u8]) -> bool {
    bytes.first() == Some(&0x30) && ber_to_der(bytes).is_some()
}

/// Verifies `signed_data` (DER or BER) and returns the content it signs (its encapsulated
/// content, or `detached` when it carries none; when it carries both, they must be equal) and
/// the signer's certificate.
///
/// The digest algorithm must be SHA-256, written as id-sha256 or, as Azure writes it (and
/// OpenSSL and Go's pkcs7 accept), as sha256WithRSAEncryption with an RSA signature.
///
/// Refusals: `malformed-evidence` when it does not parse or is not one signer with its
/// content type and digest attributes, [`codes::LEGACY_ALGORITHM`] for SHA-1 or DSA (AWS's
/// `/pkcs7`), [`codes::BAD_ALGORITHM`] for any other digest or signature algorithm than RSA
/// PKCS#1 v1.5 / ECDSA P-256 with SHA-256, [`codes::UNTRUSTED_SIGNER`] when no configured
/// certificate is, or issued, the signer's, [`codes::BAD_SIGNATURE`].
pub fn verify(
    signed_data: &[u8],
    detached: Option<&[u8]>,
    trusted: &Trusted,
    at: TimestampMs,
    crypto: &dyn Crypto,
) -> Result<Verified, Refusal> {
    let malformed = || refuse(reason::MALFORMED_EVIDENCE);
    if signed_data.len() > MAX_LEN {
        return Err(malformed());
    }
    let der = ber_to_der(signed_data).ok_or_else(malformed)?;
    let info = ContentInfo::from_der(&der).map_err(|_| malformed())?;
    if info.content_type != rfc5911::ID_SIGNED_DATA {
        return Err(malformed());
    }
    let data: SignedData = info.content.decode_as().map_err(|_| malformed())?;

    // The content: encapsulated (AWS, Azure) or given beside it.
    let encapsulated = match &data.encap_content_info.econtent {
        Some(any) if any.tag() == Tag::OctetString => Some(any.value()),
        Some(_) => return Err(malformed()),
        None => None,
    };
    let content = match (encapsulated, detached) {
        (Some(inner), Some(outer)) if inner != outer => return Err(malformed()),
        (Some(inner), _) => inner.to_vec(),
        (None, Some(outer)) => outer.to_vec(),
        (None, None) => return Err(malformed()),
    };

    let mut signers = data.signer_infos.0.iter();
    let (Some(signer), None) = (signers.next(), signers.next()) else {
        return Err(malformed());
    };
    let (digest, signature) = (signer.digest_alg.oid, signer.signature_algorithm.oid);
    if digest == SHA1 || signature == DSA || signature == DSA_WITH_SHA1 {
        return Err(refuse(codes::LEGACY_ALGORITHM));
    }
    let rsa = matches!(
        signature,
        rfc5912::RSA_ENCRYPTION | rfc5912::SHA_256_WITH_RSA_ENCRYPTION
    );
    let sha256 =
        digest == rfc5912::ID_SHA_256 || (rsa && digest == rfc5912::SHA_256_WITH_RSA_ENCRYPTION);
    if !sha256 {
        return Err(refuse(codes::BAD_ALGORITHM));
    }
    let scheme = if rsa {
        SignatureScheme::RsaPkcs1Sha256
    } else if signature == rfc5912::ECDSA_WITH_SHA_256 {
        SignatureScheme::EcdsaP256Sha256Der
    } else {
        return Err(refuse(codes::BAD_ALGORITHM));
    };

    // What was signed: the DER of the signed attributes (as a SET OF), which must name the
    // content's type and its SHA-256 (RFC 5652 5.4); without attributes, the content itself.
    let message = match &signer.signed_attrs {
        Some(attrs) => {
            let mut content_type = None;
            let mut digest = None;
            for attr in attrs.iter() {
                let mut values = attr.values.iter();
                let (Some(value), None) = (values.next(), values.next()) else {
                    return Err(malformed());
                };
                if attr.oid == rfc5911::ID_CONTENT_TYPE {
                    content_type = Some(value.decode_as::<der::asn1::ObjectIdentifier>());
                } else if attr.oid == rfc5911::ID_MESSAGE_DIGEST {
                    digest = Some(
                        value
                            .decode_as::<OctetStringRef<'_>>()
                            .map(|d| d.as_bytes().to_vec()),
                    );
                }
            }
            match content_type {
                Some(Ok(oid)) if oid == data.encap_content_info.econtent_type => {}
                _ => return Err(malformed()),
            }
            match digest {
                Some(Ok(d)) if d == crypto.sha256(&content) => {}
                _ => return Err(refuse(codes::BAD_SIGNATURE)),
            }
            attrs.to_der().map_err(|_| malformed())?
        }
        None => content.clone(),
    };

    let embedded: Vec<Certificate> = match &data.certificates {
        Some(set) => set
            .0
            .iter()
            .filter_map(|c| match c {
                CertificateChoices::Certificate(cert) => Some(cert.clone()),
                CertificateChoices::Other(_) => None,
            })
            .collect(),
        None => Vec::new(),
    };
    if embedded.len() > MAX_CERTS {
        return Err(malformed());
    }
    let (signer_cert, spki) = signer_spki(&signer.sid, &embedded, trusted, at, crypto)?;
    crypto
        .verify_signature(scheme, &spki, &message, signer.signature.as_bytes())
        .map_err(|_| refuse(codes::BAD_SIGNATURE))?;
    Ok(Verified {
        content,
        signer: signer_cert,
    })
}

/// The signer's SubjectPublicKeyInfo: from a configured certificate the signer identifier
/// names, or from an embedded one that chains to a configured certificate at `at`.
fn signer_spki(
    sid: &SignerIdentifier,
    embedded: &[Certificate],
    trusted: &Trusted,
    at: TimestampMs,
    crypto: &dyn Crypto,
) -> Result<(Certificate, Vec<u8>), Refusal> {
    let untrusted = || refuse(codes::UNTRUSTED_SIGNER);
    let SignerIdentifier::IssuerAndSerialNumber(id) = sid else {
        return Err(untrusted());
    };
    let names = |cert: &Certificate| {
        cert.tbs_certificate.issuer == id.issuer
            && cert.tbs_certificate.serial_number == id.serial_number
    };
    // A configured certificate that is the signer's: pinned, so trusted as it is.
    for der in &trusted.certs {
        if let Ok(cert) = Certificate::from_der(der)
            && names(&cert)
        {
            let spki = cert
                .tbs_certificate
                .subject_public_key_info
                .to_der()
                .map_err(|_| untrusted())?;
            return Ok((cert, spki));
        }
    }
    // Else the embedded signer certificate, which must chain to a configured one.
    let leaf = embedded.iter().find(|c| names(c)).ok_or_else(untrusted)?;
    let mut chain = vec![leaf.to_der().map_err(|_| untrusted())?];
    for cert in embedded.iter().filter(|c| !names(c)) {
        chain.push(cert.to_der().map_err(|_| untrusted())?);
    }
    let spki = crypto
        .verify_chain(&chain, &trusted.certs, at)
        .map(|verified| verified.leaf_spki)
        .map_err(|_| untrusted())?;
    Ok((leaf.clone(), spki))
}

/// The PKCS#1 `RSAPublicKey` (DER) of an RSA certificate (`cert` DER); `None` for any other.
pub fn rsa_public_key(cert: &[u8]) -> Option<Vec<u8>> {
    let cert = Certificate::from_der(cert).ok()?;
    let spki = &cert.tbs_certificate.subject_public_key_info;
    if spki.algorithm.oid != rfc5912::RSA_ENCRYPTION {
        return None;
    }
    spki.subject_public_key.as_bytes().map(<[u8]>::to_vec)
}

/// The DNS names a certificate is for, lowercase: its subjectAltName dNSNames or, when it has
/// no subjectAltName extension, its subject's common names (RFC 6125 6.4.4).
pub fn dns_names(cert: &Certificate) -> Vec<String> {
    use x509_cert::ext::pkix::SubjectAltName;
    use x509_cert::ext::pkix::name::GeneralName;
    match cert.tbs_certificate.get::<SubjectAltName>() {
        Ok(Some((_, san))) => san
            .0
            .iter()
            .filter_map(|name| match name {
                GeneralName::DnsName(dns) => Some(dns.as_str().to_ascii_lowercase()),
                _ => None,
            })
            .collect(),
        Ok(None) => cert
            .tbs_certificate
            .subject
            .0
            .iter()
            .flat_map(|rdn| rdn.0.iter())
            .filter(|atv| atv.oid == const_oid::db::rfc4519::CN)
            .filter(|atv| {
                matches!(
                    atv.value.tag(),
                    Tag::Utf8String | Tag::PrintableString | Tag::Ia5String
                )
            })
            .filter_map(|atv| std::str::from_utf8(atv.value.value()).ok())
            .map(str::to_ascii_lowercase)
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Re-encodes BER as DER: indefinite lengths become definite, long-form lengths minimal, and
/// constructed OCTET STRINGs primitive. `None` when it does not parse, nests deeper than
/// [`MAX_DEPTH`] or has trailing bytes.
///
/// Written by hand because `der` (like every RustCrypto decoder) accepts DER only, while
/// PKCS#7 producers, the older signers of instance identity documents among them, emit BER
/// with indefinite lengths (Go's `pkcs7` converts the same way before parsing). DER input
/// comes out unchanged. Set ordering is kept: the signed attributes are re-encoded by `der`
/// for the signature check anyway.
pub fn ber_to_der(input: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(input.len());
    let rest = element(input, 0, &mut out)?;
    rest.is_empty().then_some(out)
}

/// Converts one element at the start of `input` into `out`; returns what follows it.
fn element<'a>(input: &'a [u8], depth: usize, out: &mut Vec<u8>) -> Option<&'a [u8]> {
    if depth > MAX_DEPTH {
        return None;
    }
    let (tag, rest) = split_tag(input)?;
    let constructed = tag.first()? & 0x20 != 0;
    let (&first, mut rest) = rest.split_first()?;
    let length = match first {
        0x80 if constructed => None,
        0x80 => return None,
        n if n < 0x80 => Some(usize::from(n)),
        n => {
            let count = usize::from(n & 0x7f);
            if count > 4 || rest.len() < count {
                return None;
            }
            let (bytes, after) = rest.split_at(count);
            rest = after;
            Some(
                bytes
                    .iter()
                    .fold(0usize, |acc, b| (acc << 8) | usize::from(*b)),
            )
        }
    };
    // A constructed OCTET STRING (universal 4) is a list of pieces: DER wants one primitive.
    let octet_string = tag == [0x24];
    if !constructed {
        let length = length?;
        if rest.len() < length {
            return None;
        }
        let (value, after) = rest.split_at(length);
        out.extend_from_slice(tag);
        push_length(out, value.len());
        out.extend_from_slice(value);
        return Some(after);
    }
    let mut inner = Vec::new();
    let after = match length {
        Some(length) => {
            if rest.len() < length {
                return None;
            }
            let (mut value, after) = rest.split_at(length);
            while !value.is_empty() {
                value = element(value, depth + 1, &mut inner)?;
            }
            after
        }
        None => loop {
            if let [0, 0, after @ ..] = rest {
                break after;
            }
            rest = element(rest, depth + 1, &mut inner)?;
        },
    };
    if octet_string {
        let pieces = flatten_octets(&inner)?;
        out.push(0x04);
        push_length(out, pieces.len());
        out.extend_from_slice(&pieces);
    } else {
        out.extend_from_slice(tag);
        push_length(out, inner.len());
        out.extend_from_slice(&inner);
    }
    Some(after)
}

/// The concatenated values of a sequence of DER primitive OCTET STRINGs.
fn flatten_octets(mut der: &[u8]) -> Option<Vec<u8>> {
    let mut value = Vec::new();
    while !der.is_empty() {
        let (tag, rest) = split_tag(der)?;
        if tag != [0x04] {
            return None;
        }
        let (&first, rest) = rest.split_first()?;
        let (length, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let count = usize::from(first & 0x7f);
            if count > 4 || rest.len() < count {
                return None;
            }
            let (bytes, rest) = rest.split_at(count);
            (
                bytes
                    .iter()
                    .fold(0usize, |acc, b| (acc << 8) | usize::from(*b)),
                rest,
            )
        };
        if rest.len() < length {
            return None;
        }
        let (piece, after) = rest.split_at(length);
        value.extend_from_slice(piece);
        der = after;
    }
    Some(value)
}

/// Splits the identifier octets (a high tag number takes up to 4 more bytes) off `input`.
fn split_tag(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let first = *input.first()?;
    if first & 0x1f != 0x1f {
        return Some(input.split_at(1));
    }
    let more = input.get(1..)?.iter().take(4).position(|b| b & 0x80 == 0)?;
    Some(input.split_at(more + 2))
}

/// Appends a DER length.
fn push_length(out: &mut Vec<u8>, length: usize) {
    if length < 0x80 {
        out.push(length as u8);
        return;
    }
    let bytes = length.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count();
    out.push(0x80 | (bytes.len() - skip) as u8);
    out.extend_from_slice(&bytes[skip..]);
}
