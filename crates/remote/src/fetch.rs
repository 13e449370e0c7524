//! HTTPS requests: one agent (rustls, roots from `SSL_CERT_FILE` when set), redirects followed
//! by hand (https only, the token kept to its own host), and the classification of every failure
//! as worth retrying or final.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use ureq::http::{header, Response, StatusCode, Uri};
use ureq::Body;
use weightport_core::Error;

/// Redirects followed per request at most.
const MAX_REDIRECTS: usize = 5;
/// Attempts per range (the first and the retries), each resuming from the last byte received.
pub(crate) const ATTEMPTS: u32 = 6;

/// Why a request did not give its bytes.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// Worth another attempt: a reset, a timeout, a 5xx or 429, a body cut short.
    Transient(String),
    /// Final: the object changed, the server answered what cannot be used, a 4xx.
    Final(String),
    /// The object is not the version first read.
    Changed(String),
    /// A redirect's location refused a range as a signed URL refuses one that expired (403,
    /// 400, 410): the address that redirected may be resolved again (see `object`).
    Expired(String),
}

/// A bearer token and the one authority (host and port) it may be sent to.
#[derive(Clone)]
pub(crate) struct Token {
    pub(crate) value: String,
    pub(crate) authority: String,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token(<redacted> for {})", self.authority)
    }
}

/// The HTTP client every remote object shares.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    agent: ureq::Agent,
}

/// The certificates of `SSL_CERT_FILE`, when set (a custom CA, as curl and Python take it).
fn root_certs() -> Result<ureq::tls::RootCerts, String> {
    let Some(file) = std::env::var_os("SSL_CERT_FILE") else {
        return Ok(ureq::tls::RootCerts::WebPki);
    };
    let pem = std::fs::read(&file)
        .map_err(|e| format!("SSL_CERT_FILE {}: {e}", file.to_string_lossy()))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        if let Ok(ureq::tls::PemItem::Certificate(c)) = item {
            certs.push(c);
        }
    }
    if certs.is_empty() {
        return Err(format!(
            "SSL_CERT_FILE {}: no PEM certificate in it",
            file.to_string_lossy()
        ));
    }
    Ok(ureq::tls::RootCerts::new_with_certs(&certs))
}

/// Seconds a response or a body may stall before the attempt counts as failed:
/// `WEIGHTPORT_HTTP_TIMEOUT`, else 30.
fn stall_timeout() -> Duration {
    let secs = std::env::var("WEIGHTPORT_HTTP_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0 && *s < 3600.0)
        .unwrap_or(30.0);
    Duration::from_secs_f64(secs)
}

impl Client {
    pub(crate) fn new() -> Result<Client, String> {
        Client::with_plain_http(false)
    }

    /// A client that also speaks plain http (an S3 endpoint given as `http://`: see `s3`).
    pub(crate) fn with_plain_http(plain_http: bool) -> Result<Client, String> {
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(root_certs()?)
            .build();
        let stall = Some(stall_timeout());
        let config = ureq::Agent::config_builder()
            .tls_config(tls)
            .https_only(!plain_http)
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(concat!("weightport/", env!("CARGO_PKG_VERSION")))
            // Identity only: ranges are of the stored bytes.
            .accept_encoding("identity")
            .timeout_connect(stall)
            .timeout_recv_response(stall)
            .timeout_per_read(stall)
            .build();
        Ok(Client {
            agent: config.new_agent(),
        })
    }

    /// GET `url` with `headers`, redirects followed (at most [`MAX_REDIRECTS`], https only);
    /// `token` goes only to its own authority. Returns the final response, its URL, and the
    /// Hub's headers seen on the way.
    pub(crate) fn get(
        &self,
        url: &str,
        headers: &[(&str, String)],
        token: Option<&Token>,
    ) -> Result<(Response<Body>, String, Hub), Failure> {
        let mut url = url.to_string();
        let mut hub = Hub::default();
        for _ in 0..=MAX_REDIRECTS {
            let (resp, next) = self.get_once(&url, headers, token)?;
            hub.note(&resp);
            match next {
                None => return Ok((resp, url, hub)),
                Some(next) => url = next,
            }
        }
        Err(Failure::Final(format!(
            "{}: more than {MAX_REDIRECTS} redirects",
            shown_url(&url)
        )))
    }

    /// One GET of `url` (no redirect followed): the response, and where it redirects when it
    /// does (an https URL).
    pub(crate) fn get_once(
        &self,
        url: &str,
        headers: &[(&str, String)],
        token: Option<&Token>,
    ) -> Result<(Response<Body>, Option<String>), Failure> {
        let uri: Uri = url
            .parse()
            .map_err(|_| Failure::Final(format!("{} is not a URL", shown_url(url))))?;
        let mut req = self.agent.get(url);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        if let Some(t) =
            token.filter(|t| uri.authority().map(|a| a.as_str()) == Some(&*t.authority))
        {
            req = req.header(header::AUTHORIZATION, format!("Bearer {}", t.value));
        }
        let resp = req.call().map_err(|e| transport(url, e))?;
        if !resp.status().is_redirection() || resp.status() == StatusCode::NOT_MODIFIED {
            return Ok((resp, None));
        }
        let next = redirect_target(&uri, &resp)?;
        Ok((resp, Some(next)))
    }
}

/// What the Hub says of a file on its `/resolve/` answer (a redirect to the LFS store, or
/// the file itself): the commit the revision resolved to, the LFS object's ETag and size.
#[derive(Debug, Default, Clone)]
pub(crate) struct Hub {
    pub(crate) commit: Option<String>,
    pub(crate) linked_etag: Option<String>,
    pub(crate) linked_size: Option<String>,
}

impl Hub {
    pub(crate) fn note(&mut self, resp: &Response<Body>) {
        let get = |n: &str| header_str(resp, n).map(str::to_string);
        self.commit = get("x-repo-commit").or(self.commit.take());
        self.linked_etag = get("x-linked-etag").or(self.linked_etag.take());
        self.linked_size = get("x-linked-size").or(self.linked_size.take());
    }
}

/// Where a 3xx response sends the request: an https URL (relative ones resolved against `from`).
fn redirect_target(from: &Uri, resp: &Response<Body>) -> Result<String, Failure> {
    let loc = resp
        .headers()
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| Failure::Final(format!("{} without a Location", resp.status())))?;
    let next = if loc.starts_with('/') && !loc.starts_with("//") {
        format!(
            "https://{}{loc}",
            from.authority().map(|a| a.as_str()).unwrap_or_default()
        )
    } else {
        loc.to_string()
    };
    if !next.starts_with("https://") {
        return Err(Failure::Final(format!(
            "redirected to {}: only https redirects are followed",
            shown_url(&next)
        )));
    }
    Ok(next)
}

