//! The `.npy` header: magic, version, header length, and a strict parser of its dict literal.
//!
//! ```text
//! offset  size  field
//! 0       6     magic  b"\x93NUMPY"
//! 6       1     major version (1, 2 or 3)
//! 7       1     minor version (0)
//! 8       2|4   HLEN: header text length, u16 LE in 1.0, u32 LE in 2.0 and 3.0
//! 10|12   HLEN  header text (latin-1 in 1.0/2.0, UTF-8 in 3.0): a Python dict literal
//!               {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//!               padded with spaces and one final '\n' so the data starts on a multiple of 64
//! 10|12+HLEN    the array data: shape × itemsize bytes, C or Fortran order, in descr's byte order
//! ```
//!
//! See: <https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html>
//!
//! numpy reads the header with `ast.literal_eval`. Nothing here evaluates anything: the parser
//! accepts exactly one dict literal with the three keys `descr` (a string), `fortran_order`
//! (`True`/`False`) and `shape` (a tuple of non-negative decimal integers), in any order, with
//! whitespace and trailing commas where Python allows them. Everything else (other keys,
//! duplicate keys, calls, names, operators, nested expressions, escapes in strings, comments) is
//! rejected. A list `descr` (a structured dtype) is reported as unsupported.
//!
//! The header text is capped at numpy's own `_MAX_HEADER_SIZE` (10,000 characters in numpy 2.4's
//! `numpy/lib/_format_impl.py`, the limit `np.load` enforces unless `allow_pickle=True`). The cap
//! is applied to bytes, before the text is read: every header this parser accepts is ASCII, so
//! bytes and characters coincide for all of them.

use weightport_core::{DType, ReadOptions};

/// The npy magic string.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Largest header text accepted, in bytes: numpy's `_MAX_HEADER_SIZE`.
pub const MAX_HEADER_TEXT: u64 = 10_000;

/// What is wrong with a header (converted into a [`weightport_core::Error`] by the readers,
/// which add the file, member and absolute byte offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderErrorKind {
    /// The bytes break the npy format.
    Malformed(String),
    /// A valid npy header uses something weightport does not handle (a dtype).
    Unsupported(String),
    /// The safety policy refuses the array (an object array: its data is a pickle).
    Refused(String),
    /// A size exceeds a cap.
    Limit {
        /// The quantity.
        what: &'static str,
        /// The value found.
        needed: u64,
        /// The cap.
        limit: u64,
    },
    /// The input ends before the header does; `needed` bytes in all are required.
    Truncated {
        /// Bytes needed from the start of the `.npy`.
        needed: u64,
    },
}

/// A header error and where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderError {
    /// What is wrong.
    pub kind: HeaderErrorKind,
    /// Byte offset from the start of the `.npy` data (the file, or the uncompressed member).
    pub offset: u64,
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            HeaderErrorKind::Malformed(r)
            | HeaderErrorKind::Unsupported(r)
            | HeaderErrorKind::Refused(r) => f.write_str(r),
            HeaderErrorKind::Limit {
                what,
                needed,
                limit,
            } => write!(f, "{what} is {needed}, over the limit of {limit}"),
            HeaderErrorKind::Truncated { needed } => {
                write!(f, "truncated npy header: {needed} bytes needed")
            }
        }
    }
}

fn err(kind: HeaderErrorKind, offset: u64) -> HeaderError {
    HeaderError { kind, offset }
}

fn malformed(offset: u64, reason: impl Into<String>) -> HeaderError {
    err(HeaderErrorKind::Malformed(reason.into()), offset)
}

/// The fixed-size part of a header: enough to know how many bytes the whole header takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preamble {
    /// Format version (major, minor).
    pub version: (u8, u8),
    /// Offset of the header text (10 or 12).
    pub text_start: u64,
    /// Length of the header text (HLEN).
    pub text_len: u64,
}

impl Preamble {
    /// Offset of the first data byte: `text_start + text_len`.
    pub fn data_offset(&self) -> u64 {
        self.text_start + self.text_len
    }
}

