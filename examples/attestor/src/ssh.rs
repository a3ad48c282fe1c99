//! The SSH wire formats the attestor reads: an Ed25519 public key line (`ssh-ed25519 AAAA…`)
//! and an SSH signature (`ssh-keygen -Y sign`, the SSHSIG format of OpenSSH's PROTOCOL.sshsig).
//! Both are untrusted bytes from the machine: every parser is total and bounded.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// The only key type the example takes.
pub const ED25519: &str = "ssh-ed25519";
/// The SSHSIG preamble.
const MAGIC: &[u8] = b"SSHSIG";
/// The armour around an SSH signature.
const BEGIN: &str = "-----BEGIN SSH SIGNATURE-----";
const END: &str = "-----END SSH SIGNATURE-----";
/// The longest text either format may be (a signature is about 300 bytes armoured).
const MAX_TEXT: usize = 4096;

/// An Ed25519 host key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostKey {
    /// The 32-byte public key.
    pub key: [u8; 32],
}

impl HostKey {
    /// Parses `ssh-ed25519 <base64> [comment]`.
    pub fn parse_line(line: &str) -> Option<Self> {
        if line.len() > MAX_TEXT {
            return None;
        }
        let mut words = line.split_ascii_whitespace();
        if words.next()? != ED25519 {
            return None;
        }
        let blob = STANDARD.decode(words.next()?).ok()?;
        Self::from_blob(&blob)
    }

    /// Parses the wire form: `string "ssh-ed25519" || string key`.
    pub fn from_blob(blob: &[u8]) -> Option<Self> {
        let mut r = Reader(blob);
        if r.string()? != ED25519.as_bytes() {
            return None;
        }
        let key: [u8; 32] = r.string()?.try_into().ok()?;
        r.0.is_empty().then_some(HostKey { key })
    }

    /// The wire form.
    pub fn blob(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_string(&mut out, ED25519.as_bytes());
        put_string(&mut out, &self.key);
        out
    }

    /// The key as a SubjectPublicKeyInfo (DER, RFC 8410), what the host's `verify-signature`
    /// takes.
    pub fn spki(&self) -> Vec<u8> {
        let mut out = vec![
            0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
        ];
        out.extend_from_slice(&self.key);
        out
    }
}

/// A parsed SSH signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshSig {
    /// The signer's public key (wire form).
    pub public_key: Vec<u8>,
    /// The namespace the signature is for.
    pub namespace: Vec<u8>,
    /// Reserved (signed over, otherwise ignored).
    pub reserved: Vec<u8>,
    /// `sha256` or `sha512`: the hash of the message that was signed.
    pub hash_algorithm: Vec<u8>,
    /// The raw Ed25519 signature.
    pub signature: [u8; 64],
}

impl SshSig {
    /// Parses the armoured text `ssh-keygen -Y sign` writes.
    pub fn parse_armored(text: &str) -> Option<Self> {
        if text.len() > MAX_TEXT {
            return None;
        }
        let body = text.trim().strip_prefix(BEGIN)?.strip_suffix(END)?;
        let joined: String = body.split_ascii_whitespace().collect();
        Self::parse(&STANDARD.decode(joined).ok()?)
    }

    /// Parses the binary form.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let rest = bytes.strip_prefix(MAGIC)?;
        let mut r = Reader(rest);
        if r.u32()? != 1 {
            return None;
        }
        let public_key = r.string()?.to_vec();
        let namespace = r.string()?.to_vec();
        let reserved = r.string()?.to_vec();
        let hash_algorithm = r.string()?.to_vec();
        let mut sig = Reader(r.string()?);
        if !r.0.is_empty() || sig.string()? != ED25519.as_bytes() {
            return None;
        }
        let signature: [u8; 64] = sig.string()?.try_into().ok()?;
        sig.0.is_empty().then_some(SshSig {
            public_key,
            namespace,
            reserved,
            hash_algorithm,
            signature,
        })
    }

    /// What the key signed for a message whose hash is `digest`:
    /// `"SSHSIG" || string namespace || string reserved || string hash_algorithm ||
    /// string digest`.
    pub fn signed_data(&self, digest: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        put_string(&mut out, &self.namespace);
        put_string(&mut out, &self.reserved);
        put_string(&mut out, &self.hash_algorithm);
        put_string(&mut out, digest);
        out
    }

    /// The binary form (the tests sign with it; the agent side gets it from `ssh-keygen`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&1u32.to_be_bytes());
        put_string(&mut out, &self.public_key);
        put_string(&mut out, &self.namespace);
        put_string(&mut out, &self.reserved);
        put_string(&mut out, &self.hash_algorithm);
        let mut sig = Vec::new();
        put_string(&mut sig, ED25519.as_bytes());
        put_string(&mut sig, &self.signature);
        put_string(&mut out, &sig);
        out
    }

    /// The armoured form.
    pub fn to_armored(&self) -> String {
        let encoded = STANDARD.encode(self.to_bytes());
        let lines: Vec<&str> = encoded
            .as_bytes()
            .chunks(70)
            .filter_map(|c| std::str::from_utf8(c).ok())
            .collect();
        format!("{BEGIN}\n{}\n{END}\n", lines.join("\n"))
    }
}

/// A cursor over SSH wire data.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn u32(&mut self) -> Option<u32> {
        let (head, rest) = self.0.split_first_chunk::<4>()?;
        self.0 = rest;
        Some(u32::from_be_bytes(*head))
    }

    fn string(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.u32()?).ok()?;
        let (s, rest) = self.0.split_at_checked(len)?;
        self.0 = rest;
        Some(s)
    }
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    // Every string here is far below 4 GiB (bounded inputs).
    out.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(s);
}
