//! Streaming raw-deflate decoding of one ZIP member through caller-owned buffers.
//!
//! A deflated member is `comp_len` bytes of raw deflate (RFC 1951) that must inflate to exactly
//! the `size` bytes the central directory declares, whose CRC-32 must be the central
//! directory's. [`Inflater`] keeps the decoder state (about 40 KiB: the 32 KiB window plus
//! tables) and positions, and never allocates output: every byte is written into a slice the
//! caller owns, so memory stays bounded whatever the member claims to hold.
//!
//! See: <https://www.rfc-editor.org/rfc/rfc1951> and APPNOTE.TXT §4.4.

use flate2::{Decompress, FlushDecompress, Status};

/// Why a member could not be inflated as declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InflateError {
    /// The compressed bytes are not valid deflate.
    Corrupt(String),
    /// The stream ends (or its compressed bytes run out) before the declared size.
    Short { produced: u64 },
    /// The stream holds more than the declared size.
    Long { declared: u64 },
    /// The CRC-32 of the inflated bytes is not the central directory's.
    Crc { expected: u32, found: u32 },
}

impl std::fmt::Display for InflateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InflateError::Corrupt(e) => write!(f, "corrupt deflate data: {e}"),
            InflateError::Short { produced } => write!(
                f,
                "the compressed data ends after {produced} uncompressed bytes, before the \
                 member's declared size (truncated or size mismatch)"
            ),
            InflateError::Long { declared } => write!(
                f,
                "the compressed data inflates to more than the member's declared size of \
                 {declared} bytes"
            ),
            InflateError::Crc { expected, found } => write!(
                f,
                "CRC-32 mismatch: the central directory says {expected:08x}, the data gives \
                 {found:08x}"
            ),
        }
    }
}

/// The state of one pass over a deflated member.
pub(crate) struct Inflater {
    z: Decompress,
    /// Compressed bytes consumed.
    in_pos: usize,
    /// Uncompressed bytes produced (from the member start).
    out: u64,
    ended: bool,
    crc: crc32fast::Hasher,
}

impl Inflater {
    /// A decoder at the start of a member.
    pub(crate) fn new() -> Self {
        Inflater {
            z: Decompress::new(false),
            in_pos: 0,
            out: 0,
            ended: false,
            crc: crc32fast::Hasher::new(),
        }
    }

    /// Uncompressed bytes produced so far.
    pub(crate) fn position(&self) -> u64 {
        self.out
    }

    /// Compressed bytes consumed so far.
    pub(crate) fn consumed(&self) -> u64 {
        self.in_pos as u64
    }

    /// Fills all of `dst` with the next uncompressed bytes of the member whose compressed bytes
    /// are `comp`.
    pub(crate) fn fill(&mut self, comp: &[u8], dst: &mut [u8]) -> Result<(), InflateError> {
        let mut filled = 0usize;
        while filled < dst.len() {
            if self.ended {
                return Err(InflateError::Short { produced: self.out });
            }
            let input = comp.get(self.in_pos..).unwrap_or(&[]);
            let (in0, out0) = (self.z.total_in(), self.z.total_out());
            let status = self
                .z
                .decompress(input, &mut dst[filled..], FlushDecompress::None)
                .map_err(|e| InflateError::Corrupt(e.to_string()))?;
            let consumed = (self.z.total_in() - in0) as usize;
            let produced = (self.z.total_out() - out0) as usize;
            self.crc.update(&dst[filled..filled + produced]);
            self.in_pos += consumed;
            self.out += produced as u64;
            filled += produced;
            match status {
                Status::StreamEnd => self.ended = true,
                Status::Ok | Status::BufError => {
                    if consumed == 0 && produced == 0 {
                        return Err(InflateError::Short { produced: self.out });
                    }
                }
            }
        }
        Ok(())
    }

    /// Discards the next `n` uncompressed bytes, inflating through `scratch`.
    pub(crate) fn skip(
        &mut self,
        comp: &[u8],
        mut n: u64,
        scratch: &mut [u8],
    ) -> Result<(), InflateError> {
        while n > 0 {
            let k = scratch.len().min(usize::try_from(n).unwrap_or(usize::MAX));
            self.fill(comp, &mut scratch[..k])?;
            n -= k as u64;
        }
        Ok(())
    }

    /// Called once `size` bytes were produced: the stream must end here and its CRC-32 match.
    pub(crate) fn finish(&mut self, comp: &[u8], size: u64, crc: u32) -> Result<(), InflateError> {
        if !self.ended {
            let mut probe = [0u8; 1];
            let input = comp.get(self.in_pos..).unwrap_or(&[]);
            let out0 = self.z.total_out();
            let status = self
                .z
                .decompress(input, &mut probe, FlushDecompress::None)
                .map_err(|e| InflateError::Corrupt(e.to_string()))?;
            if self.z.total_out() != out0 {
                return Err(InflateError::Long { declared: size });
            }
            if status != Status::StreamEnd {
                return Err(InflateError::Corrupt(
                    "the deflate stream does not end after the declared size".into(),
                ));
            }
            self.ended = true;
        }
        let found = self.crc.clone().finalize();
        if found != crc {
            return Err(InflateError::Crc {
                expected: crc,
                found,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{Compress, Compression, FlushCompress};

    fn deflate(data: &[u8]) -> Vec<u8> {
        let mut c = Compress::new(Compression::default(), false);
        let mut out = Vec::with_capacity(data.len() + 64);
        c.compress_vec(data, &mut out, FlushCompress::Finish)
            .unwrap();
        out
    }

    #[test]
    fn streams_skips_and_checks_the_end() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let comp = deflate(&data);
        let crc = crc32fast::hash(&data);
        let mut z = Inflater::new();
        let mut scratch = [0u8; 7];
        z.skip(&comp, 1234, &mut scratch).unwrap();
        let mut buf = vec![0u8; 10_000 - 1234];
        z.fill(&comp, &mut buf).unwrap();
        assert_eq!(buf, data[1234..]);
        z.finish(&comp, 10_000, crc).unwrap();

        let mut z = Inflater::new();
        let mut buf = vec![0u8; 9_999];
        z.fill(&comp, &mut buf).unwrap();
        assert_eq!(
            z.finish(&comp, 9_999, crc),
            Err(InflateError::Long { declared: 9_999 })
        );

        let mut z = Inflater::new();
        let mut buf = vec![0u8; 10_001];
        assert!(matches!(
            z.fill(&comp, &mut buf),
            Err(InflateError::Short { .. })
        ));
        let mut z = Inflater::new();
        let mut buf = vec![0u8; 10_000];
        assert!(z.fill(&comp[..comp.len() / 2], &mut buf).is_err());
        let mut z = Inflater::new();
        z.fill(&comp, &mut buf).unwrap();
        assert!(matches!(
            z.finish(&comp, 10_000, crc ^ 1),
            Err(InflateError::Crc { .. })
        ));
    }
}