/// Bytes [`preamble`] needs at most.
pub const PREAMBLE_LEN: usize = 12;

/// Parses magic, version and header length from the first bytes of a `.npy`.
pub fn preamble(b: &[u8]) -> Result<Preamble, HeaderError> {
    let magic_len = b.len().min(MAGIC.len());
    if b[..magic_len] != MAGIC[..magic_len] {
        return Err(malformed(
            0,
            "not an npy array: the magic string \\x93NUMPY is missing",
        ));
    }
    if b.len() < 8 {
        return Err(err(
            HeaderErrorKind::Truncated { needed: 10 },
            b.len() as u64,
        ));
    }
    let version = (b[6], b[7]);
    let (text_start, len_bytes) = match version {
        (1, 0) => (10u64, 2usize),
        (2, 0) | (3, 0) => (12, 4),
        (major, minor) => {
            return Err(err(
                HeaderErrorKind::Unsupported(format!(
                    "npy format version {major}.{minor} (known: 1.0, 2.0, 3.0)"
                )),
                6,
            ))
        }
    };
    if b.len() < text_start as usize {
        return Err(err(
            HeaderErrorKind::Truncated { needed: text_start },
            b.len() as u64,
        ));
    }
    let mut n = 0u64;
    for (i, &byte) in b[8..8 + len_bytes].iter().enumerate() {
        n |= u64::from(byte) << (8 * i);
    }
    if n > MAX_HEADER_TEXT {
        return Err(err(
            HeaderErrorKind::Limit {
                what: "npy header length (numpy's own limit)",
                needed: n,
                limit: MAX_HEADER_TEXT,
            },
            8,
        ));
    }
    Ok(Preamble {
        version,
        text_start,
        text_len: n,
    })
}

/// How the stored elements relate to the logical (little-endian) ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    /// Stored little-endian (or single bytes): no change.
    Little,
    /// Stored big-endian: every `unit`-byte component is reversed (a complex number's two
    /// floats are swapped separately, so `unit` may be smaller than the item size).
    Big {
        /// Bytes per swapped component.
        unit: usize,
    },
}

/// A parsed, validated npy header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// Format version.
    pub version: (u8, u8),
    /// The `descr` string as written (`<f4`, `>i8`, `<V2`, …).
    pub descr: String,
    /// The element type of the logical bytes.
    pub dtype: DType,
    /// Byte order of the stored data.
    pub order: ByteOrder,
    /// True when the data is stored column-major.
    pub fortran_order: bool,
    /// Dimensions (empty for a scalar).
    pub shape: Vec<u64>,
    /// Offset of the first data byte from the start of the `.npy`.
    pub data_offset: u64,
    /// Data length: shape product × item size (checked).
    pub byte_len: u64,
}

impl NpyHeader {
    /// Bytes per element.
    pub fn item_size(&self) -> u64 {
        u64::from(self.dtype.elem_bytes().unwrap_or(1))
    }

    /// True when the stored bytes are already the logical little-endian row-major bytes: the
    /// data is little-endian and either C-ordered or laid out identically in both orders (at
    /// most one dimension larger than 1).
    pub fn is_identity(&self) -> bool {
        self.order == ByteOrder::Little && !self.needs_transpose()
    }

    /// True when Fortran order actually differs from C order for this shape.
    pub fn needs_transpose(&self) -> bool {
        self.fortran_order && self.byte_len > 0 && self.shape.iter().filter(|&&d| d > 1).count() > 1
    }
}

