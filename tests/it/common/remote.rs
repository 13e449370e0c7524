//! What the remote-input tests share (tests/it/remote_hub.rs, tests/it/remote_s3.rs): comparing
//! a conversion of a remote input with the same conversion of the local files, byte for byte.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Mutex;

/// Held by a test that sets the process's environment (the endpoint, credentials and CA) to open
/// a remote input in-process: the HTTP clients are made once per process from it.
pub(crate) static IN_PROCESS_ENV: Mutex<()> = Mutex::new(());

/// A port free on 127.0.0.1 now.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Panics with `what` and the stderr unless `out` succeeded.
pub(crate) fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `convert INPUT -o OUT ARGS…`.
pub(crate) fn convert_args<'a>(input: &'a str, out: &'a Path, args: &[&'a str]) -> Vec<&'a str> {
    [&["convert", input, "-o", out.to_str().unwrap()][..], args].concat()
}

/// Converts `remote` and `local` with the same `args` through `wp` (weightport with the
/// server's environment), into `tmp/remote/OUT` and `tmp/local/OUT`; both outputs must be the
/// same bytes (every file of an output directory). Returns the remote output's path.
pub(crate) fn same_as_local(
    wp: &dyn Fn(&[&str]) -> Output,
    tmp: &Path,
    remote: &str,
    local: &Path,
    out: &str,
    args: &[&str],
) -> PathBuf {
    let (a, b) = (tmp.join("remote").join(out), tmp.join("local").join(out));
    std::fs::create_dir_all(a.parent().unwrap()).unwrap();
    std::fs::create_dir_all(b.parent().unwrap()).unwrap();
    ok(&wp(&convert_args(remote, &a, args)), remote);
    let l = local.to_str().unwrap();
    ok(&wp(&convert_args(l, &b, args)), l);
    assert!(
        tree_bytes(&a) == tree_bytes(&b),
        "{remote}: differs from the conversion of {l}"
    );
    a
}

/// A file's bytes, or a directory's files and their bytes.
pub(crate) fn tree_bytes(p: &Path) -> Vec<(String, Vec<u8>)> {
    if p.is_file() {
        return vec![(String::new(), std::fs::read(p).unwrap())];
    }
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(p)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|f| {
            (
                f.file_name().unwrap().to_string_lossy().into(),
                std::fs::read(&f).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Files in `dir` (a conversion's output directory): nothing partial or temporary may remain.
pub(crate) fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The conversions the fault tests run, under an address `ROOT/NAME` of the server's: a
/// safetensors repo merged, an HF release to Q4_K_M GGUF, a `.bin` repo to safetensors, as
/// (repo name, fixture directory, output name, arguments).
pub(crate) const FAULT_CASES: [(&str, &str, &str, &[&str]); 3] = [
    (
        "hf_repo_sharded",
        "good/hf_repo_sharded",
        "m.safetensors",
        &[],
    ),
    (
        "llama",
        "good/arch/llama",
        "l.gguf",
        &["--outtype", "f16", "--quant", "Q4_K_M"],
    ),
    ("bin_repo", "good/pickle/bin_repo", "b.safetensors", &[]),
];

/// Runs [`FAULT_CASES`] (the remote address of a repo is `address(name)`) through `faulty`
/// (weightport pointed at a fault proxy) and locally through `wp`, in `tmp`: each remote output
/// equals the local one, or its run failed after the retry budget with nothing in its output
/// directory. At least two of three must go through, and the proxy must have injected every
/// kind of fault.
pub(crate) fn through_faults(
    tmp: &Path,
    address: &dyn Fn(&str) -> String,
    wp: &dyn Fn(&[&str]) -> Output,
    faulty: &dyn Fn(&[&str]) -> Output,
    proxy: &super::fault_proxy::FaultProxy,
) {
    let mut equal = 0;
    for (name, local, out, args) in FAULT_CASES {
        let remote = address(name);
        let dir = tmp.join("faults").join(out);
        std::fs::create_dir_all(&dir).unwrap();
        let (o, l) = (
            dir.join(out),
            tmp.join("faults").join(format!("local-{out}")),
        );
        let local_path = super::fixtures().join(local);
        ok(
            &wp(&convert_args(local_path.to_str().unwrap(), &l, args)),
            local,
        );
        let r = faulty(&convert_args(&remote, &o, args));
        let err = String::from_utf8_lossy(&r.stderr);
        if r.status.success() {
            assert!(
                std::fs::read(&o).unwrap() == std::fs::read(&l).unwrap(),
                "{remote}"
            );
            equal += 1;
        } else {
            assert!(err.contains("gave up after"), "{remote}: {err}");
            assert!(names_in(&dir).is_empty(), "{remote}: {:?}", names_in(&dir));
        }
    }
    let c = proxy.counts();
    eprintln!("faults injected: {c:?}");
    assert!(
        equal >= 2,
        "{equal} of 3 conversions went through the faults"
    );
    assert!(
        c.dropped > 0 && c.status > 0 && c.truncated > 0 && c.stalled > 0,
        "{c:?}"
    );
}

/// `out` (`inspect --json` of a remote input) succeeded and lists the tensors `inspect --json`
/// of the fixture `local` lists (all but each tensor's `file`, which names the view).
pub(crate) fn inspects_as_local(out: &Output, local: &str) {
    ok(out, "inspect");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let l = super::wp(&[
        "inspect",
        "--json",
        super::fixtures().join(local).to_str().unwrap(),
    ]);
    let want: serde_json::Value = serde_json::from_slice(&l.stdout).unwrap();
    let without_file = |d: &serde_json::Value| {
        let mut t = d["tensors"].clone();
        t.as_array_mut().unwrap().iter_mut().for_each(|t| {
            t.as_object_mut().unwrap().remove("file");
        });
        t
    };
    assert_eq!(without_file(&doc), without_file(&want));
}
