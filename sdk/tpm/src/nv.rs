//! Certificates as TPM NV indices hold them.
//!
//! A manufacturer sizes an EK certificate's NV index before it knows the certificate, so real
//! TPMs return the DER followed by fill (STMicro's ST33 pads a 1,169-byte certificate with 431
//! bytes of 0xFF). Readers cut at the DER length (go-attestation and Keylime do the same);
//! anything after the certificate other than uniform 0xFF or 0x00 fill is refused, so a
//! certificate with bytes appended is still not a certificate.

/// The certificate at the start of `nv` (a DER SEQUENCE with a definite length), without the
/// index's fill; `None` when `nv` does not start with one, or when what follows it is not all
/// 0xFF or all 0x00.
pub fn nv_certificate(nv: &[u8]) -> Option<&[u8]> {
    let len = der_len(nv)?;
    let (cert, fill) = nv.split_at_checked(len)?;
    let uniform = |byte: u8| fill.iter().all(|b| *b == byte);
    (uniform(0xff) || uniform(0x00)).then_some(cert)
}

/// Every certificate in `nv`, back to back (the TCG EK credential profile's chain indices,
/// from 0x01c00100, hold DER certificates concatenated), each cut at its DER length; the fill
/// after the last is dropped as in [`nv_certificate`]. `None` when something in between is
/// not a certificate, or more than `max` are there.
pub fn nv_certificates(mut nv: &[u8], max: usize) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    while let Some(&first) = nv.first() {
        if first != 0x30 {
            let uniform = |byte: u8| nv.iter().all(|b| *b == byte);
            if uniform(0xff) || uniform(0x00) {
                break;
            }
            return None;
        }
        if out.len() == max {
            return None;
        }
        let len = der_len(nv)?;
        let (cert, rest) = nv.split_at_checked(len)?;
        out.push(cert);
        nv = rest;
    }
    Some(out)
}

/// The total length (header included) of the DER SEQUENCE at the start of `input`.
fn der_len(input: &[u8]) -> Option<usize> {
    let (&tag, rest) = input.split_first()?;
    if tag != 0x30 {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (content, header) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let count = usize::from(first & 0x7f);
        // 0x80 is BER's indefinite length; a certificate needs at most 4 length bytes.
        if count == 0 || count > 4 {
            return None;
        }
        let bytes = rest.get(..count)?;
        let len = bytes
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, 2 + count)
    };
    let total = header.checked_add(content)?;
    (total <= input.len()).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(len: usize) -> Vec<u8> {
        let mut v = vec![0x30];
        if len < 0x80 {
            v.push(len as u8);
        } else {
            v.extend([0x82, (len >> 8) as u8, len as u8]);
        }
        v.extend(std::iter::repeat_n(0x5a, len));
        v
    }

    #[test]
    fn fill_is_cut_and_anything_else_refused() {
        let cert = seq(300);
        assert_eq!(nv_certificate(&cert), Some(cert.as_slice()));
        for fill in [0xffu8, 0x00] {
            let mut nv = cert.clone();
            nv.extend([fill; 100]);
            assert_eq!(nv_certificate(&nv), Some(cert.as_slice()));
        }
        let mut appended = cert.clone();
        appended.extend([0xff, 0xff, 0x01, 0xff]);
        assert_eq!(nv_certificate(&appended), None);
        assert_eq!(nv_certificate(&cert[..cert.len() - 1]), None);
        assert_eq!(nv_certificate(&[]), None);
        assert_eq!(nv_certificate(&[0x30, 0x80, 0, 0]), None);
        assert_eq!(nv_certificate(&[0x31, 0x00]), None);
        assert_eq!(nv_certificate(&[0x30, 0x85, 1, 1, 1, 1, 1]), None);
    }

    #[test]
    fn concatenated_chains() {
        let (a, b) = (seq(10), seq(200));
        let mut nv = a.clone();
        nv.extend(&b);
        nv.extend([0xff; 7]);
        assert_eq!(
            nv_certificates(&nv, 4),
            Some(vec![a.as_slice(), b.as_slice()])
        );
        assert_eq!(nv_certificates(&nv, 1), None);
        assert_eq!(nv_certificates(&[0xff; 3], 4), Some(vec![]));
        let mut junk = a.clone();
        junk.extend([0x01, 0x02]);
        assert_eq!(nv_certificates(&junk, 4), None);
    }
}
