//! Compressed streams and archives inside a scanned file, opened the way the loaders that
//! unpickle through them open them, so that a pickle is never "not a pickle" for being wrapped.
//!
//! Who unpickles through what: joblib (`joblib.load`: zlib, gzip, bz2, xz, lzma-alone, lz4 and
//! its old `ZF` zlib format, told by magic bytes), pandas (`read_pickle`: gzip, bz2, xz/lzma,
//! zstd, a ZIP or tar holding one member), `pickle.load` over Python's `gzip`/`bz2`/`lzma`
//! modules (gzip members read back to back, xz streams back to back), and numpy/torch over
//! whatever those hand them. Every stream is decoded into an unlinked temp file, never into
//! memory whole, within one [`Budget`] per scanned file: bytes unpacked over all layers, the
//! ratio of unpacked to packed bytes past the first 64 MiB, and the nesting depth. A stream
//! that cannot be decoded to its end keeps what was decoded (which is audited) and says where
//! it broke, so a payload behind a corrupt tail is still found and the verdict still fails.
//!
//! See: RFC 1950–1952 (zlib, deflate, gzip); the .xz file format 1.2.1; RFC 8878 (zstd); the
//! LZ4 frame format 1.6.4; POSIX.1-2017 `pax` (ustar); joblib `numpy_pickle_utils.py`.

use std::io::{Read, Seek, Write};
use std::sync::Arc;

use memmap2::Mmap;
use weightport_core::Limits;

/// Unpacked bytes below which the ratio is not checked: small streams cannot exhaust anything.
const RATIO_GRACE: u64 = 64 << 20;

/// A compression codec a loader decodes before unpickling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Codec {
    /// gzip (RFC 1952), members read back to back as Python's `gzip` module does.
    Gzip,
    /// A zlib stream (RFC 1950): joblib's `.z` compressor.
    Zlib,
    /// bzip2, streams read back to back.
    Bzip2,
    /// xz, streams read back to back.
    Xz,
    /// The legacy `.lzma` ("alone") format: joblib's `lzma` compressor.
    LzmaAlone,
    /// Zstandard frames (pandas' `.zst`).
    Zstd,
    /// LZ4 frames (joblib's `lz4` compressor).
    Lz4,
    /// joblib < 0.10's `ZF` file: a 19-byte hexadecimal length, then a zlib stream.
    JoblibZfile,
}

impl Codec {
    /// The name shown in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Codec::Gzip => "gzip",
            Codec::Zlib => "zlib",
            Codec::Bzip2 => "bzip2",
            Codec::Xz => "xz",
            Codec::LzmaAlone => "lzma",
            Codec::Zstd => "zstd",
            Codec::Lz4 => "lz4",
            Codec::JoblibZfile => "joblib zlib (ZF)",
        }
    }

    /// A decoder of `src` through this codec.
    fn reader<'a>(self, src: &'a [u8]) -> std::io::Result<Box<dyn Read + 'a>> {
        Ok(match self {
            Codec::Gzip => Box::new(flate2::read::MultiGzDecoder::new(src)),
            Codec::Zlib => Box::new(flate2::read::ZlibDecoder::new(src)),
            Codec::JoblibZfile => Box::new(flate2::read::ZlibDecoder::new(zfile_body(src))),
            Codec::Bzip2 => Box::new(bzip2::read::MultiBzDecoder::new(src)),
            Codec::Xz => Box::new(lzma_rust2::XzReader::new(src, true)),
            Codec::LzmaAlone => {
                Box::new(lzma_rust2::LzmaReader::new_mem_limit(src, u32::MAX, None)?)
            }
            Codec::Zstd => Box::new(ZstdFrames::new(src)),
            Codec::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(src)),
        })
    }
}

/// What the first bytes of a blob say wraps its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wrapping {
    /// A compressed stream.
    Stream(Codec),
    /// A tar archive (pandas reads its member, torch's legacy format is one).
    Tar,
    /// An archive or compression format weightport does not read: the scan fails closed.
    Unreadable(&'static str),
}

