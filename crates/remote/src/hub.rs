//! `hf://ORG/REPO[@REVISION][/PATH]`: the Hub's layout. The endpoint is `HF_ENDPOINT` (default
//! the public Hub), the token `HF_TOKEN` or the file huggingface_hub keeps it in; the model API
//! (`/api/models/{repo}/revision/{rev}?blobs=true`) gives the commit the revision stands at and
//! the file list with sizes, and every file is then read at that commit through
//! `{endpoint}/{repo}/resolve/{commit}/{path}`.

use std::path::PathBuf;

use serde_json::Value;
use weightport_core::{Error, Result};

use crate::fetch::{read_body, shown_url, status_failure, Client, Failure, Token};

/// The model API's answer is read up to this size.
const MAX_LISTING: u64 = 32 << 20;
/// Files a listing may name.
const MAX_FILES: usize = 100_000;

/// A parsed `hf://` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HubRef {
    pub(crate) repo: String,
    pub(crate) revision: String,
    pub(crate) path: String,
}

fn usage(arg: &str, why: &str) -> Error {
    Error::Usage(format!("{}: {why}", weightport_core::sanitize(arg)))
}

/// A repo id's part: letters, digits, `-`, `_`, `.`, not `.`/`..`.
fn valid_part(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

impl HubRef {
    pub(crate) fn parse(arg: &str) -> Result<HubRef> {
        let rest = arg
            .strip_prefix("hf://")
            .ok_or_else(|| usage(arg, "not an hf:// address"))?;
        let mut parts = rest.splitn(3, '/');
        let org = parts.next().unwrap_or_default();
        let name_rev = parts.next().unwrap_or_default();
        let path = parts.next().unwrap_or_default().trim_end_matches('/');
        let (name, revision) = match name_rev.split_once('@') {
            Some((n, r)) => (n, r),
            None => (name_rev, "main"),
        };
        if !valid_part(org) || !valid_part(name) {
            return Err(usage(arg, "expected hf://ORG/REPO[@REVISION][/PATH]"));
        }
        if revision.is_empty()
            || !revision
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(usage(
                arg,
                "a revision is a branch, tag or commit of letters, digits, '-', '_' and '.'",
            ));
        }
        if path.split('/').any(|c| c == ".." || c == ".") || path.starts_with('/') {
            return Err(usage(
                arg,
                "a path inside the repo has no '.' or '..' component",
            ));
        }
        Ok(HubRef {
            repo: format!("{org}/{name}"),
            revision: revision.to_string(),
            path: path.to_string(),
        })
    }
}

/// The Hub endpoint: `HF_ENDPOINT`, else the public Hub.
pub(crate) fn endpoint() -> String {
    std::env::var("HF_ENDPOINT")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "https://huggingface.co".into())
        .trim_end_matches('/')
        .to_string()
}

/// The token huggingface_hub would send: `HF_TOKEN`, else the file at `HF_TOKEN_PATH`, else
/// `$HF_HOME/token` (`HF_HOME` defaulting to `$XDG_CACHE_HOME/huggingface` or
/// `~/.cache/huggingface`).
fn token_value() -> Option<String> {
    if let Some(t) = std::env::var("HF_TOKEN")
        .ok()
        .filter(|t| !t.trim().is_empty())
    {
        return Some(t.trim().to_string());
    }
    let file = std::env::var_os("HF_TOKEN_PATH")
        .map(PathBuf::from)
        .or_else(|| {
            let home = std::env::var_os("HF_HOME").map(PathBuf::from).or_else(|| {
                let cache = std::env::var_os("XDG_CACHE_HOME")
                    .map(PathBuf::from)
                    .or_else(|| {
                        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache"))
                    })?;
                Some(cache.join("huggingface"))
            })?;
            Some(home.join("token"))
        })?;
    let text = std::fs::read_to_string(file).ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty() && t.len() < 4096)
}

/// The token, bound to the endpoint's host and port.
pub(crate) fn token(endpoint: &str) -> Option<Token> {
    let authority = endpoint
        .strip_prefix("https://")?
        .split('/')
        .next()?
        .to_string();
    Some(Token {
        value: token_value()?,
        authority,
    })
}

