//! `s3://BUCKET/KEY` (one object) and `s3://BUCKET/PREFIX/` (the objects right under a prefix,
//! laid out as a view as a Hub repo is). Credentials, region and endpoint come from the
//! environment as the AWS CLI takes them: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`, else the profile (`AWS_PROFILE`, else `default`) of the shared
//! credentials file, else of the config file; `AWS_REGION`, else `AWS_DEFAULT_REGION`, else the
//! profile's `region`, else `us-east-1`;
//! `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL` (path-style addressing), else AWS's own
//! regional endpoint (virtual-hosted addressing where the bucket's name allows it). Every request
//! is a presigned SigV4 URL made by rusty-s3 just before it is sent; the signature is in the
//! query, which no message shows. Without credentials the requests are not signed (a public
//! bucket), and a refusal says so.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusty_s3::actions::{GetObject, ListObjectsV2};
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use weightport_core::{Error, Result};

use crate::fetch::{shown_url, status_failure, Client, Failure};
use crate::object::{Expect, Sign, Target};
use crate::RemoteInput;

/// How long a presigned URL is valid: it is made just before its request, so this only has to
/// cover the clocks' difference and the request's start.
const EXPIRY: Duration = Duration::from_secs(900);
/// One page of a listing is read up to this size (1,000 keys of 1,024 bytes are about 1.5 MB).
const MAX_PAGE: u64 = 16 << 20;
/// Keys (and common prefixes) a listing may give in all, as many as a Hub repo's files.
const MAX_KEYS: usize = 100_000;
/// Pages a listing may take (a server answering empty pages with a continuation token stops here).
const MAX_PAGES: usize = 1_000;
/// An S3 key is at most 1,024 bytes.
const MAX_KEY: usize = 1_024;

/// A parsed `s3://` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct S3Ref {
    pub(crate) bucket: String,
    /// The key, or a prefix (empty, or ending in `/`).
    pub(crate) key: String,
}

fn usage(arg: &str, why: &str) -> Error {
    Error::Usage(format!("{}: {why}", weightport_core::sanitize(arg)))
}

impl S3Ref {
    pub(crate) fn parse(arg: &str) -> Result<S3Ref> {
        let rest = arg
            .strip_prefix("s3://")
            .ok_or_else(|| usage(arg, "not an s3:// address"))?;
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (1..=255).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && bucket != "."
            && bucket != "..";
        if !bucket_ok {
            return Err(usage(
                arg,
                "expected s3://BUCKET/KEY or s3://BUCKET/PREFIX/",
            ));
        }
        let dirs = key.strip_suffix('/').unwrap_or(key);
        if key.len() > MAX_KEY
            || key.starts_with('/')
            || (!dirs.is_empty() && !dirs.split('/').all(crate::safe_name))
        {
            return Err(usage(
                arg,
                "a key is names of at most 255 bytes joined by '/', none of them '.' or '..'",
            ));
        }
        Ok(S3Ref {
            bucket: bucket.to_string(),
            key: key.to_string(),
        })
    }

    fn is_prefix(&self) -> bool {
        self.key.is_empty() || self.key.ends_with('/')
    }

    fn shown(&self, key: &str) -> String {
        weightport_core::sanitize(&format!("s3://{}/{key}", self.bucket))
    }
}

