//! A test oracle for the scanner: which bytes `torch.load` would unpickle from a ZIP, told by
//! the ZIP reader torch itself uses (miniz, built from source by `build.rs` with torch's
//! definitions) driven the way torch drives it (`src/torch_reader.c`). Tests and fuzz targets
//! assert that whenever the scan calls a file safe, it audited exactly these bytes.
//!
//! [`craft`] writes the hostile archives those tests feed both sides: stored or deflated
//! entries under any names, duplicates included, which a ZIP library would refuse to write.

use std::os::raw::{c_char, c_int};

extern "C" {
    fn wp_oracle_torch_data_pkl(
        buf: *const u8,
        len: usize,
        out: *mut *mut u8,
        out_len: *mut usize,
        err: *mut c_char,
        errlen: usize,
    ) -> c_int;
    fn wp_oracle_free(p: *mut u8);
}

/// The bytes torch's reader hands the unpickler for `archive`'s `data.pkl`, or why it reads
/// none (the step of `PyTorchStreamReader` that fails, and miniz's error).
pub fn torch_data_pkl(archive: &[u8]) -> Result<Vec<u8>, String> {
    let mut out: *mut u8 = std::ptr::null_mut();
    let mut out_len = 0usize;
    let mut err = [0 as c_char; 256];
    // SAFETY: `archive` is valid for `archive.len()` bytes for the whole call (miniz reads it
    // through init_mem and keeps no pointer past `mz_zip_reader_end`); the out-pointers and
    // the error buffer are valid and sized as passed.
    let rc = unsafe {
        wp_oracle_torch_data_pkl(
            archive.as_ptr(),
            archive.len(),
            &mut out,
            &mut out_len,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if rc != 0 {
        // SAFETY: snprintf NUL-terminated the message within `err`.
        let msg = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) };
        return Err(format!("step {rc}: {}", msg.to_string_lossy()));
    }
    // SAFETY: on success `out` points to `out_len` bytes malloc'd by the harness, owned here
    // until handed back to `wp_oracle_free`.
    let bytes = unsafe { std::slice::from_raw_parts(out, out_len) }.to_vec();
    // SAFETY: `out` came from the harness's malloc and is freed once.
    unsafe { wp_oracle_free(out) };
    Ok(bytes)
}

/// Hostile ZIP archives, byte by byte (APPNOTE.TXT §4.3): what a test needs and a ZIP library
/// refuses to write.
pub mod craft {
    use std::io::Write;

    /// One entry: its name bytes, its (uncompressed) bytes, and whether it is deflated.
    pub struct Entry {
        /// The name, as stored in both headers.
        pub name: Vec<u8>,
        /// The content.
        pub data: Vec<u8>,
        /// Deflate (method 8) instead of storing (method 0).
        pub deflate: bool,
    }

    fn deflated(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).expect("in memory");
        e.finish().expect("in memory")
    }

    fn header(out: &mut Vec<u8>, sig: u32, e: &Entry, body: &[u8], offset: Option<u32>) {
        let method: u16 = if e.deflate { 8 } else { 0 };
        let crc = crc32fast::hash(&e.data);
        out.extend_from_slice(&sig.to_le_bytes());
        if offset.is_some() {
            out.extend_from_slice(&20u16.to_le_bytes()); // version made by
        }
        out.extend_from_slice(&20u16.to_le_bytes()); // version needed
        out.extend_from_slice(&0u16.to_le_bytes()); // flags
        out.extend_from_slice(&method.to_le_bytes());
        out.extend_from_slice(&[0, 0, 0x21, 0]); // time, date (1980-01-01)
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&(e.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes()); // extra length
        if let Some(off) = offset {
            out.extend_from_slice(&[0; 6]); // comment length, disk, internal attributes
            out.extend_from_slice(&0u32.to_le_bytes()); // external attributes
            out.extend_from_slice(&off.to_le_bytes());
        }
        out.extend_from_slice(&e.name);
    }

    /// The archive of `entries`, in order, central directory in the same order.
    pub fn zip(entries: &[Entry]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut central = Vec::new();
        for e in entries {
            let body = if e.deflate {
                deflated(&e.data)
            } else {
                e.data.clone()
            };
            let offset = out.len() as u32;
            header(&mut out, 0x0403_4b50, e, &body, None);
            out.extend_from_slice(&body);
            header(&mut central, 0x0201_4b50, e, &body, Some(offset));
        }
        let (cd_start, cd_len) = (out.len() as u32, central.len() as u32);
        out.extend_from_slice(&central);
        out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        out.extend_from_slice(&[0; 4]); // disk numbers
        let n = entries.len() as u16;
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&cd_len.to_le_bytes());
        out.extend_from_slice(&cd_start.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes()); // comment length
        out
    }
}

#[cfg(test)]
mod tests {
    use super::craft::{zip, Entry};
    use super::torch_data_pkl;

    fn entry(name: &str, data: &[u8]) -> Entry {
        Entry {
            name: name.as_bytes().to_vec(),
            data: data.to_vec(),
            deflate: false,
        }
    }

    #[test]
    fn torch_finds_data_pkl_under_entry_zeros_prefix_ignoring_case() {
        let z = zip(&[entry("arc/version", b"3\n"), entry("arc/DATA.PKL", b"P")]);
        assert_eq!(torch_data_pkl(&z).unwrap(), b"P");
        let z = zip(&[entry("arc/version", b"3\n"), entry("other/data.pkl", b"P")]);
        assert!(torch_data_pkl(&z)
            .unwrap_err()
            .contains("locating file data.pkl"));
        assert!(torch_data_pkl(b"not a zip")
            .unwrap_err()
            .starts_with("step 1"));
    }
}
