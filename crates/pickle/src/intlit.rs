//! Integer literals of the text opcodes `INT` and `LONG`, read as CPython's unpickler reads
//! them: C `strtol(s, &end, 0)` first (which takes `0x10` and, unlike Python, `010` as octal),
//! and when that does not consume the whole line, `PyLong_FromString(s, NULL, 0)` (Python's
//! `int(s, 0)`: `0o17`, `0b101`, `1_000`, surrounding blanks). A hostile pickle uses these
//! forms to stop a reader that knows only decimal ahead of its payload.

/// The value, when `s` is a literal that fits `i64` under either rule.
pub(crate) fn parse(s: &str) -> Option<i64> {
    strtol_base0(s).or_else(|| python_int_base0(s))
}

fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{b}' | '\u{c}' | '\r')
}

fn split_sign(t: &str) -> (bool, &str) {
    match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    }
}

fn signed(neg: bool, magnitude: u64) -> Option<i64> {
    if neg {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

fn all_digits(s: &str, radix: u32) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_digit(radix))
}

/// `strtol` with base 0, required to consume everything up to the end of the line.
fn strtol_base0(s: &str) -> Option<i64> {
    let (neg, t) = split_sign(s.trim_start_matches(is_c_space));
    let hex = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .filter(|r| r.starts_with(|c: char| c.is_ascii_hexdigit()));
    let (radix, digits) = match hex {
        Some(r) => (16, r),
        None if t.starts_with('0') => (8, t),
        None => (10, t),
    };
    if !all_digits(digits, radix) {
        return None;
    }
    signed(neg, u64::from_str_radix(digits, radix).ok()?)
}

/// Python's `int(s, 0)`.
fn python_int_base0(s: &str) -> Option<i64> {
    let (neg, t) = split_sign(s.trim_matches(is_c_space));
    let prefix = t.get(..2).map(str::to_ascii_lowercase);
    let (radix, body) = match prefix.as_deref() {
        Some("0x") => (16, &t[2..]),
        Some("0o") => (8, &t[2..]),
        Some("0b") => (2, &t[2..]),
        _ => (10, t),
    };
    let body = if radix == 10 {
        body
    } else {
        body.strip_prefix('_').unwrap_or(body)
    };
    if body.starts_with('_') || body.ends_with('_') || body.contains("__") {
        return None;
    }
    let digits: String = body.chars().filter(|&c| c != '_').collect();
    if !all_digits(&digits, radix) {
        return None;
    }
    let leading_zero = radix == 10 && digits.len() > 1 && digits.starts_with('0');
    if leading_zero && digits.chars().any(|c| c != '0') {
        return None;
    }
    signed(neg, u64::from_str_radix(&digits, radix).ok()?)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn forms_cpython_accepts() {
        for (s, v) in [
            ("16", 16),
            ("-5", -5),
            ("+7", 7),
            ("0x10", 16),
            ("0X1f", 31),
            ("010", 8),
            ("0o17", 15),
            ("0b101", 5),
            ("1_000", 1000),
            ("0x_ff", 255),
            (" 12", 12),
            ("12 ", 12),
            ("000", 0),
            ("-9223372036854775808", i64::MIN),
        ] {
            assert_eq!(parse(s), Some(v), "{s}");
        }
    }

    #[test]
    fn forms_cpython_refuses() {
        for s in [
            "",
            "x",
            "08",
            "1__0",
            "_1",
            "1_",
            "0x",
            "0b2",
            "1e3",
            "9223372036854775808",
        ] {
            assert_eq!(parse(s), None, "{s}");
        }
    }
}
