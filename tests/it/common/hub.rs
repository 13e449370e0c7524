//! A Hub-layout nginx for the remote tests: started on loopback over HTTPS with a CA made by
//! `hub_tree.py` (which benches/remote.sh uses too), stopped on drop; the conversions and
//! checks those tests share.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use sha2::{Digest, Sha256};

use super::fixtures;

pub(crate) const TOKEN: &str = "hf_testtoken_0123456789abcdef";

/// nginx, openssl and python3, or why the test cannot run (a failure in CI, where .ci/run
/// installs them).
pub(crate) fn tools() -> Option<PathBuf> {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    let runs = |c: &str| Command::new(c).arg("--version").output().is_ok();
    let openssl = Command::new("openssl").arg("version").output().is_ok();
    match (nginx, openssl && runs("python3")) {
        (Some(n), true) => Some(n),
        _ if std::env::var_os("CI").is_some() => panic!("nginx, openssl or python3 missing in CI"),
        _ => {
            eprintln!("note: nginx, openssl or python3 missing; the remote tests check nothing");
            None
        }
    }
}

/// Held by a test that opens remote inputs in this process: it sets `HF_ENDPOINT` and the
/// other variables (and the read-ahead budget) for the whole process.
pub(crate) static IN_PROCESS: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(crate) fn sha256_hex(b: &[u8]) -> String {
    format!("{:x}", Sha256::digest(b))
}

/// A repo the Hub serves: `org/NAME` at a fixed commit, its files.
pub(crate) struct Repo {
    pub(crate) name: &'static str,
    /// The directory whose files it holds.
    pub(crate) dir: PathBuf,
    pub(crate) files: Vec<PathBuf>,
}

/// The fixture directory `dir` as the repo `org/NAME`.
pub(crate) fn repo(name: &'static str, dir: &str) -> Repo {
    repo_at(name, &fixtures().join(dir))
}

/// Any directory as the repo `org/NAME`.
pub(crate) fn repo_at(name: &'static str, dir: &Path) -> Repo {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    Repo {
        name,
        dir: dir.to_path_buf(),
        files,
    }
}

/// A running nginx serving the Hub tree; stopped (by its pid) on drop.
pub(crate) struct Hub {
    child: Child,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) port: u16,
    /// nginx's plain-http listener on 127.0.0.1 (only the fault proxy uses it).
    pub(crate) plain_port: u16,
}

impl Drop for Hub {
    /// Stops nginx by its master's pid with SIGTERM, so the master stops its workers (a SIGKILL
    /// of the master alone leaves them running, still listening); SIGKILL after 5 s.
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) has no memory effects; `pid` is our own child, not yet reaped
            // (reaping happens below), so the pid cannot name another process.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Hub {
    pub(crate) fn start(nginx: &Path, repos: &[Repo]) -> Hub {
        Self::start_with(nginx, repos, None)
    }

    /// A Hub whose redirects send LFS reads to 127.0.0.2:`lfs_port` (a proxy's) when given.
    pub(crate) fn start_with(nginx: &Path, repos: &[Repo], lfs_port: Option<u16>) -> Hub {
        Self::start_opts(nginx, repos, lfs_port, &[])
    }

    /// A Hub laid out by `hub_tree.py` with its `extra` arguments (`--wrong-sha NAME/FILE`).
    pub(crate) fn start_opts(
        nginx: &Path,
        repos: &[Repo],
        lfs_port: Option<u16>,
        extra: &[&str],
    ) -> Hub {
        let dir = tempfile::tempdir().unwrap();
        let (port, plain_port) = (free_port(), free_port());
        let lfs_port = lfs_port.unwrap_or(port);
        let mut gen = Command::new("python3");
        gen.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/common/hub_tree.py"))
            .arg(dir.path())
            .args([
                "--port",
                &port.to_string(),
                "--plain-port",
                &plain_port.to_string(),
            ])
            .args(["--lfs-port", &lfs_port.to_string(), "--token", TOKEN])
            .args(extra);
        for r in repos {
            gen.arg(format!("{}={}", r.name, r.dir.display()));
        }
        let out = gen.output().expect("run python3 hub_tree.py");
        assert!(
            out.status.success(),
            "hub_tree.py: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let d = dir.path();
        let child = Command::new(nginx)
            .args(["-e", &format!("{}/error.log", d.display()), "-p"])
            .arg(d)
            .arg("-c")
            .arg(d.join("nginx.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start nginx");
        let hub = Hub {
            child,
            dir,
            port,
            plain_port,
        };
        hub.wait_ready();
        hub
    }

    pub(crate) fn wait_ready(&self) {
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        let log = std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default();
        panic!("nginx did not start: {log}");
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// Serves `file` at `/plain/NAME` and `/norange/NAME`; returns the plain URL.
    pub(crate) fn plain(&self, file: &Path) -> String {
        let name = file.file_name().unwrap().to_str().unwrap();
        for d in ["plain", "norange"] {
            std::fs::copy(file, self.dir.path().join("root").join(d).join(name)).unwrap();
        }
        format!("{}/plain/{name}", self.endpoint())
    }

    pub(crate) fn lfs_path(&self, sha: &str) -> PathBuf {
        self.dir.path().join("root/lfs").join(sha)
    }

    /// The access log's lines so far.
    pub(crate) fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("access.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// `weightport ARGS` with this Hub as `HF_ENDPOINT`, its CA and the token.
    pub(crate) fn wp(&self, args: &[&str]) -> Output {
        self.wp_at(&self.endpoint(), args)
    }

    /// `weightport ARGS` with `endpoint` as `HF_ENDPOINT` (a proxy's), a 1 s stall timeout.
    pub(crate) fn wp_at(&self, endpoint: &str, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_weightport"))
            .args(args)
            .env("WEIGHTPORT_HTTP_TIMEOUT", "1")
            .env("HF_ENDPOINT", endpoint)
            .env("HF_TOKEN", TOKEN)
            .env("HF_HOME", self.dir.path().join("hf-home"))
            .env("SSL_CERT_FILE", self.dir.path().join("ca.pem"))
            .output()
            .expect("run weightport")
    }
}

pub(crate) fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Converts `remote` (through the Hub) and `local` with the same `args`; both outputs must be
/// the same bytes (every file of an output directory). Returns the remote output's path.
pub(crate) fn same_as_local(
    hub: &Hub,
    remote: &str,
    local: &Path,
    out: &str,
    args: &[&str],
) -> PathBuf {
    let tmp = hub.dir.path().join("out");
    let (a, b) = (tmp.join("remote").join(out), tmp.join("local").join(out));
    std::fs::create_dir_all(a.parent().unwrap()).unwrap();
    std::fs::create_dir_all(b.parent().unwrap()).unwrap();
    let run = |input: &str, o: &Path| {
        let mut v = vec!["convert", input, "-o", o.to_str().unwrap()];
        v.extend_from_slice(args);
        hub.wp(&v)
    };
    ok(&run(remote, &a), remote);
    ok(
        &run(local.to_str().unwrap(), &b),
        &local.display().to_string(),
    );
    assert!(
        tree_bytes(&a) == tree_bytes(&b),
        "{remote}: differs from the conversion of {}",
        local.display()
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

/// `convert INPUT -o OUT ARGS…`.
pub(crate) fn convert_args<'a>(input: &'a str, out: &'a Path, args: &[&'a str]) -> Vec<&'a str> {
    [&["convert", input, "-o", out.to_str().unwrap()][..], args].concat()
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
