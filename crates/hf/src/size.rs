//! Shard-size strings: `500MB`, `5GB` (decimal, as huggingface_hub and gguf-split), `5GiB`
//! (binary), or a plain byte count.

/// Parses a size. Units are case-insensitive; `B`, `KB`/`MB`/`GB`/`TB` are powers of 1000,
/// `KiB`/`MiB`/`GiB`/`TiB` powers of 1024; a fractional value is allowed (`0.5GB`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1_000,
        "mb" | "m" => 1_000_000,
        "gb" | "g" => 1_000_000_000,
        "tb" | "t" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return Err(format!("invalid size `{s}`: unknown unit `{unit}` (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)")),
    };
    if num.is_empty() {
        return Err(format!("invalid size `{s}`: no number"));
    }
    let bytes = if let Ok(n) = num.parse::<u64>() {
        n.checked_mul(mult)
    } else {
        let f: f64 = num.parse().map_err(|_| format!("invalid size `{s}`"))?;
        let v = f * mult as f64;
        (v.is_finite() && v < u64::MAX as f64).then_some(v as u64)
    };
    match bytes {
        Some(0) => Err(format!("invalid size `{s}`: must be greater than zero")),
        Some(b) => Ok(b),
        None => Err(format!("invalid size `{s}`: too large")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_and_binary_units() {
        assert_eq!(parse_size("500MB"), Ok(500_000_000));
        assert_eq!(parse_size("5GB"), Ok(5_000_000_000));
        assert_eq!(parse_size("5gb"), Ok(5_000_000_000));
        assert_eq!(parse_size("5 GB"), Ok(5_000_000_000));
        assert_eq!(parse_size("0.5GB"), Ok(500_000_000));
        assert_eq!(parse_size("5GiB"), Ok(5 * (1 << 30)));
        assert_eq!(parse_size("30000"), Ok(30_000));
        assert!(parse_size("5XB").is_err());
        assert!(parse_size("GB").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("99999999999TB").is_err());
    }
}