/// The endpoint, region and credentials of the environment.
#[derive(Debug)]
pub(crate) struct Config {
    endpoint: String,
    /// Whether the endpoint was given (`AWS_ENDPOINT_URL[_S3]`): path-style addressing then.
    custom: bool,
    region: String,
    creds: Option<Credentials>,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Config {
    pub(crate) fn from_env() -> Result<Config> {
        let profile = Profile::read()?;
        let region = var("AWS_REGION")
            .or_else(|| var("AWS_DEFAULT_REGION"))
            .or_else(|| profile.get("region"))
            .unwrap_or_else(|| "us-east-1".into());
        let given = var("AWS_ENDPOINT_URL_S3").or_else(|| var("AWS_ENDPOINT_URL"));
        let custom = given.is_some();
        let endpoint = given.unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
        let env_pair = var("AWS_ACCESS_KEY_ID").is_some() || var("AWS_SECRET_ACCESS_KEY").is_some();
        let creds = match Credentials::from_env() {
            Some(c) => Some(c),
            None if env_pair => {
                return Err(Error::Usage(
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are set one without the other"
                        .into(),
                ))
            }
            None => profile.credentials()?,
        };
        Ok(Config {
            endpoint,
            custom,
            region,
            creds,
        })
    }

    /// Whether requests go over plain http (an `http://` endpoint given explicitly).
    pub(crate) fn plain_http(&self) -> bool {
        self.endpoint.starts_with("http://")
    }

    fn bucket(&self, name: &str) -> Result<Bucket> {
        let bad = |why: String| {
            Error::Usage(format!(
                "{}: the S3 endpoint {why}",
                shown_url(&self.endpoint)
            ))
        };
        let url: url::Url = self
            .endpoint
            .parse()
            .map_err(|e| bad(format!("is not a URL ({e})")))?;
        let region = self.region.clone();
        let styled = |style| Bucket::new(url.clone(), style, name.to_string(), region.clone());
        let b = if self.custom {
            styled(UrlStyle::Path)
        } else {
            styled(UrlStyle::VirtualHost).or_else(|_| styled(UrlStyle::Path))
        };
        b.map_err(|e| bad(format!("cannot address bucket {name}: {e}")))
    }
}

/// The shared files are read up to this size.
const MAX_PROFILE_FILE: u64 = 1 << 20;

/// The profile's sections of the shared credentials file and of the config file, as the AWS
/// CLI reads them: `AWS_PROFILE` (else `default`); `AWS_SHARED_CREDENTIALS_FILE` (else
/// `~/.aws/credentials`), section `[NAME]`; `AWS_CONFIG_FILE` (else `~/.aws/config`), section
/// `[NAME]` for `default`, else `[profile NAME]`.
struct Profile {
    name: String,
    /// Whether the name was given (`AWS_PROFILE`): then it must exist.
    given: bool,
    /// `(file, its section's keys)` of the credentials file, then the config file.
    found: Vec<(PathBuf, std::collections::HashMap<String, Option<String>>)>,
}

impl Profile {
    fn read() -> Result<Profile> {
        let given = var("AWS_PROFILE");
        let name = given.clone().unwrap_or_else(|| "default".into());
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let file = |v: &str, under: &str| {
            std::env::var_os(v)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(".aws").join(under)))
        };
        let config_section = match name.as_str() {
            "default" => name.clone(),
            n => format!("profile {n}"),
        };
        let mut found = Vec::new();
        for (path, section) in [
            (
                file("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
                name.clone(),
            ),
            (file("AWS_CONFIG_FILE", "config"), config_section),
        ] {
            let Some(path) = path else { continue };
            if let Some(keys) = section_of(&path, &section)? {
                found.push((path, keys));
            }
        }
        Ok(Profile {
            name,
            given: given.is_some(),
            found,
        })
    }

    /// `key` of the first file whose section has it.
    fn get(&self, key: &str) -> Option<String> {
        self.found
            .iter()
            .find_map(|(_, keys)| keys.get(key).cloned().flatten())
            .filter(|v| !v.trim().is_empty())
    }

    /// The key pair (and session token) of the first file whose section has both.
    fn credentials(&self) -> Result<Option<Credentials>> {
        for (_, keys) in &self.found {
            let get = |k: &str| {
                keys.get(k)
                    .cloned()
                    .flatten()
                    .filter(|v| !v.trim().is_empty())
            };
            if let (Some(id), Some(secret)) =
                (get("aws_access_key_id"), get("aws_secret_access_key"))
            {
                return Ok(Some(match get("aws_session_token") {
                    Some(t) => Credentials::new_with_token(id, secret, t),
                    None => Credentials::new(id, secret),
                }));
            }
        }
        if self.given {
            let files: Vec<String> = self
                .found
                .iter()
                .map(|(p, _)| p.display().to_string())
                .collect();
            return Err(Error::Usage(format!(
                "AWS_PROFILE {}: no aws_access_key_id and aws_secret_access_key for it ({})",
                weightport_core::sanitize(&self.name),
                match files.is_empty() {
                    true =>
                        "no section of that name in the shared credentials or config file".into(),
                    false => format!("its sections in {}", files.join(", ")),
                }
            )));
        }
        Ok(None)
    }
}

