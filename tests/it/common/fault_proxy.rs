//! A proxy between weightport and a server (nginx's plain listener, s3s-fs) that injects faults:
//! connections dropped before an answer, 500 and 503 answers, bodies cut in half, stalls longer
//! than the client's timeout. TLS-terminating ([`FaultProxy::start`]) or plain http
//! ([`FaultProxy::start_plain`]); the request head is forwarded unchanged (its `Host` too, so a
//! SigV4 signature made for the proxy's address still verifies). One request per connection (it
//! answers `Connection: close`); its faults come from a seeded generator, so a run is
//! reproducible. Stopped on drop (its threads end).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// What the proxy does to requests.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mode {
    /// A fault on `percent` of requests, drawn from `seed`.
    Random { seed: u64, percent: u64 },
    /// 503 to every ranged request but the first read of an object (`bytes=0-100000`).
    FailLaterRanges,
    /// No fault: after `after` ranged requests for first locations (no `gen=` in the query),
    /// the switch file `switch` (a `hub::EXPIRED…` name) is made under the served root before
    /// the next request is forwarded, so nginx itself "expires" the signed locations.
    Expire { after: u32, switch: &'static str },
}

/// Faults injected so far, by kind.
#[derive(Debug, Default, Clone)]
pub(crate) struct Counts {
    pub(crate) requests: u32,
    pub(crate) dropped: u32,
    pub(crate) status: u32,
    pub(crate) truncated: u32,
    pub(crate) stalled: u32,
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    None,
    Drop,
    Status(u16),
    Truncate,
    Stall,
}

struct Shared {
    mode: Mode,
    /// The served root (where [`Mode::Expire`] makes its switch).
    root: std::path::PathBuf,
    ranged_first: u32,
    rng: u64,
    counts: Counts,
}

impl Shared {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn decide(&mut self, head: &str) -> Fault {
        self.counts.requests += 1;
        let fault = match self.mode {
            Mode::FailLaterRanges => {
                let ranged = head.to_ascii_lowercase().contains("\r\nrange: bytes=");
                match ranged && !head.contains("bytes=0-100000") {
                    true => Fault::Status(503),
                    false => Fault::None,
                }
            }
            Mode::Expire { after, switch } => {
                let ranged = head.to_ascii_lowercase().contains("\r\nrange: bytes=");
                let first_line = head.lines().next().unwrap_or_default();
                if ranged && !first_line.contains("gen=") {
                    self.ranged_first += 1;
                    if self.ranged_first > after {
                        std::fs::write(self.root.join(switch), b"").unwrap();
                    }
                }
                Fault::None
            }
            Mode::Random { percent, .. } => {
                let roll = self.next() % 100;
                match (roll < percent, self.next() % 5) {
                    (false, _) => Fault::None,
                    (true, 0) => Fault::Drop,
                    (true, 1) => Fault::Status(500),
                    (true, 2) => Fault::Status(503),
                    (true, 3) => Fault::Truncate,
                    (true, _) => Fault::Stall,
                }
            }
        };
        let c = &mut self.counts;
        match fault {
            Fault::None => {}
            Fault::Drop => c.dropped += 1,
            Fault::Status(_) => c.status += 1,
            Fault::Truncate => c.truncated += 1,
            Fault::Stall => c.stalled += 1,
        }
        fault
    }
}

pub(crate) struct FaultProxy {
    pub(crate) port: u16,
    stop: Arc<AtomicBool>,
    shared: Arc<Mutex<Shared>>,
    threads: Vec<JoinHandle<()>>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn tls_config(dir: &Path) -> Arc<rustls::ServerConfig> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("cert.pem"))
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_file(dir.join("key.pem")).unwrap();
    // ring, as the client's (ureq's) rustls uses; deprecated only for lacking post-quantum
    // key exchange, which a loopback test server does not need.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    Arc::new(config)
}

impl FaultProxy {
    /// Listens on 127.0.0.1 and 127.0.0.2 at `port` with the certificate in `dir`, forwarding to
    /// nginx's plain listener at 127.0.0.1:`upstream`.
    pub(crate) fn start(dir: &Path, port: u16, upstream: u16, mode: Mode) -> FaultProxy {
        let p = Self::start_with(Some(tls_config(dir)), port, upstream, mode);
        p.shared.lock().unwrap().root = dir.join("root");
        p
    }