/// A transport error as a failure: connection, TLS and timeouts are worth a retry, except a
/// certificate the roots do not verify.
fn transport(url: &str, e: ureq::Error) -> Failure {
    let text = e.to_string();
    let m = format!("{}: {text}", shown_url(url));
    match e {
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) | ureq::Error::BadUri(_) => Failure::Final(m),
        _ if text.contains("certificate") || text.contains("UnknownIssuer") => Failure::Final(m),
        _ => Failure::Transient(m),
    }
}

/// A status other than the one expected, as a failure.
pub(crate) fn status_failure(url: &str, status: StatusCode) -> Failure {
    let m = format!("{}: the server answered {status}", shown_url(url));
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        Failure::Transient(m)
    } else if status == StatusCode::PRECONDITION_FAILED {
        Failure::Changed(m)
    } else {
        Failure::Final(m)
    }
}

/// A header's value as text.
pub(crate) fn header_str<'a>(resp: &'a Response<Body>, name: &str) -> Option<&'a str> {
    resp.headers().get(name).and_then(|v| v.to_str().ok())
}

/// Reads the body into `buf` until it is full; returns how many bytes came, and the failure that
/// cut it short. A body longer than `buf` is not read past it.
pub(crate) fn read_body(
    resp: Response<Body>,
    buf: &mut [u8],
    url: &str,
) -> (usize, Option<Failure>) {
    let mut reader = resp.into_body().into_reader();
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => {
                let m = format!(
                    "{}: the body ended after {got} of {} bytes",
                    shown_url(url),
                    buf.len()
                );
                return (got, Some(Failure::Transient(m)));
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                let m = format!("{}: {e} after {got} bytes of the body", shown_url(url));
                return (got, Some(Failure::Transient(m)));
            }
        }
    }
    (got, None)
}

/// A URL as messages show it: without its query (signed URLs carry credentials there) and
/// without any user information.
pub(crate) fn shown_url(url: &str) -> String {
    let no_query = url.split(['?', '#']).next().unwrap_or_default();
    match no_query.split_once("://") {
        Some((scheme, rest)) => {
            let (auth, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = auth.rsplit('@').next().unwrap_or_default();
            weightport_core::sanitize(&format!("{scheme}://{host}{path}"))
        }
        None => weightport_core::sanitize(no_query),
    }
}

/// The pause before retry `n` (1-based): 0.2 s doubling, at most 2 s (5 s over a range's
/// five retries).
pub(crate) fn backoff(n: u32) -> Duration {
    Duration::from_millis((100u64 << n.min(5)).min(2_000))
}

/// The error of a remote read of `name`.
pub(crate) fn error(name: &Path, f: &Failure) -> Error {
    match f {
        Failure::Changed(m) => Error::io(
            name,
            "read",
            std::io::Error::other(format!(
                "input changed while reading (the remote object is no longer the version first \
                 read: {m})"
            )),
        ),
        Failure::Transient(m) => Error::io(
            name,
            "fetch",
            std::io::Error::other(format!("{m} (gave up after {ATTEMPTS} attempts)")),
        ),
        Failure::Final(m) | Failure::Expired(m) => {
            Error::io(name, "fetch", std::io::Error::other(m.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_urls_carry_no_query_or_credentials() {
        assert_eq!(
            shown_url("https://u:p@cdn.example/lfs/abc?X-Amz-Signature=s#f"),
            "https://cdn.example/lfs/abc"
        );
        assert_eq!(shown_url("https://h/a/b"), "https://h/a/b");
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert!(backoff(1) < backoff(2));
        assert_eq!(backoff(30), Duration::from_secs(2));
    }
}
