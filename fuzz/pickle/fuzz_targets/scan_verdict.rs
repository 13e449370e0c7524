//! The scan verdict as a property. The input is a `data.pkl`; the target wraps it in a torch
//! ZIP whose storage records have exactly the sizes the pickle declares (so a benign pickle can
//! scan safe), scans it, and checks the verdict against an oracle that is independent of the
//! scanner: a plain opcode lister (pickletools' `genops`, no stack). Whenever that lister sees a
//! `GLOBAL`/`INST` naming a symbol off the allowlist, a `STACK_GLOBAL` directly after two string
//! constants naming one, or an `EXT*` code, the verdict must be unsafe. And a safe verdict must
//! mean the interpreter read the pickle to its end.
#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;
use weightport_pickle::vm::{PidStyle, Vm, VmLimits};
use weightport_pickle::Verdict;

/// Argument length of an opcode at `data[pos]` (after the opcode byte), or None when the
/// lister cannot go on (unknown opcode, truncated).
fn arg_len(data: &[u8], pos: usize) -> Option<usize> {
    let rest = data.get(pos + 1..)?;
    let le = |n: usize| -> Option<usize> {
        let b = rest.get(..n)?;
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(b);
        usize::try_from(u64::from_le_bytes(v)).ok()
    };
    let line = |k: usize| -> Option<usize> {
        let mut at = 0;
        for _ in 0..k {
            at += rest.get(at..)?.iter().position(|&b| b == b'\n')? + 1;
        }
        Some(at)
    };
    let n = match data[pos] {
        b'('
        | b'.'
        | b'0'
        | b'1'
        | b'2'
        | b'N'
        | 0x88
        | 0x89
        | b')'
        | b']'
        | b'}'
        | 0x8f
        | b't'
        | b'l'
        | b'd'
        | 0x91
        | 0x85..=0x87
        | b'a'
        | b's'
        | b'e'
        | b'u'
        | 0x90
        | 0x94
        | b'R'
        | 0x81
        | 0x92
        | b'o'
        | b'b'
        | b'Q'
        | 0x93
        | 0x97
        | 0x98 => 0,
        b'I' | b'L' | b'F' | b'S' | b'V' | b'p' | b'g' | b'P' => line(1)?,
        b'c' | b'i' => line(2)?,
        0x80 | b'K' | b'q' | b'h' | 0x82 => 1,
        b'M' | 0x83 => 2,
        b'J' | b'r' | b'j' | 0x84 => 4,
        b'G' | 0x95 => 8,
        0x8a | b'U' | b'C' | 0x8c => 1 + le(1)?,
        0x8b | b'T' | b'X' | b'B' => 4 + le(4)?,
        0x8d | 0x8e | 0x96 => le(8)?.checked_add(8)?,
        _ => return None,
    };
    (rest.len() >= n).then_some(n)
}

fn names(arg: &[u8]) -> Option<(String, String)> {
    let s = std::str::from_utf8(arg).ok()?;
    let mut it = s.split('\n');
    Some((it.next()?.to_string(), it.next()?.to_string()))
}

fn direct_string(data: &[u8], pos: usize, n: usize) -> Option<String> {
    let skip = match data[pos] {
        0x8c | b'U' => 2,
        b'X' => 5,
        _ => return None,
    };
    String::from_utf8(data.get(pos + skip..pos + 1 + n)?.to_vec()).ok()
}

/// Whether the plain lister sees a construct that must make the verdict unsafe.
fn oracle_flags(data: &[u8]) -> bool {
    let mut pos = 0;
    let mut last: Vec<Option<String>> = Vec::new();
    while pos < data.len() {
        let op = data[pos];
        let Some(n) = arg_len(data, pos) else {
            return false;
        };
        let bad = match op {
            b'c' | b'i' => names(&data[pos + 1..pos + 1 + n])
                .is_some_and(|(m, g)| weightport_pickle::allow::lookup(&m, &g).is_none()),
            0x93 => match (last.len() >= 2).then(|| (&last[last.len() - 2], &last[last.len() - 1]))
            {
                Some((Some(m), Some(g))) => weightport_pickle::allow::lookup(m, g).is_none(),
                _ => false,
            },
            0x82..=0x84 => true,
            _ => false,
        };
        if bad {
            return true;
        }
        last.push(direct_string(data, pos, n));
        if op == b'.' {
            return false;
        }
        pos += 1 + n;
    }
    false
}

/// A torch ZIP around `pkl`, with a record of the declared size for every storage.
fn torch_zip(pkl: &[u8]) -> Vec<u8> {
    let limits = VmLimits {
        max_opcodes: 1 << 20,
        ..VmLimits::default()
    };
    let storages = Vm::new(pkl, limits, PidStyle::Zip, true)
        .run(true)
        .map(|p| p.storages)
        .unwrap_or_default();
    let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let mut put = |name: &str, bytes: &[u8]| {
        if z.start_file(name, opts).is_ok() {
            let _ = z.write_all(bytes);
        }
    };
    put("archive/data.pkl", pkl);
    put("archive/byteorder", b"little");
    for s in storages.iter().take(64) {
        let size = s.root_bytes().unwrap_or(0).min(1 << 16) as usize;
        put(&format!("archive/data/{}", s.key), &vec![0u8; size]);
    }
    put("archive/version", b"3\n");
    z.finish().map(|c| c.into_inner()).unwrap_or_default()
}

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("wp-fuzz-scan-{}.pt", std::process::id()));
    std::fs::write(&path, torch_zip(data)).unwrap();
    let Ok(report) = weightport_pickle::scan(&path) else {
        return;
    };
    if oracle_flags(data) {
        assert_eq!(report.verdict, Verdict::Unsafe, "{:?}", report.findings);
    }
    if report.verdict == Verdict::Safe {
        let w = weightport_pickle::walk::walk(data, 1 << 28);
        assert!(
            w.is_clean(),
            "safe verdict but the walk found {:?}",
            w.hazards
        );
    }
});