/// The keys of `section` in the configparser file `path`; `None` when the file or the section
/// is not there.
fn section_of(
    path: &Path,
    section: &str,
) -> Result<Option<std::collections::HashMap<String, Option<String>>>> {
    let bad = |why: &str| Error::io(path, "read", std::io::Error::other(why.to_string()));
    let text = match std::fs::read(path) {
        Ok(b) if b.len() as u64 > MAX_PROFILE_FILE => {
            return Err(bad(&format!("larger than {MAX_PROFILE_FILE} bytes")))
        }
        Ok(b) => String::from_utf8(b).map_err(|_| bad("not UTF-8"))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, "read", e)),
    };
    let mut ini = configparser::ini::Ini::new_cs();
    // The parser's message quotes no line, but say only where: a line may hold a secret.
    let mut map = ini.read(text).map_err(|m| {
        bad(&format!(
            "not in the INI syntax of the AWS CLI ({})",
            m.split(':').next().unwrap_or_default()
        ))
    })?;
    Ok(map.remove(section))
}

/// An object's presigned GET, made afresh for each request.
struct Presigned {
    bucket: Arc<Bucket>,
    creds: Option<Arc<Credentials>>,
    key: String,
}

impl std::fmt::Debug for Presigned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Presigned({}/{})", self.bucket.name(), self.key)
    }
}

impl Sign for Presigned {
    fn url(&self) -> String {
        GetObject::new(&self.bucket, self.creds.as_deref(), &self.key)
            .sign(EXPIRY)
            .to_string()
    }
}

/// One object of a listing.
#[derive(Debug, Clone)]
pub(crate) struct Object {
    pub(crate) key: String,
    pub(crate) size: Option<u64>,
}

/// A listing under a prefix with the delimiter `/`: the objects right under it, and the
/// "directories" (common prefixes).
#[derive(Debug, Default)]
pub(crate) struct Listing {
    pub(crate) objects: Vec<Object>,
    pub(crate) prefixes: Vec<String>,
    /// The token to ask the next page with.
    pub(crate) next: Option<String>,
}

/// One page of a ListObjectsV2 answer.
pub(crate) fn parse_page(body: &[u8]) -> std::result::Result<Listing, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("not UTF-8: {e}"))?;
    let r = ListObjectsV2::parse_response(text).map_err(|e| format!("not a listing: {e}"))?;
    if r.contents.len() + r.common_prefixes.len() > MAX_KEYS {
        return Err(format!("more than {MAX_KEYS} keys on one page"));
    }
    if let Some(k) = r
        .contents
        .iter()
        .map(|c| &c.key)
        .chain(r.common_prefixes.iter().map(|p| &p.prefix))
        .find(|k| k.len() > MAX_KEY)
    {
        return Err(format!(
            "a key of {} bytes (S3 keys have at most {MAX_KEY})",
            k.len()
        ));
    }
    Ok(Listing {
        objects: r
            .contents
            .into_iter()
            .map(|c| Object {
                key: c.key,
                size: c.size,
            })
            .collect(),
        prefixes: r.common_prefixes.into_iter().map(|p| p.prefix).collect(),
        next: r.next_continuation_token,
    })
}

/// The `Code` of an S3 error answer (`<Error><Code>NoSuchBucket</Code>…`), when it is one.
pub(crate) fn error_code(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let (_, rest) = text.split_once("<Code>")?;
    let (code, _) = rest.split_once("</Code>")?;
    let ok = (1..=64).contains(&code.len()) && code.chars().all(|c| c.is_ascii_alphanumeric());
    ok.then(|| code.to_string())
}