    /// The same over plain http (for s3s-fs, which serves http).
    pub(crate) fn start_plain(port: u16, upstream: u16, mode: Mode) -> FaultProxy {
        Self::start_with(None, port, upstream, mode)
    }

    fn start_with(
        config: Option<Arc<rustls::ServerConfig>>,
        port: u16,
        upstream: u16,
        mode: Mode,
    ) -> FaultProxy {
        let stop = Arc::new(AtomicBool::new(false));
        let seed = match mode {
            Mode::Random { seed, .. } => seed | 1,
            Mode::FailLaterRanges | Mode::Expire { .. } => 1,
        };
        let shared = Arc::new(Mutex::new(Shared {
            mode,
            root: std::path::PathBuf::new(),
            ranged_first: 0,
            rng: seed,
            counts: Counts::default(),
        }));
        let mut threads = Vec::new();
        for host in ["127.0.0.1", "127.0.0.2"] {
            let l = TcpListener::bind((host, port)).expect("bind the proxy");
            l.set_nonblocking(true).unwrap();
            let (stop, shared, config) = (stop.clone(), shared.clone(), config.clone());
            threads.push(std::thread::spawn(move || {
                accept_loop(l, &stop, &shared, &config, upstream)
            }));
        }
        FaultProxy {
            port,
            stop,
            shared,
            threads,
        }
    }

    pub(crate) fn counts(&self) -> Counts {
        self.shared.lock().unwrap().counts.clone()
    }
}

fn accept_loop(
    l: TcpListener,
    stop: &AtomicBool,
    shared: &Arc<Mutex<Shared>>,
    config: &Option<Arc<rustls::ServerConfig>>,
    upstream: u16,
) {
    let mut handlers = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match l.accept() {
            Ok((s, _)) => {
                let (shared, config) = (shared.clone(), config.clone());
                handlers.push(std::thread::spawn(move || {
                    let _ = serve(s, &shared, config, upstream);
                }));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    for h in handlers {
        let _ = h.join();
    }
}

/// The request head (up to the blank line).
fn read_head(s: &mut impl Read) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b)? == 0 || head.len() > 65_536 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(b[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// nginx's whole answer to `head`, asked on a connection of its own.
fn forward(head: &str, upstream: u16) -> std::io::Result<Vec<u8>> {
    let mut up = TcpStream::connect(("127.0.0.1", upstream))?;
    let head = head.trim_end_matches("\r\n");
    write!(up, "{head}\r\nConnection: close\r\n\r\n")?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer)?;
    Ok(answer)
}

fn serve(
    tcp: TcpStream,
    shared: &Mutex<Shared>,
    config: Option<Arc<rustls::ServerConfig>>,
    upstream: u16,
) -> std::io::Result<()> {
    tcp.set_nonblocking(false)?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    let Some(config) = config else {
        let mut tcp = tcp;
        return exchange(&mut tcp, shared, upstream);
    };
    let conn = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    if exchange(&mut tls, shared, upstream).is_ok() {
        tls.conn.send_close_notify();
    }
    tls.flush()
}

/// One request read from `s`, answered with a fault or with the upstream's answer.
fn exchange(
    s: &mut (impl Read + Write),
    shared: &Mutex<Shared>,
    upstream: u16,
) -> std::io::Result<()> {
    let head = read_head(s)?;
    let fault = shared.lock().unwrap().decide(&head);
    match fault {
        Fault::Drop => return Err(std::io::ErrorKind::ConnectionAborted.into()),
        Fault::Stall => {
            std::thread::sleep(Duration::from_millis(2500));
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        Fault::Status(code) => {
            write!(
                s,
                "HTTP/1.1 {code} Fault\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )?;
        }
        Fault::None | Fault::Truncate => {
            let answer = forward(&head, upstream)?;
            let body_at = answer
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map_or(answer.len(), |p| p + 4);
            let keep = match fault {
                Fault::Truncate if answer.len() > body_at => body_at + (answer.len() - body_at) / 2,
                _ => answer.len(),
            };
            s.write_all(&answer[..keep])?;
            if keep < answer.len() {
                s.flush()?;
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    }
    s.flush()
}
