//! What a remote server answers (issue 33): the first byte picks the model API's JSON listing,
//! a `Content-Range` header, a URL shown in messages, an `hf://` address, a view file name, an
//! S3 ListObjectsV2 page (XML), an S3 error answer or an `s3://` address; the rest is its text.
//! No panic; an accepted listing has a 40-digit lowercase commit; a range is only parsed (the
//! caller compares it with the range asked); a shown URL never keeps a query, a fragment or
//! user information; an accepted address has no `.`/`..` path component, and a name accepted
//! for a view is one path component; an accepted S3 page is within the key caps, and an S3
//! error code is a short word.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weightport_remote::answers;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match pick % 8 {
        0 => {
            if let Ok((commit, files)) = answers::listing(rest) {
                assert_eq!(commit.len(), 40);
                assert!(commit
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
                assert!(files.len() <= 100_000);
            }
        }
        1 => {
            let _ = answers::content_range(&text);
        }
        2 => {
            let shown = answers::shown_url(&text);
            assert!(!shown.contains('?') && !shown.contains('#'), "{shown}");
            if let Some((_, rest)) = shown.split_once("://") {
                let authority = rest.split('/').next().unwrap_or_default();
                assert!(!authority.contains('@'), "{shown}");
            }
        }
        3 => {
            if let Some((repo, rev, path)) = answers::hub_ref(&text) {
                assert_eq!(repo.matches('/').count(), 1);
                assert!(!rev.contains('/'));
                assert!(path.split('/').all(|c| c != ".." && c != "."), "{path}");
            }
        }
        4 => {
            if answers::safe_name(&text) {
                assert!(!text.contains('/') && text != ".." && text != ".");
            }
        }
        5 => {
            if let Ok((objects, prefixes, _next)) = answers::s3_page(rest) {
                assert!(objects.len() + prefixes.len() <= 100_000);
                let keys = objects.iter().map(|o| &o.0).chain(prefixes.iter());
                assert!(keys.into_iter().all(|k| k.len() <= 1024));
            }
        }
        6 => {
            if let Some(code) = answers::s3_error_code(rest) {
                assert!((1..=64).contains(&code.len()), "{code}");
                assert!(code.chars().all(|c| c.is_ascii_alphanumeric()), "{code}");
            }
        }
        _ => {
            if let Some((bucket, key)) = answers::s3_ref(&text) {
                assert!(!bucket.is_empty() && !bucket.contains('/'), "{bucket}");
                assert!(!key.starts_with('/') && key.len() <= 1024, "{key}");
                let dirs = key.strip_suffix('/').unwrap_or(&key);
                assert!(
                    dirs.is_empty()
                        || dirs
                            .split('/')
                            .all(|c| !c.is_empty() && c != "." && c != ".."),
                    "{key}"
                );
            }
        }
    }
});