/// What `why` a refusal of `status` gets: the S3 error code, and a hint when nothing was signed.
fn refusal(
    url: &str,
    status: ureq::http::StatusCode,
    code: Option<String>,
    signed: bool,
) -> Failure {
    let f = status_failure(url, status);
    let extra = match (code, signed) {
        (Some(c), true)
            if ["InvalidAccessKeyId", "SignatureDoesNotMatch"].contains(&c.as_str()) =>
        {
            format!(
                " ({c}: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and the endpoint and \
                 region they are for)"
            )
        }
        (Some(c), true) => format!(" ({c})"),
        (Some(c), false) => format!(
            " ({c}; no AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment, so the \
             request was not signed)"
        ),
        (None, _) => String::new(),
    };
    match f {
        Failure::Transient(m) => Failure::Transient(m + &extra),
        Failure::Final(m) => Failure::Final(m + &extra),
        Failure::Changed(m) => Failure::Changed(m + &extra),
        Failure::Expired(m) => Failure::Expired(m + &extra),
    }
}

/// What opening an `s3://` input needs.
pub(crate) struct S3 {
    pub(crate) client: Client,
    pub(crate) r: S3Ref,
    bucket: Arc<Bucket>,
    creds: Option<Arc<Credentials>>,
}

impl S3 {
    pub(crate) fn new(client: Client, cfg: &Config, r: S3Ref) -> Result<S3> {
        Ok(S3 {
            client,
            bucket: Arc::new(cfg.bucket(&r.bucket)?),
            creds: cfg.creds.clone().map(Arc::new),
            r,
        })
    }

    /// The target of `key`, of the listed `size`.
    pub(crate) fn target(&self, key: &str, size: Option<u64>) -> (String, Target) {
        let t = Target {
            url: self.bucket.object_url(key).to_string(),
            token: None,
            expect: Expect {
                len: size,
                commit: None,
                // S3 publishes no sha256 of an object (its ETag is no digest of a multipart one).
                sha256: None,
            },
            sign: Some(Arc::new(Presigned {
                bucket: self.bucket.clone(),
                creds: self.creds.clone(),
                key: key.to_string(),
            })),
        };
        (self.r.shown(key), t)
    }

    fn page(&self, prefix: &str, token: Option<&str>) -> std::result::Result<Listing, Failure> {
        let mut l = ListObjectsV2::new(&self.bucket, self.creds.as_deref());
        // Keys asked as they are: s3s-fs echoes `encoding-type=url` without encoding, and
        // rusty-s3 would then read a `+` in a key as a space. A key XML cannot carry (a control
        // character) fails the listing instead.
        l.query_mut().remove("encoding-type");
        l.with_prefix(prefix);
        l.with_delimiter("/");
        if let Some(t) = token {
            l.with_continuation_token(t);
        }
        let url = l.sign(EXPIRY).to_string();
        let (resp, url, _) = self.client.get(&url, &[], None)?;
        let status = resp.status();
        let mut body = Vec::new();
        let read = resp
            .into_body()
            .into_reader()
            .take(MAX_PAGE + 1)
            .read_to_end(&mut body);
        if status != 200 {
            let code = error_code(&body[..body.len().min(64 << 10)]);
            return Err(refusal(&url, status, code, self.creds.is_some()));
        }
        if let Err(e) = read {
            return Err(Failure::Transient(format!("{}: {e}", shown_url(&url))));
        }
        if body.len() as u64 > MAX_PAGE {
            return Err(Failure::Final(format!(
                "{}: a listing page of more than {MAX_PAGE} bytes",
                shown_url(&url)
            )));
        }
        parse_page(&body).map_err(|why| Failure::Final(format!("{}: {why}", shown_url(&url))))
    }

    /// Everything right under `prefix` (every page, within the caps).
    pub(crate) fn list(&self, prefix: &str) -> Result<Listing> {
        let shown = PathBuf::from(self.r.shown(&self.r.key));
        let mut all = Listing::default();
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let page = crate::object::retry(|| self.page(prefix, token.as_deref()))
                .map_err(|f| crate::fetch::error(&shown, &f))?;
            all.objects.extend(page.objects);
            all.prefixes.extend(page.prefixes);
            if all.objects.len() + all.prefixes.len() > MAX_KEYS {
                return Err(too_many(&shown, &format!("more than {MAX_KEYS} keys")));
            }
            match page.next {
                Some(t) => token = Some(t),
                None => return Ok(all),
            }
        }
        Err(too_many(&shown, &format!("more than {MAX_PAGES} pages")))
    }
}

