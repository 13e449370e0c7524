//! The Hub that the remote tests read from: Debian's nginx, started on loopback over HTTPS
//! with a CA made here (`SSL_CERT_FILE`), serving a Hub-layout tree built from the files given:
//! the model API's file list (`/api/models/ORG/NAME/revision/REV`), `/resolve/` answering 302
//! to an `/lfs/` location on another host (127.0.0.2) with `X-Repo-Commit`, `X-Linked-Etag`
//! and `X-Linked-Size`, small files answered directly, ranges as 206. The access log has one
//! line per request: method, path, status, `Range` asked, body bytes sent.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use sha2::{Digest, Sha256};

use super::fixtures;
pub(crate) use super::remote::{free_port, ok};

pub(crate) const TOKEN: &str = "hf_testtoken_0123456789abcdef";

/// nginx and openssl, or why the test cannot run (a failure in CI, where .ci/run installs them).
pub(crate) fn tools() -> Option<PathBuf> {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    let openssl = Command::new("openssl").arg("version").output().is_ok();
    match (nginx, openssl) {
        (Some(n), true) => Some(n),
        _ if std::env::var_os("CI").is_some() => panic!("nginx or openssl missing in CI"),
        _ => {
            eprintln!("note: nginx or openssl not installed; the remote tests check nothing");
            None
        }
    }
}

pub(crate) fn sha256_hex(b: &[u8]) -> String {
    format!("{:x}", Sha256::digest(b))
}

