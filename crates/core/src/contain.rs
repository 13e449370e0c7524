//! Containing panics of third-party parsers on hostile input.
//!
//! Some well-kept crates we rely on still panic on malformed input (tokenizers 0.22 `expect`s
//! while deserializing a `tokenizer.json` decoder). [`contain_panic`] turns such a panic into an
//! error the caller reports like any other, and marks the thread so the CLI's panic hook stays
//! quiet about it ([`panic_is_contained`]).

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`; a panic inside it becomes `Err(panic message)`.
pub fn contain_panic<R>(f: impl FnOnce() -> R) -> std::result::Result<R, String> {
    let outer = CONTAINED.with(|c| c.replace(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    CONTAINED.with(|c| c.set(outer));
    r.map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into())
    })
}

/// True while the current thread runs inside [`contain_panic`] (for panic hooks).
pub fn panic_is_contained() -> bool {
    CONTAINED.with(|c| c.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_error_and_the_flag_resets() {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r: std::result::Result<(), String> = contain_panic(|| panic!("bad decoder"));
        std::panic::set_hook(hook);
        assert_eq!(r, Err("bad decoder".to_string()));
        assert!(!panic_is_contained());
        assert_eq!(contain_panic(|| 7), Ok(7));
    }
}