fn too_many(shown: &Path, why: &str) -> Error {
    Error::io(
        shown,
        "list",
        std::io::Error::other(format!("{why} listed")),
    )
}

/// Where the input is in the bucket: the prefix of its directory, its listing, and the object's
/// name there when it is one object.
struct Located {
    dir: String,
    listing: Listing,
    file: Option<String>,
}

impl S3 {
    /// An object's key, or a prefix (given with or without its final `/`).
    fn locate(&self) -> Result<Located> {
        let key = &self.r.key;
        if self.r.is_prefix() {
            let listing = self.list(key)?;
            return self.non_empty(key, listing, None);
        }
        let dir = key.rfind('/').map_or("", |i| &key[..=i]).to_string();
        let listing = self.list(&dir)?;
        if listing.objects.iter().any(|o| &o.key == key) {
            let name = key[dir.len()..].to_string();
            return self.non_empty(&dir, listing, Some(name));
        }
        let sub = format!("{key}/");
        if listing.prefixes.contains(&sub) {
            let listing = self.list(&sub)?;
            return self.non_empty(&sub, listing, None);
        }
        Err(Error::Usage(format!(
            "{}: no such key or prefix",
            self.r.shown(key)
        )))
    }

    fn non_empty(&self, dir: &str, listing: Listing, file: Option<String>) -> Result<Located> {
        if listing.objects.is_empty() {
            return Err(Error::Usage(format!(
                "{}: no objects under this prefix",
                self.r.shown(dir)
            )));
        }
        Ok(Located {
            dir: dir.to_string(),
            listing,
            file,
        })
    }
}

