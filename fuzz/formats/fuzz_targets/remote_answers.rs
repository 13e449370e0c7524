//! What a remote server answers (issue 33): the first byte picks the model API's JSON listing,
//! a `Content-Range` header, a URL shown in messages, or an `hf://` address; the rest is its
//! text. No panic; an accepted listing has a 40-digit lowercase commit; a range is only parsed
//! (the caller compares it with the range asked); a shown URL never keeps a query, a fragment
//! or user information; an accepted address has no `.`/`..` path component, and a name
//! accepted for a view is one path component.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weightport_remote::answers;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match pick % 5 {
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
        _ => {
            if answers::safe_name(&text) {
                assert!(!text.contains('/') && text != ".." && text != ".");
            }
        }
    }
});