/// The wrapping `head` (a blob's first bytes, at least 512 when the blob has them) starts
/// with, if any. Magic bytes first, in joblib's order; the legacy `.lzma` header, which has no
/// magic, only where it is exactly what liblzma's format detection accepts.
pub(crate) fn wrapping(head: &[u8]) -> Option<Wrapping> {
    let starts = |m: &[u8]| head.starts_with(m);
    let codec = if starts(b"ZF") && zfile_length(head).is_some() {
        Codec::JoblibZfile
    } else if starts(b"\x1f\x8b") {
        Codec::Gzip
    } else if starts(b"BZh") && head.get(3).is_some_and(|b| (b'1'..=b'9').contains(b)) {
        Codec::Bzip2
    } else if starts(b"\xfd7zXZ\x00") {
        Codec::Xz
    } else if starts(b"\x28\xb5\x2f\xfd") || is_zstd_skippable(head) {
        Codec::Zstd
    } else if starts(b"\x04\x22\x4d\x18") {
        Codec::Lz4
    } else if is_zlib_header(head) {
        Codec::Zlib
    } else if is_lzma_alone_header(head) {
        Codec::LzmaAlone
    } else {
        return unreadable(head).or_else(|| is_tar(head).then_some(Wrapping::Tar));
    };
    Some(Wrapping::Stream(codec))
}

/// Archive and compression formats a loader could unpack but weightport cannot: named, so
/// the scan can say why it fails.
fn unreadable(head: &[u8]) -> Option<Wrapping> {
    const KNOWN: &[(&[u8], &str)] = &[
        (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
        (b"Rar!\x1a\x07", "a RAR archive"),
        (b"MSCF\x00\x00\x00\x00", "a Microsoft cabinet archive"),
        (b"!<arch>\n", "an ar archive"),
        (b"\x02\x21\x4c\x18", "a legacy LZ4 stream"),
        (b"LZIP", "an lzip stream"),
        (b"\x89LZO\x00\r\n\x1a\n", "an lzop stream"),
        (b"\xff\x06\x00\x00sNaPpY", "a snappy framed stream"),
        (b"\x1f\x9d", "a compress (.Z) stream"),
        (b"\x1f\xa0", "a compress (.Z, LZH) stream"),
        (b"070707", "a cpio archive"),
        (b"070701", "a cpio archive"),
        (b"070702", "a cpio archive"),
        (b"xar!", "a xar archive"),
    ];
    KNOWN
        .iter()
        .find(|(m, _)| head.starts_with(m))
        .map(|(_, what)| Wrapping::Unreadable(what))
}

/// A zlib header: deflate with a window of at most 32 KiB, no preset dictionary, and the
/// header checksum RFC 1950 requires (joblib matches the first byte, 0x78, and zlib then
/// refuses anything else).
fn is_zlib_header(head: &[u8]) -> bool {
    match head {
        [cmf @ 0x78, flg, ..] => {
            flg & 0x20 == 0 && (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0
        }
        _ => false,
    }
}

/// The legacy `.lzma` header as liblzma's automatic detection takes it (Python's
/// `lzma.open`, pandas): properties byte ≤ 224, a dictionary size of 2^n or 2^n + 2^(n-1),
/// and an uncompressed size either unknown (all ones) or below 2^38.
fn is_lzma_alone_header(head: &[u8]) -> bool {
    let Some(h) = head.get(..13) else {
        return false;
    };
    let dict = u32::from_le_bytes([h[1], h[2], h[3], h[4]]);
    let size = u64::from_le_bytes([h[5], h[6], h[7], h[8], h[9], h[10], h[11], h[12]]);
    let dict_ok = dict != 0 && {
        let top = 1u32 << (31 - dict.leading_zeros());
        dict == top || (top > 1 && dict == top + top / 2)
    };
    h[0] <= 224 && dict_ok && (size == u64::MAX || size < 1 << 38)
}

fn is_zstd_skippable(head: &[u8]) -> bool {
    head.len() >= 4 && head[0] & 0xf0 == 0x50 && head[1..4] == [0x2a, 0x4d, 0x18]
}

/// The length joblib's `ZF` header states, when it is one (`ZF` then `0x…` hexadecimal,
/// space-padded to 19 bytes).
fn zfile_length(head: &[u8]) -> Option<u64> {
    let field = std::str::from_utf8(head.get(2..21)?).ok()?.trim_end();
    let digits = field.strip_prefix("0x")?.trim_end_matches('L');
    u64::from_str_radix(digits, 16).ok()
}

/// The zlib stream of a `ZF` file: after the 21-byte header and the optional space of
/// joblib ≤ 0.8.4 (a zlib stream never starts with a space).
fn zfile_body(src: &[u8]) -> &[u8] {
    let body = src.get(21..).unwrap_or(&[]);
    body.strip_prefix(b" ").unwrap_or(body)
}

/// A tar header block: its checksum field holds the sum of its bytes (the field counted as
/// spaces), unsigned or signed, as Python's `tarfile` accepts it; with or without the ustar
/// magic (v7 archives have none).
pub(crate) fn is_tar(head: &[u8]) -> bool {
    let Some(block) = head.get(..512) else {
        return false;
    };
    if block.iter().all(|&b| b == 0) {
        return false;
    }
    let field = &block[148..156];
    let text: String = field
        .iter()
        .take_while(|&&b| b != 0 && b != b' ')
        .map(|&b| b as char)
        .collect();
    let Ok(stated) = i64::from_str_radix(text.trim_start(), 8) else {
        return false;
    };
    let unsigned: i64 = block
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                32
            } else {
                i64::from(b)
            }
        })
        .sum();
    let signed: i64 = block
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                32
            } else {
                i64::from(b as i8)
            }
        })
        .sum();
    stated == unsigned || stated == signed
}