/// Parses a whole header from the start of a `.npy` (`b` may continue with data).
pub fn parse(b: &[u8], opts: &ReadOptions) -> Result<NpyHeader, HeaderError> {
    let pre = preamble(b)?;
    let end = pre.data_offset();
    if (b.len() as u64) < end {
        return Err(err(
            HeaderErrorKind::Truncated { needed: end },
            b.len() as u64,
        ));
    }
    let text = &b[pre.text_start as usize..end as usize];
    let dict = Parser {
        s: text,
        i: 0,
        base: pre.text_start,
        python2_longs: pre.version.0 <= 2,
        max_rank: opts.limits.max_rank,
    }
    .dict()?;
    let (dtype, order) = map_descr(&dict.descr, opts).map_err(|k| err(k, dict.descr_at))?;
    let byte_len = dtype.byte_len(&dict.shape).map_err(|_| {
        malformed(
            dict.shape_at,
            format!(
                "shape {:?} × {}-byte items overflows 64 bits",
                dict.shape,
                dtype.elem_bytes().unwrap_or(1)
            ),
        )
    })?;
    Ok(NpyHeader {
        version: pre.version,
        descr: dict.descr,
        dtype,
        order,
        fortran_order: dict.fortran_order,
        shape: dict.shape,
        data_offset: end,
        byte_len,
    })
}

/// Maps a `descr` string to a dtype and byte order.
pub fn map_descr(d: &str, opts: &ReadOptions) -> Result<(DType, ByteOrder), HeaderErrorKind> {
    let unsupported = |what: String| Err(HeaderErrorKind::Unsupported(what));
    let b = d.as_bytes();
    let (order, rest) = match b.first() {
        Some(&c @ (b'<' | b'>' | b'|' | b'=')) => (c, &d[1..]),
        _ => return unsupported(format!("unsupported dtype '{d}' (not a numpy type string)")),
    };
    let mut chars = rest.chars();
    let kind = chars.next().unwrap_or(' ');
    let size_str = chars.as_str();
    if kind == 'O' {
        return Err(HeaderErrorKind::Refused(format!(
            "object array (dtype '{d}'): its data is a pickle of Python objects, which weightport \
             never loads"
        )));
    }
    let size: Option<u32> = if !size_str.is_empty()
        && size_str.len() <= 4
        && size_str.bytes().all(|c| c.is_ascii_digit())
    {
        size_str.parse().ok()
    } else {
        None
    };
    let Some(size) = size else {
        return unsupported(format!("unsupported dtype '{d}'"));
    };
    let (dtype, unit) = match (kind, size) {
        ('b', 1) => (DType::BOOL, 1),
        ('i', 1) => (DType::I8, 1),
        ('u', 1) => (DType::U8, 1),
        ('i', 2) => (DType::I16, 2),
        ('u', 2) => (DType::U16, 2),
        ('i', 4) => (DType::I32, 4),
        ('u', 4) => (DType::U32, 4),
        ('i', 8) => (DType::I64, 8),
        ('u', 8) => (DType::U64, 8),
        ('f', 2) => (DType::F16, 2),
        ('f', 4) => (DType::F32, 4),
        ('f', 8) => (DType::F64, 8),
        ('c', 8) => (DType::C64, 4),
        ('c', 16) => {
            return unsupported(format!(
                "unsupported dtype '{d}' (complex128): weightport has no complex128 type"
            ))
        }
        ('V', 2) if opts.void2_as_bf16 => (DType::BF16, 2),
        ('V', 2) => {
            return unsupported(format!(
                "unsupported dtype '{d}': an opaque 2-byte void type; if this is an ml_dtypes/JAX \
                 bfloat16 array, read it with `{} bf16`",
                weightport_core::Knob::Void2As
            ))
        }
        ('V', n) => {
            return unsupported(format!(
                "unsupported dtype '{d}': an opaque {n}-byte void type (structured or ml_dtypes \
                 data weightport cannot interpret)"
            ))
        }
        _ => return unsupported(format!("unsupported dtype '{d}'")),
    };
    let order = match order {
        _ if unit == 1 => ByteOrder::Little,
        b'<' => ByteOrder::Little,
        b'>' => ByteOrder::Big { unit },
        // numpy writes void dtypes with '|'; the bytes are taken as they are.
        b'|' if kind == 'V' => ByteOrder::Little,
        c => {
            return unsupported(format!(
                "unsupported dtype '{d}': byte order '{}' on a multi-byte type says neither little \
                 nor big endian",
                c as char
            ))
        }
    };
    Ok((dtype, order))
}