/// One file of a listing.
#[derive(Debug, Clone)]
pub(crate) struct Sibling {
    pub(crate) path: String,
    pub(crate) size: Option<u64>,
    pub(crate) lfs_sha256: Option<String>,
}

/// What the model API says of a revision.
#[derive(Debug)]
pub(crate) struct Listing {
    pub(crate) commit: String,
    pub(crate) files: Vec<Sibling>,
}

fn get_listing(
    client: &Client,
    url: &str,
    token: Option<&Token>,
) -> std::result::Result<Vec<u8>, Failure> {
    let (resp, final_url, _) = client.get(url, &[], token)?;
    if resp.status() != 200 {
        return Err(status_failure(&final_url, resp.status()));
    }
    let len = resp.body().content_length();
    let Some(len) = len.filter(|&n| n <= MAX_LISTING) else {
        return Err(Failure::Final(format!(
            "{}: the file list is not given with a length of at most {MAX_LISTING} bytes",
            shown_url(&final_url)
        )));
    };
    let mut buf = vec![0u8; len as usize];
    match read_body(resp, &mut buf, &final_url) {
        (_, Some(f)) => Err(f),
        (_, None) => Ok(buf),
    }
}

/// Lists `r`'s files at its revision, and the commit the revision stands at.
pub(crate) fn list(
    client: &Client,
    endpoint: &str,
    r: &HubRef,
    token: Option<&Token>,
) -> Result<Listing> {
    let url = format!(
        "{endpoint}/api/models/{}/revision/{}?blobs=true",
        r.repo, r.revision
    );
    let shown = PathBuf::from(shown_url(&url));
    let body = crate::object::retry(|| get_listing(client, &url, token))
        .map_err(|f| crate::fetch::error(&shown, &f))?;
    parse_listing(&body).map_err(|why| Error::io(&shown, "list", std::io::Error::other(why)))
}

/// The model API's answer: its commit (`sha`, 40 hex digits) and `siblings`.
pub(crate) fn parse_listing(body: &[u8]) -> std::result::Result<Listing, String> {
    let doc: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let commit = doc["sha"].as_str().unwrap_or_default();
    if commit.len() != 40 || !commit.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err("no 40-digit commit (`sha`) in the model API's answer".into());
    }
    let siblings = doc["siblings"]
        .as_array()
        .ok_or_else(|| "no `siblings` list".to_string())?;
    if siblings.len() > MAX_FILES {
        return Err(format!("more than {MAX_FILES} files listed"));
    }
    let files = siblings
        .iter()
        .filter_map(|s| {
            Some(Sibling {
                path: s["rfilename"].as_str()?.to_string(),
                size: s["size"].as_u64().or(s["lfs"]["size"].as_u64()),
                lfs_sha256: s["lfs"]["sha256"].as_str().map(str::to_string),
            })
        })
        .collect();
    Ok(Listing {
        commit: commit.to_ascii_lowercase(),
        files,
    })
}

/// The URL of `path` at `commit`.
pub(crate) fn resolve_url(endpoint: &str, r: &HubRef, commit: &str, path: &str) -> String {
    format!("{endpoint}/{}/resolve/{commit}/{path}", r.repo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_with_revision_and_path() {
        let r = HubRef::parse("hf://org/repo@v1.0/sub/model.safetensors").unwrap();
        assert_eq!(r.repo, "org/repo");
        assert_eq!(r.revision, "v1.0");
        assert_eq!(r.path, "sub/model.safetensors");
        let r = HubRef::parse("hf://org/repo").unwrap();
        assert_eq!((r.revision.as_str(), r.path.as_str()), ("main", ""));
        for bad in [
            "hf://org",
            "hf://org/../x",
            "hf://o/r/../../etc",
            "hf://o/r@",
            "hf://o/r@a b",
        ] {
            assert!(HubRef::parse(bad).is_err(), "{bad}");
        }
    }
}