/// Opens `s3://BUCKET/KEY` or `s3://BUCKET/PREFIX/` as a view: the directory of the key (or the
/// prefix) under `BUCKET/`, so what reads a directory's name reads the prefix's last part, as
/// from `aws s3 sync` into a local directory. A prefix's view is laid out as a Hub repo's (small
/// files fetched whole, weights as stand-ins); a single object's holds stand-ins of its
/// directory's weights only (the other parts of a gguf-split set), nothing fetched. Laid out for
/// `mode` as an `hf://` view is (a scan's and a dry run's objects read in small pieces).
pub(crate) fn open(arg: &str, mode: crate::Mode) -> Result<RemoteInput> {
    let sparse = mode != crate::Mode::Convert;
    let r = S3Ref::parse(arg)?;
    let cfg = Config::from_env()?;
    let shown = r.shown(&r.key);
    let c = crate::client_of(cfg.plain_http(), Path::new(&shown))?;
    let s3 = S3::new(c, &cfg, r)?;
    let at = s3.locate()?;
    let view = crate::view_dir()?;
    let root = view
        .path()
        .join(&s3.r.bucket)
        .join(at.dir.trim_end_matches('/'));
    std::fs::create_dir_all(&root).map_err(|e| Error::io(&root, "create", e))?;
    let (mut notes, mut weights_bytes) = (Vec::new(), 0u64);
    if cfg.plain_http() {
        notes.push(format!(
            "the endpoint {} is plain http: the data and the signed requests are not encrypted \
             (the secret key itself is never sent)",
            shown_url(&cfg.endpoint)
        ));
    }
    for o in &at.listing.objects {
        let name = &o.key[at.dir.len()..];
        if name.is_empty() {
            continue; // the prefix's own "folder" object
        }
        let shown_key = s3.r.shown(&o.key);
        if !crate::safe_name(name) {
            notes.push(format!(
                "{shown_key}: a name not laid out locally; not read"
            ));
            continue;
        }
        let sibling = crate::hub::Sibling {
            path: o.key.clone(),
            size: o.size,
            lfs_sha256: None,
        };
        let (shown_o, t) = s3.target(&o.key, o.size);
        let path = root.join(name);
        if o.size == Some(0) {
            // Nothing to read (and a range of an empty object is not satisfiable): as it is.
            std::fs::write(&path, b"").map_err(|e| Error::io(&path, "create", e))?;
            continue;
        }
        match (crate::placement(&sibling, mode), at.file.is_some()) {
            (crate::Placement::Ranged, _) => {
                weights_bytes += o.size.unwrap_or(0);
                crate::record(&path, &shown_o, None);
                crate::stand_in(&path, shown_o, t, sparse)?
            }
            (_, true) => {}
            (crate::Placement::Whole, false) => {
                let got = crate::fetch_whole(&s3.client, &path, &shown_o, &t, None)?;
                crate::record(&path, &shown_o, Some(got));
            }
            (crate::Placement::LeftOut(why), false) => {
                notes.push(format!("{shown_key}: {why}; not read"));
            }
        }
    }
    let path = match &at.file {
        Some(name) => root.join(name),
        None => root,
    };
    Ok(RemoteInput {
        path,
        shown,
        commit: None,
        notes,
        view,
        weights_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_into_bucket_and_key() {
        let r = S3Ref::parse("s3://b/dir/model.safetensors").unwrap();
        assert_eq!(
            (r.bucket.as_str(), r.key.as_str()),
            ("b", "dir/model.safetensors")
        );
        assert!(!r.is_prefix());
        assert!(S3Ref::parse("s3://b/dir/").unwrap().is_prefix());
        assert!(S3Ref::parse("s3://b").unwrap().is_prefix());
        for bad in [
            "s3://",
            "s3:///k",
            "s3://b/../x",
            "s3://b//x",
            "s3://b/a/./c",
            "s3://b c/k",
        ] {
            assert!(S3Ref::parse(bad).is_err(), "{bad}");
        }
    }

    fn config(endpoint: Option<&str>, token: Option<&str>) -> Config {
        Config {
            endpoint: endpoint.map_or("https://s3.eu-west-1.amazonaws.com".into(), Into::into),
            custom: endpoint.is_some(),
            region: "eu-west-1".into(),
            creds: Some(match token {
                Some(t) => Credentials::new_with_token("AKID", "SECRET/KEY", t),
                None => Credentials::new("AKID", "SECRET/KEY"),
            }),
        }
    }

    #[test]
    fn custom_endpoints_are_path_style_and_aws_virtual_hosted() {
        let c = config(Some("http://127.0.0.1:9000/base"), None);
        assert!(c.plain_http());
        let b = c.bucket("models").unwrap();
        assert_eq!(
            b.object_url("a b/c+d").as_str(),
            "http://127.0.0.1:9000/base/models/a%20b/c%2Bd"
        );
        let c = config(None, None);
        assert!(!c.plain_http());
        let b = c.bucket("models").unwrap();
        assert_eq!(
            b.object_url("k").as_str(),
            "https://models.s3.eu-west-1.amazonaws.com/k"
        );
        // A name that cannot be a host name: path-style.
        let b = c.bucket("My_Bucket").unwrap();
        assert_eq!(
            b.object_url("k").as_str(),
            "https://s3.eu-west-1.amazonaws.com/My_Bucket/k"
        );
    }

    #[test]
    fn signed_urls_carry_the_token_and_signature_only_in_the_query_never_shown() {
        let c = config(Some("https://s3.example:8443"), Some("SESSION-TOKEN"));
        let s3 = S3::new(
            Client::new().unwrap(),
            &c,
            S3Ref::parse("s3://models/k/x.gguf").unwrap(),
        )
        .unwrap();
        let (shown, t) = s3.target("k/x.gguf", Some(7));
        assert_eq!(shown, "s3://models/k/x.gguf");
        let url = t.sign.as_ref().unwrap().url();
        assert!(
            url.contains("X-Amz-Signature=") && url.contains("X-Amz-Security-Token=SESSION-TOKEN"),
            "{url}"
        );
        assert!(!url.contains("SECRET"), "{url}");
        assert_eq!(shown_url(&url), "https://s3.example:8443/models/k/x.gguf");
        assert!(!format!("{t:?}").contains("SECRET"));
    }

    #[test]
    fn error_codes_are_read_from_error_answers_only() {
        let e =
            b"<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>m</Message></Error>";
        assert_eq!(error_code(e).as_deref(), Some("NoSuchBucket"));
        assert_eq!(error_code(b"<Code>a b</Code>"), None);
        assert_eq!(error_code(b"<Code>x"), None);
    }
}