struct Dict {
    descr: String,
    descr_at: u64,
    fortran_order: bool,
    shape: Vec<u64>,
    shape_at: u64,
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    base: u64,
    python2_longs: bool,
    max_rank: usize,
}

impl Parser<'_> {
    fn at(&self) -> u64 {
        self.base + self.i as u64
    }

    fn fail(&self, reason: impl Into<String>) -> HeaderError {
        let mut r = String::from("npy header is not the dict literal numpy writes: ");
        r.push_str(&reason.into());
        malformed(self.at(), r)
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r' | 0x0c)) {
            self.i += 1;
        }
    }

    fn describe(&self) -> String {
        match self.peek() {
            None => "the end of the header".into(),
            Some(c) if c.is_ascii_graphic() => format!("'{}'", c as char),
            Some(c) => format!("byte 0x{c:02x}"),
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), HeaderError> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.fail(format!(
                "expected '{}', found {}",
                c as char,
                self.describe()
            )))
        }
    }

    fn string(&mut self) -> Result<&str, HeaderError> {
        let q = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(self.fail(format!("expected a string, found {}", self.describe()))),
        };
        self.i += 1;
        let start = self.i;
        loop {
            match self.peek() {
                None => return Err(self.fail("unterminated string")),
                Some(c) if c == q => break,
                Some(b'\\') => {
                    return Err(self.fail("escape sequences are not accepted in strings"))
                }
                Some(c) if !(0x20..0x7f).contains(&c) => {
                    return Err(self.fail(format!(
                        "byte 0x{c:02x} in a string (only printable ASCII is accepted)"
                    )))
                }
                Some(_) => self.i += 1,
            }
        }
        let s = &self.s[start..self.i];
        self.i += 1;
        // Printable ASCII only, so this cannot fail.
        std::str::from_utf8(s).map_err(|_| self.fail("string is not ASCII"))
    }

    fn ident(&mut self) -> &[u8] {
        let start = self.i;
        while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == b'_') {
            self.i += 1;
        }
        &self.s[start..self.i]
    }

    fn int(&mut self) -> Result<u64, HeaderError> {
        let start = self.i;
        let mut v: Option<u64> = Some(0);
        while let Some(c @ b'0'..=b'9') = self.peek() {
            v = v
                .and_then(|v| v.checked_mul(10))
                .and_then(|v| v.checked_add(u64::from(c - b'0')));
            self.i += 1;
        }
        let digits = &self.s[start..self.i];
        if digits.is_empty() {
            let what = if self.peek() == Some(b'-') {
                "a negative dimension".to_string()
            } else {
                self.describe()
            };
            self.i = start;
            return Err(self.fail(format!("expected a dimension, found {what}")));
        }
        if digits.len() > 1 && digits[0] == b'0' {
            self.i = start;
            return Err(self.fail("a dimension with a leading zero"));
        }
        // Python 2 wrote long integers with an `L` suffix; numpy still reads them in 1.0/2.0.
        if self.python2_longs && matches!(self.peek(), Some(b'L' | b'l')) {
            self.i += 1;
        }
        if matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == b'_' || c == b'.') {
            return Err(self.fail(format!(
                "expected a decimal dimension, found {}",
                self.describe()
            )));
        }
        v.ok_or_else(|| {
            malformed(
                self.base + start as u64,
                "npy header: a dimension does not fit in 64 bits",
            )
        })
    }

    fn shape(&mut self) -> Result<Vec<u64>, HeaderError> {
        if self.peek() == Some(b'[') {
            return Err(self.fail("shape is a list, not a tuple"));
        }
        self.expect(b'(')?;
        let mut dims = Vec::new();
        self.ws();
        if self.peek() == Some(b')') {
            self.i += 1;
            return Ok(dims);
        }
        loop {
            self.ws();
            let at = self.at();
            let d = self.int()?;
            if dims.len() >= self.max_rank {
                return Err(err(
                    HeaderErrorKind::Limit {
                        what: "rank",
                        needed: dims.len() as u64 + 1,
                        limit: self.max_rank as u64,
                    },
                    at,
                ));
            }
            dims.push(d);
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.i += 1;
                    self.ws();
                    if self.peek() == Some(b')') {
                        self.i += 1;
                        return Ok(dims);
                    }
                }
                Some(b')') if dims.len() > 1 => {
                    self.i += 1;
                    return Ok(dims);
                }
                Some(b')') => {
                    return Err(self.fail("shape `(n)` is a number, not a tuple (write `(n,)`)"))
                }
                _ => {
                    return Err(self.fail(format!(
                        "expected ',' or ')' in shape, found {}",
                        self.describe()
                    )))
                }
            }
        }
    }

    fn dict(&mut self) -> Result<Dict, HeaderError> {
        let mut fields = Fields::default();
        self.ws();
        self.expect(b'{')?;
        loop {
            self.ws();
            if self.peek() == Some(b'}') {
                self.i += 1;
                break;
            }
            self.entry(&mut fields)?;
            self.ws();
            if self.after_value()? {
                break;
            }
        }
        self.ws();
        if self.i != self.s.len() {
            return Err(self.fail(format!("unexpected {} after the dict", self.describe())));
        }
        let missing = |k: &str| malformed(self.base, format!("npy header has no '{k}' key"));
        let (descr, descr_at) = fields.descr.ok_or_else(|| missing("descr"))?;
        let fortran_order = fields.fortran.ok_or_else(|| missing("fortran_order"))?;
        let (shape, shape_at) = fields.shape.ok_or_else(|| missing("shape"))?;
        Ok(Dict {
            descr,
            descr_at,
            fortran_order,
            shape,
            shape_at,
        })
    }

    /// One `'key': value` of the dict into `fields`: only the three keys, each once.
    fn entry(&mut self, fields: &mut Fields) -> Result<(), HeaderError> {
        let key_at = self.at();
        let key = self.string()?.to_string();
        self.ws();
        self.expect(b':')?;
        self.ws();
        let dup = |p: &Self| p.fail(format!("key '{key}' appears twice"));
        match key.as_str() {
            "descr" => {
                if fields.descr.is_some() {
                    return Err(dup(self));
                }
                fields.descr = Some(self.descr()?);
            }
            "fortran_order" => {
                if fields.fortran.is_some() {
                    return Err(dup(self));
                }
                fields.fortran = Some(self.fortran_order()?);
            }
            "shape" => {
                if fields.shape.is_some() {
                    return Err(dup(self));
                }
                let at = self.at();
                fields.shape = Some((self.shape()?, at));
            }
            other => {
                return Err(malformed(
                    key_at,
                    format!(
                        "npy header has an unexpected key '{other}' (only descr, fortran_order, \
                         shape)"
                    ),
                ))
            }
        }
        Ok(())
    }

    /// The `descr` string and where it starts; a list of fields (a structured dtype) is refused.
    fn descr(&mut self) -> Result<(String, u64), HeaderError> {
        let at = self.at();
        if self.peek() == Some(b'[') {
            return Err(err(
                HeaderErrorKind::Unsupported(
                    "unsupported dtype: a structured dtype (descr is a list of fields)".into(),
                ),
                at,
            ));
        }
        Ok((self.string()?.to_string(), at))
    }

    /// `True` or `False`.
    fn fortran_order(&mut self) -> Result<bool, HeaderError> {
        let at = self.i;
        match self.ident() {
            b"True" => Ok(true),
            b"False" => Ok(false),
            _ => {
                self.i = at;
                Err(self.fail(format!(
                    "fortran_order must be True or False, found {}",
                    self.describe()
                )))
            }
        }
    }

    /// After a value: `,` (more may follow: false) or `}` (the end: true).
    fn after_value(&mut self) -> Result<bool, HeaderError> {
        match self.peek() {
            Some(b',') => {
                self.i += 1;
                Ok(false)
            }
            Some(b'}') => {
                self.i += 1;
                Ok(true)
            }
            _ => Err(self.fail(format!(
                "expected ',' or '}}' after a value, found {}",
                self.describe()
            ))),
        }
    }
}