/// Zstandard frames back to back (skippable frames skipped), as `zstandard`'s stream reader
/// with `read_across_frames` does.
struct ZstdFrames<'a> {
    src: &'a [u8],
    frame: Option<ruzstd::decoding::StreamingDecoder<&'a [u8], ruzstd::decoding::FrameDecoder>>,
}

impl<'a> ZstdFrames<'a> {
    fn new(src: &'a [u8]) -> Self {
        ZstdFrames { src, frame: None }
    }
}

impl Read for ZstdFrames<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if let Some(f) = &mut self.frame {
                let n = f.read(buf)?;
                if n > 0 || buf.is_empty() {
                    return Ok(n);
                }
                self.src = f.get_ref();
                self.frame = None;
            }
            if self.src.is_empty() {
                return Ok(0);
            }
            let f = ruzstd::decoding::StreamingDecoder::new(self.src)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            self.frame = Some(f);
        }
    }
}

/// How much a scanned file may unpack, shared by every layer inside it.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    /// Bytes that may still be unpacked.
    left: u64,
    /// Cap of the unpacked-to-packed ratio past [`RATIO_GRACE`].
    ratio: u64,
    /// Layers that may still be opened.
    pub(crate) depth_left: usize,
}

impl Budget {
    pub(crate) fn new(limits: &Limits) -> Self {
        Budget {
            left: limits.max_unpacked_bytes,
            ratio: limits.max_unpack_ratio,
            depth_left: limits.max_unpack_depth,
        }
    }
}

/// Bytes unpacked into an unlinked temp file and mapped (`None` when there are none).
pub(crate) struct Unpacked {
    pub(crate) map: Option<Arc<Mmap>>,
    pub(crate) len: u64,
    /// Why the stream stopped before its end (the bytes before are in `map`).
    pub(crate) broken: Option<String>,
    /// True when a cap of the [`Budget`] stopped it (not a corrupt stream).
    pub(crate) capped: bool,
}