pub(crate) fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a server certificate for 127.0.0.1 and 127.0.0.2, made with openssl.
pub(crate) fn certificates(dir: &Path) {
    let o = |args: &[&str]| run(Command::new("openssl").args(args).current_dir(dir));
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    o(&[
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=weightport test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    ]
    .concat());
    o(&[
        &["req"][..],
        &ec,
        &[
            "-keyout",
            "key.pem",
            "-out",
            "leaf.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    ]
    .concat());
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=IP:127.0.0.1,IP:127.0.0.2\nbasicConstraints=CA:FALSE\n\
         extendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    o(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "cert.pem",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
    ]);
}

/// A repo the Hub serves: `org/NAME` at a fixed commit, its files.
pub(crate) struct Repo {
    pub(crate) name: &'static str,
    pub(crate) files: Vec<PathBuf>,
    /// Files the listing gives a wrong LFS sha256 (all zeros).
    pub(crate) wrong_sha: Vec<&'static str>,
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
    Repo::of(name, files)
}

impl Repo {
    /// The repo `org/NAME` holding `files`.
    pub(crate) fn of(name: &'static str, files: Vec<PathBuf>) -> Repo {
        Repo {
            name,
            files,
            wrong_sha: Vec::new(),
        }
    }

    /// The same repo, its listing giving `file` a wrong LFS sha256.
    pub(crate) fn with_wrong_sha(mut self, file: &'static str) -> Repo {
        self.wrong_sha.push(file);
        self
    }
}

pub(crate) fn commit_of(name: &str) -> String {
    sha256_hex(name.as_bytes())[..40].to_string()
}

/// Whether the Hub keeps `name` in LFS (weights and other binary files).
pub(crate) fn is_lfs(name: &str) -> bool {
    [".safetensors", ".bin", ".gguf", ".npz", ".npy", ".model"]
        .iter()
        .any(|e| name.ends_with(e))
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

/// Files larger than this (generated by a test, never a fixture) are hashed by `sha256sum` and
/// hard-linked into the tree rather than read and copied.
const LARGE: u64 = 64 << 20;

/// Puts `f` into `lfs` under its sha256; returns the sha256 and the length.
fn lfs_object(f: &Path, lfs: &Path) -> (String, u64) {
    let len = std::fs::metadata(f).unwrap().len();
    if len <= LARGE {
        let bytes = std::fs::read(f).unwrap();
        let sha = sha256_hex(&bytes);
        std::fs::write(lfs.join(&sha), &bytes).unwrap();
        return (sha, len);
    }
    let out = Command::new("sha256sum")
        .arg(f)
        .output()
        .expect("sha256sum");
    let sha = String::from_utf8_lossy(&out.stdout)[..64].to_string();
    let at = lfs.join(&sha);
    // (Served by two repos: already there. A copy onto the link would truncate the file.)
    if !at.exists() && std::fs::hard_link(f, &at).is_err() {
        std::fs::copy(f, &at).unwrap();
    }
    (sha, len)
}

/// The switch (a file under the served root) that "expires" the first signed locations: while
/// it exists, `/resolve/` redirects to `/lfs/SHA?gen=2`, `/lfs/` answers 403 to a location
/// without `gen`, and `/plain/` answers 403 (a single-file URL that no redirect gave). An
/// object's first read (`bytes=0-100000`, right after its `/resolve/`) is never refused: a
/// location just handed out has not expired.
pub(crate) const EXPIRED: &str = "expired";
/// The switch that expires the first locations as [`EXPIRED`] does, and makes `/resolve/`
/// name another LFS object (`X-Linked-Etag` of zeros) for the new ones.
pub(crate) const EXPIRED_CHANGED: &str = "expired-changed";
/// The switch that expires every `/lfs/` location, the new ones too.
pub(crate) const EXPIRED_ALL: &str = "expired-all";

/// The nginx locations of one repo, its listing and its LFS objects under `root`.
pub(crate) fn lay_out(r: &Repo, root: &Path, port: u16) -> String {
    let commit = commit_of(r.name);
    let auth = format!("if ($http_authorization != \"Bearer {TOKEN}\") {{ return 401; }}");
    let mut conf = String::new();
    let mut siblings = Vec::new();
    for f in &r.files {
        let (sha, len) = lfs_object(f, &root.join("lfs"));
        let name = f.file_name().unwrap().to_str().unwrap();
        let lfs = is_lfs(name);
        let listed = match r.wrong_sha.contains(&name) {
            true => "0".repeat(64),
            false => sha.clone(),
        };
        siblings.push(if lfs {
            serde_json::json!({"rfilename": name, "size": len,
                "lfs": {"sha256": listed, "size": len}})
        } else {
            serde_json::json!({"rfilename": name, "size": len})
        });
        for rev in ["main", commit.as_str()] {
            let answer = if lfs {
                format!(
                    "add_header X-Linked-Etag '\"{sha}\"' always; add_header X-Linked-Size {len} always;\n\
                     if (-f {changed}) {{ add_header X-Repo-Commit {commit} always;\n\
                       add_header X-Linked-Etag '\"{other}\"' always; add_header X-Linked-Size {len} always;\n\
                       return 302 https://127.0.0.2:{port}/lfs/{sha}?gen=2; }}\n\
                     if (-f {expired}) {{ return 302 https://127.0.0.2:{port}/lfs/{sha}?gen=2; }}\n\
                     return 302 https://127.0.0.2:{port}/lfs/{sha};",
                    expired = root.join(EXPIRED).display(),
                    changed = root.join(EXPIRED_CHANGED).display(),
                    other = "0".repeat(64),
                )
            } else {
                format!("alias {}/lfs/{sha};", root.display())
            };
            conf += &format!(
                "location = /org/{}/resolve/{rev}/{name} {{ {auth}\n\
                 add_header X-Repo-Commit {commit} always; {answer} }}\n",
                r.name
            );
        }
    }
    let listing = serde_json::json!({"id": format!("org/{}", r.name), "sha": commit,
        "siblings": siblings});
    let api = root.join("api/models/org").join(r.name).join("revision");
    std::fs::create_dir_all(&api).unwrap();
    for rev in ["main", commit.as_str()] {
        std::fs::write(api.join(rev), listing.to_string()).unwrap();
    }
    conf
}

impl Hub {
    pub(crate) fn start(nginx: &Path, repos: &[Repo]) -> Hub {
        Self::start_with(nginx, repos, None)
    }

    /// A Hub whose redirects send LFS reads to 127.0.0.2:`lfs_port` (a proxy's) when given.
    pub(crate) fn start_with(nginx: &Path, repos: &[Repo], lfs_port: Option<u16>) -> Hub {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        for d in ["lfs", "plain", "norange", "tmp"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        certificates(dir.path());
        let (port, plain_port) = (free_port(), free_port());
        let lfs_port = lfs_port.unwrap_or(port);
        let files: String = repos.iter().map(|r| lay_out(r, &root, lfs_port)).collect();
        let d = dir.path().display();
        let user = if unsafe_is_root() { "user root;" } else { "" };
        let conf = format!(
            "{user}\nworker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n\
             log_format c '$request_method $uri $status \"$http_range\" $body_bytes_sent';\n\
             access_log {d}/access.log c;\n\
             log_format a '$host $request_uri $status \"$http_authorization\"';\n\
             access_log {d}/auth.log a;\n\
             client_body_temp_path {d}/root/tmp;\n\
             default_type application/octet-stream;\n\
             server {{\n\
             listen 127.0.0.1:{port} ssl; listen 127.0.0.2:{port} ssl; listen 127.0.0.1:{plain_port};\n\
             ssl_certificate {d}/cert.pem; ssl_certificate_key {d}/key.pem;\n\
             location /api/models/ {{ if ($http_authorization != \"Bearer {TOKEN}\") {{ return 401; }}\n\
               alias {d}/root/api/models/; default_type application/json; }}\n\
             location /lfs/ {{ if ($http_authorization) {{ return 403; }}\n\
               set $gen \"$arg_gen\"; if (-f {d}/root/{EXPIRED}) {{ set $gen \"${{gen}}x\"; }}\n\
               if (-f {d}/root/{EXPIRED_ALL}) {{ set $gen x; }}\n\
               if (-f {d}/root/{EXPIRED_CHANGED}) {{ set $gen \"${{gen}}x\"; }}\n\
               if ($http_range = \"bytes=0-100000\") {{ set $gen fresh; }}\n\
               if ($gen = x) {{ return 403; }} root {d}/root; }}\n\
             location /plain/ {{ if (-f {d}/root/{EXPIRED}) {{ return 403; }} root {d}/root; }}\n\
             location /norange/ {{ max_ranges 0; root {d}/root; }}\n\
             {files}\
             }}\n}}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
        let child = Command::new(nginx)
            .args(["-e", &format!("{d}/error.log"), "-p"])
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
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

    /// Waits until nginx accepts connections: up to 30 s (the 5 s this waited before ran out
    /// once on a loaded machine; its log was not kept), or until its error log says it gave up
    /// (`[emerg]`: a port taken since it was picked, say), which the panic then shows.
    pub(crate) fn wait_ready(&self) {
        let log = || std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default();
        for _ in 0..1200 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if log().contains("[emerg]") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        panic!("nginx did not start: {}", log());
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
        self.log_of("access.log")
    }

    /// The second log's lines so far: host, path with query, status, `Authorization` sent.
    pub(crate) fn auth_log(&self) -> Vec<String> {
        self.log_of("auth.log")
    }

    /// The complete lines of log `name`: nginx writes a line with one `write`, which a read of
    /// the file can catch half done (a line cut inside its `Range` failed a test's parse under
    /// load), so a last line without its newline is left for the next read.
    fn log_of(&self, name: &str) -> Vec<String> {
        let text = std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete.lines().map(str::to_string).collect()
    }

    /// `weightport ARGS` with this Hub as `HF_ENDPOINT`, its CA and the token.
    /// Converts `remote` (through this Hub) and `local` with the same `args`; both outputs must
    /// be the same bytes (every file of an output directory). Returns the remote output's path.
    pub(crate) fn same_as_local(
        &self,
        remote: &str,
        local: &Path,
        out: &str,
        args: &[&str],
    ) -> PathBuf {
        let tmp = self.dir.path().join("out");
        super::remote::same_as_local(&|a| self.wp(a), &tmp, remote, local, out, args)
    }

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

pub(crate) fn unsafe_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}
