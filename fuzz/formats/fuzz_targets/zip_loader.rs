//! The scanner reads a ZIP as torch's loader reads it (issue 28): a differential property
//! against torch's own ZIP reader. The input builds an archive from the entries of a real
//! torch.save file and an os.system pickle, under names re-cased, moved to other prefixes,
//! duplicated, stored or deflated, then overwrites bytes of it at input-chosen offsets (so the
//! central directory, local headers and end record are fuzzed too). The oracle, miniz built
//! from source and driven as `PyTorchStreamReader` drives it
//! (`tests/miniz-oracle`), says which bytes `torch.load` would unpickle. Whenever the scan
//! passes the file, its report must name exactly those bytes as the loaded pickle.
#![no_main]

use std::io::Read;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};
use weightport_miniz_oracle::{craft, torch_data_pkl};

struct Pieces {
    good: Vec<(String, Vec<u8>)>,
    evil: Vec<u8>,
}

fn entries(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("fixture");
    (0..z.len())
        .map(|i| {
            let mut f = z.by_index(i).expect("fixture");
            let mut b = Vec::new();
            f.read_to_end(&mut b).expect("fixture");
            (f.name().expect("fixture").to_string(), b)
        })
        .collect()
}

fn pieces() -> &'static Pieces {
    static P: OnceLock<Pieces> = OnceLock::new();
    P.get_or_init(|| {
        let good = entries(include_bytes!(
            "../../../fixtures/good/pickle/archive_prefix.pt"
        ));
        let evil = entries(include_bytes!(
            "../../../fixtures/hostile/pickle/02_rce_global_posix_system.pt"
        ))
        .into_iter()
        .find(|(n, _)| n.ends_with("data.pkl"))
        .expect("fixture")
        .1;
        Pieces { good, evil }
    })
}

const PREFIXES: [&str; 4] = ["archive", "ARCHIVE", "Archive", "other"];
const LEAVES: [&str; 8] = [
    "data.pkl", "DATA.PKL", "Data.Pkl", "data.PKL", "version", "data/0", "DATA/0", "x.npy",
];

/// Reads input bytes one at a time (zero once exhausted).
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }
}

fn recase(s: &str, bits: u8) -> String {
    let up = |(i, c): (usize, char)| {
        if bits >> (i % 8) & 1 == 1 {
            c.to_ascii_uppercase()
        } else {
            c
        }
    };
    s.chars().enumerate().map(up).collect()
}

/// One entry from three input bytes: which name, which content, how stored.
fn entry(input: &mut Input<'_>, p: &Pieces) -> craft::Entry {
    let (pick, content, flags) = (input.byte(), input.byte(), input.byte());
    let name = if pick < 128 {
        // One of the real file's entries, its name re-cased by `flags`' high bits.
        let (n, _) = &p.good[usize::from(pick) % p.good.len()];
        if flags & 0x80 != 0 {
            recase(n, flags)
        } else {
            n.clone()
        }
    } else {
        let prefix = PREFIXES[usize::from(pick) % PREFIXES.len()];
        format!("{prefix}/{}", LEAVES[usize::from(pick / 4) % LEAVES.len()])
    };
    let data = match content % 4 {
        0 => p.evil.clone(),
        1 => p
            .good
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(&name))
            .map_or_else(|| p.good[0].1.clone(), |(_, d)| d.clone()),
        2 => p.good[usize::from(content / 4) % p.good.len()].1.clone(),
        _ => input
            .0
            .iter()
            .take(usize::from(content / 4))
            .copied()
            .collect(),
    };
    craft::Entry {
        name: name.into_bytes(),
        data,
        deflate: flags & 1 == 1,
    }
}

fn build(data: &[u8]) -> Vec<u8> {
    let p = pieces();
    let mut input = Input(data);
    let n = 1 + usize::from(input.byte() % 10);
    let list: Vec<craft::Entry> = (0..n).map(|_| entry(&mut input, p)).collect();
    let mut bytes = craft::zip(&list);
    // The rest overwrites bytes: (offset from the end or the start, value).
    while input.0.len() >= 3 {
        let (a, b, v) = (input.byte(), input.byte(), input.byte());
        let off = usize::from(u16::from_le_bytes([a, b]) & 0x7fff);
        let at = if a & 1 == 1 {
            bytes.len().checked_sub(1 + off)
        } else {
            Some(off).filter(|&o| o < bytes.len())
        };
        if let Some(at) = at {
            bytes[at] = v;
        }
    }
    bytes
}

fuzz_target!(|data: &[u8]| {
    let bytes = build(data);
    // torch.load reads a ZIP only when the file starts with a local header; anything else goes
    // to its legacy path, where the whole file is one pickle (the scan never passes those).
    if !bytes.starts_with(b"PK\x03\x04") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("wp-fuzz-zip-loader-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.pt");
    std::fs::write(&path, &bytes).unwrap();
    let Ok(outcome) = weightport_scan::scan(&path) else {
        return;
    };
    if !outcome.passed() {
        return;
    }
    let torch = match torch_data_pkl(&bytes) {
        Ok(b) => b,
        // torch reads no pickle from this archive: nothing for the scan to have audited.
        Err(_) => return,
    };
    let want: [u8; 32] = Sha256::digest(&torch).into();
    let loaded: Vec<_> = outcome
        .reports
        .iter()
        .flat_map(|r| &r.pickles)
        .filter(|p| p.loaded)
        .collect();
    assert!(
        loaded.len() == 1 && loaded[0].sha256 == want,
        "the scan passed having audited {loaded:?} as the loaded pickle; torch unpickles {} \
         bytes with sha256 {want:02x?}",
        torch.len()
    );
});