/// Decodes `src` through `codec` into a temp file within `budget`. `Err` only when no temp
/// file can be made or written (the scan then cannot vouch for the blob).
pub(crate) fn decode(codec: Codec, src: &[u8], budget: &mut Budget) -> Result<Unpacked, String> {
    match codec.reader(src) {
        Ok(r) => spool(r, src.len() as u64, budget),
        Err(e) => Ok(Unpacked {
            map: None,
            len: 0,
            broken: Some(format!("not a readable {} stream: {e}", codec.name())),
            capped: false,
        }),
    }
}

/// Copies `r` into an unlinked temp file, stopping at the budget.
pub(crate) fn spool(
    mut r: impl Read,
    packed: u64,
    budget: &mut Budget,
) -> Result<Unpacked, String> {
    let mut file = tempfile::tempfile().map_err(|e| format!("cannot create a temp file: {e}"))?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut len, mut broken, mut capped) = (0u64, None, false);
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                broken = Some(format!("the stream is corrupt after {len} bytes: {e}"));
                break;
            }
        };
        if let Some(why) = budget.take(n as u64, len, packed) {
            (broken, capped) = (Some(why), true);
            break;
        }
        file.write_all(&buf[..n])
            .map_err(|e| format!("cannot write the unpacked bytes to a temp file: {e}"))?;
        len += n as u64;
    }
    let map = map_spooled(&mut file, len)?;
    Ok(Unpacked {
        map,
        len,
        broken,
        capped,
    })
}

impl Budget {
    /// Takes `n` more unpacked bytes of a stream that has produced `so_far` from `packed`;
    /// the reason when a cap refuses them.
    fn take(&mut self, n: u64, so_far: u64, packed: u64) -> Option<String> {
        let after = so_far + n;
        if n > self.left {
            return Some(format!(
                "unpacking stopped at {so_far} bytes: the scan's cap on bytes unpacked from one \
                 file (Limits::max_unpacked_bytes) is reached"
            ));
        }
        if after > RATIO_GRACE && after / packed.max(1) > self.ratio {
            return Some(format!(
                "unpacking stopped at {so_far} bytes from {packed} packed bytes: a ratio over \
                 {}:1 (Limits::max_unpack_ratio), a compression bomb or a very unusual file",
                self.ratio
            ));
        }
        self.left -= n;
        None
    }
}

fn map_spooled(file: &mut std::fs::File, len: u64) -> Result<Option<Arc<Mmap>>, String> {
    if len == 0 {
        return Ok(None);
    }
    file.rewind().map_err(|e| format!("temp file: {e}"))?;
    // SAFETY: the file is an unlinked temp file only this process holds: nothing else can
    // modify or truncate it while it is mapped (the contract of `weightport_core::mapped`).
    let map = unsafe { Mmap::map(&*file) }.map_err(|e| format!("cannot map the temp file: {e}"))?;
    Ok(Some(Arc::new(map)))
}

/// One member of an archive, unpacked (or why not).
pub(crate) struct Member {
    /// Its name in the archive (sanitized for display by the caller).
    pub(crate) name: String,
    pub(crate) body: Result<Unpacked, String>,
}

/// The regular-file members of the tar archive `src`, each unpacked within `budget`; links,
/// devices and directories hold no bytes a loader unpickles and are left out. `Err` when the
/// archive itself cannot be read to its end (members read before it are in the vector).
pub(crate) fn tar_members(src: &[u8], budget: &mut Budget) -> (Vec<Member>, Option<String>) {
    let mut out = Vec::new();
    let mut ar = tar::Archive::new(src);
    let entries = match ar.entries() {
        Ok(e) => e,
        Err(e) => return (out, Some(format!("not a readable tar archive: {e}"))),
    };
    for entry in entries {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                let why = format!("the tar archive breaks after {} members: {e}", out.len());
                return (out, Some(why));
            }
        };
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let size = entry.size();
        let body = spool(entry, size, budget);
        out.push(Member { name, body });
    }
    (out, None)
}

