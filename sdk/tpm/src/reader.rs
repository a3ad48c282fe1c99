//! A bounded big-endian cursor: every read checks the remaining length, so parsing a
//! truncated or oversized structure is an error, never a panic.

use crate::TpmError;

/// A cursor over untrusted bytes.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    pub(crate) fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], TpmError> {
        if n > self.buf.len() {
            return Err(TpmError::Malformed(what));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], TpmError> {
        let (head, tail) = self
            .buf
            .split_first_chunk::<N>()
            .ok_or(TpmError::Malformed(what))?;
        self.buf = tail;
        Ok(*head)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, TpmError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, TpmError> {
        self.array::<2>(what).map(u16::from_be_bytes)
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, TpmError> {
        self.array::<4>(what).map(u32::from_be_bytes)
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, TpmError> {
        self.array::<8>(what).map(u64::from_be_bytes)
    }

    /// A TPM2B: a 16-bit size then that many bytes, at most `max`.
    pub(crate) fn tpm2b(&mut self, max: usize, what: &'static str) -> Result<&'a [u8], TpmError> {
        let size = usize::from(self.u16(what)?);
        if size > max {
            return Err(TpmError::Malformed(what));
        }
        self.bytes(size, what)
    }

    /// Succeeds only when every byte was read: a structure with trailing bytes is not the
    /// structure (and its name would not be the hash of what was parsed).
    pub(crate) fn finish(&self, what: &'static str) -> Result<(), TpmError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(TpmError::Malformed(what))
        }
    }
}