/// The dict's keys as found so far, each with where its value starts where errors need it.
#[derive(Default)]
struct Fields {
    descr: Option<(String, u64)>,
    fortran: Option<bool>,
    shape: Option<(Vec<u64>, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(text: &str) -> Vec<u8> {
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&[1, 0]);
        v.extend_from_slice(&(text.len() as u16).to_le_bytes());
        v.extend_from_slice(text.as_bytes());
        v
    }

    fn ok(text: &str) -> NpyHeader {
        parse(&npy(text), &ReadOptions::default()).unwrap()
    }

    fn kind(text: &str) -> HeaderErrorKind {
        parse(&npy(text), &ReadOptions::default()).unwrap_err().kind
    }

    #[test]
    fn accepts_what_numpy_writes() {
        let h = ok("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }          \n");
        assert_eq!(h.dtype, DType::F32);
        assert_eq!(h.shape, vec![2, 3]);
        assert_eq!(h.byte_len, 24);
        let h = ok("{'descr': '>c8', 'fortran_order': True, 'shape': (), }\n");
        assert_eq!(h.order, ByteOrder::Big { unit: 4 });
        assert!(h.fortran_order);
        assert_eq!(
            ok("{\"shape\":(5,),\"fortran_order\":False,\"descr\":\"|u1\"}").shape,
            [5]
        );
        assert_eq!(
            ok("{'descr':'<i8','fortran_order':False,'shape':(3L, 2L)}").shape,
            [3, 2]
        );
    }