/// The members of the ZIP archive `src` (central-directory order), each inflated within
/// `budget`; a member stored with a method other than stored or deflate cannot be read
/// (`Err` with the reason).
pub(crate) fn zip_members(
    src: &[u8],
    limits: &Limits,
    budget: &mut Budget,
) -> Result<Vec<Member>, String> {
    use weightport_core::archive::{self, Method};
    let view = weightport_core::bytes::InMemory::new("", src);
    let table = archive::entries(&view, limits).map_err(|e| match e {
        archive::TableError::Malformed(m, o) => format!("{m} (byte {o})"),
        archive::TableError::TooMany(n, cap) => format!("{n} entries, over the cap of {cap}"),
        archive::TableError::Read(e) => e.to_string(),
    })?;
    let mut out = Vec::new();
    for e in table.entries.iter().filter(|e| !e.name.ends_with('/')) {
        let data = e
            .data(&view)
            .bytes()
            .expect("checked to lie in the archive");
        let body = match e.method {
            Some(Method::Stored) => spool(data, data.len() as u64, budget),
            Some(Method::Deflated) => spool(flate2::read::DeflateDecoder::new(data), data.len() as u64, budget),
            None => Err("compressed with a method other than stored or deflate, which weightport does not read".into()),
        };
        out.push(Member {
            name: e.name.clone(),
            body,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magics_are_told_apart_from_pickles_and_text() {
        assert_eq!(
            wrapping(b"\x1f\x8b\x08\x00"),
            Some(Wrapping::Stream(Codec::Gzip))
        );
        assert_eq!(wrapping(b"x\x9c\xcb"), Some(Wrapping::Stream(Codec::Zlib)));
        assert_eq!(wrapping(b"xyz is text"), None);
        assert_eq!(
            wrapping(b"BZh91AY&SY"),
            Some(Wrapping::Stream(Codec::Bzip2))
        );
        assert_eq!(wrapping(b"BZhx"), None);
        assert_eq!(wrapping(b"\x80\x02}q\x00(X"), None, "a pickle");
        assert_eq!(
            wrapping(b"7z\xbc\xaf\x27\x1c\x00\x04"),
            Some(Wrapping::Unreadable("a 7-Zip archive"))
        );
        let mut lzma = vec![0x5d, 0, 0, 0x80, 0];
        lzma.extend_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(wrapping(&lzma), Some(Wrapping::Stream(Codec::LzmaAlone)));
        lzma[3] = 0x81; // a dictionary size liblzma's detection refuses
        assert_eq!(wrapping(&lzma), None);
    }

    #[test]
    fn the_budget_stops_a_bomb_and_keeps_what_came_before() {
        // 72 gzip members of 1 MiB of zeros each, read back to back as Python's gzip does.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&vec![0u8; 1 << 20]).unwrap();
        let packed = gz.finish().unwrap().repeat(72);
        let mut b = Budget {
            left: u64::MAX,
            ratio: 10,
            depth_left: 4,
        };
        let u = decode(Codec::Gzip, &packed, &mut b).unwrap();
        assert!(u.broken.unwrap().contains("ratio over 10:1") && u.capped);
        // Stopped at the read that crossed the grace size, every byte before it kept.
        assert!(
            u.len > RATIO_GRACE - (1 << 20) && u.len <= RATIO_GRACE,
            "{}",
            u.len
        );
        let map = u.map.unwrap();
        assert!(map.len() as u64 == u.len && map.iter().all(|&b| b == 0));
        let mut b = Budget {
            left: 1 << 20,
            ratio: u64::MAX,
            depth_left: 4,
        };
        let u = decode(Codec::Gzip, &packed, &mut b).unwrap();
        assert!(u.broken.unwrap().contains("max_unpacked_bytes"));
        assert_eq!(u.len, 1 << 20);
    }
}