    #[test]
    fn rejects_everything_else() {
        for t in [
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': __import__('os')}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} + 1",
            "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (02,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2.0,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1_0,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': [2]}",
            "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,)}",
            "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
            "{'descr': '<f4', 'shape': (2,)}",
            "{'descr': '<f4',, 'fortran_order': False, 'shape': (2,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} # hi",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
            "",
            "{",
        ] {
            assert!(matches!(kind(t), HeaderErrorKind::Malformed(_)), "{t}");
        }
    }

    #[test]
    fn dtype_policy() {
        let t = |d: &str| format!("{{'descr': '{d}', 'fortran_order': False, 'shape': (1,)}}");
        assert!(matches!(kind(&t("|O")), HeaderErrorKind::Refused(_)));
        for d in [
            "<c16", "<U3", "|S4", "<M8[ns]", "float32", "<V2", "|V1", "|f4", "<f16",
        ] {
            assert!(
                matches!(kind(&t(d)), HeaderErrorKind::Unsupported(_)),
                "{d}"
            );
        }
        let HeaderErrorKind::Unsupported(m) = kind(&t("<V2")) else {
            unreachable!()
        };
        assert!(m.contains("`void2_as` bf16"), "{m}");
        let mut opts = ReadOptions::default();
        opts.void2_as_bf16 = true;
        assert_eq!(parse(&npy(&t("<V2")), &opts).unwrap().dtype, DType::BF16);
        assert!(matches!(
            kind("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}"),
            HeaderErrorKind::Unsupported(_)
        ));
    }

    #[test]
    fn caps() {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&[2, 0]);
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            preamble(&b).unwrap_err().kind,
            HeaderErrorKind::Limit { .. }
        ));
        let shape = vec!["1"; 65].join(",");
        let t = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({shape},)}}");
        assert!(matches!(kind(&t), HeaderErrorKind::Limit { .. }));
        let t = "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296)}";
        assert!(matches!(kind(t), HeaderErrorKind::Malformed(_)));
        assert!(matches!(
            parse(&npy("{'descr'")[..12], &ReadOptions::default())
                .unwrap_err()
                .kind,
            HeaderErrorKind::Truncated { .. }
        ));
    }
}
