//! `NAME[SLICE]`: a tensor and a box of its elements, in numpy's basic-slicing syntax.
//!
//! ```text
//! NAME                     the whole tensor
//! NAME[1024:1152]          rows 1024..1152 (the other axes whole)
//! NAME[:, -8:]             the last 8 columns of every row
//! NAME[3, 0:16, ...]       an int index drops its axis; `...` stands for the axes not named
//! ```
//! Each item is `a:b` (either bound may be left out; negative bounds count from the end), an int,
//! `:` or `...`. Steps are not accepted (`a:b:1` is). Stricter than numpy, which clamps a slice
//! silently: a bound past the axis, or a slice selecting nothing, is an error naming the axis
//! (an edit of nothing is a mistake, not a no-op).

/// One item between the brackets, before it meets a shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// `a:b`, bounds as written (`None` when left out).
    Slice(Option<i64>, Option<i64>),
    /// An int index.
    Index(i64),
    /// `...`.
    Ellipsis,
}

/// A parsed `NAME[SLICE]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The tensor name.
    pub name: String,
    /// The items (empty: the whole tensor).
    pub items: Vec<Item>,
    /// The text as given, for messages.
    pub text: String,
}

/// The elements a selection picks in a tensor of a given shape: per axis a start and a length,
/// and whether an int index dropped the axis (for the shape of a slice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// First index on each axis.
    pub start: Vec<u64>,
    /// Number of indices on each axis (at least 1).
    pub len: Vec<u64>,
    /// Axes picked by an int index (dropped from a slice's shape, as numpy does).
    pub dropped: Vec<bool>,
}

fn parse_int(s: &str, whole: &str) -> Result<i64, String> {
    let t = s.trim();
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
        return Err(format!("`{whole}`: `{t}` is not an integer index"));
    }
    t.replace('_', "")
        .parse::<i64>()
        .map_err(|_| format!("`{whole}`: index `{t}` does not fit a 64-bit integer"))
}

fn parse_item(s: &str, whole: &str) -> Result<Item, String> {
    let t = s.trim();
    if t == "..." {
        return Ok(Item::Ellipsis);
    }
    let parts: Vec<&str> = t.split(':').collect();
    let bound = |p: &str| -> Result<Option<i64>, String> {
        if p.trim().is_empty() {
            Ok(None)
        } else {
            parse_int(p, whole).map(Some)
        }
    };
    match parts.as_slice() {
        [i] => parse_int(i, whole).map(Item::Index),
        [a, b] => Ok(Item::Slice(bound(a)?, bound(b)?)),
        [a, b, step] => match bound(step)? {
            None | Some(1) => Ok(Item::Slice(bound(a)?, bound(b)?)),
            Some(k) => Err(format!(
                "`{whole}`: step {k} is not supported (only contiguous slices a:b)"
            )),
        },
        _ => Err(format!("`{whole}`: `{t}` is not a slice item")),
    }
}

impl Selection {
    /// Parses `NAME` or `NAME[ITEMS]`.
    pub fn parse(text: &str) -> Result<Selection, String> {
        let t = text.trim();
        let (name, items) = match t
            .strip_suffix(']')
            .and_then(|r| r.rfind('[').map(|i| (r, i)))
        {
            Some((rest, i)) => {
                let inner = &rest[i + 1..];
                let items = if inner.trim().is_empty() {
                    Vec::new()
                } else {
                    inner
                        .split(',')
                        .map(|p| parse_item(p, text))
                        .collect::<Result<Vec<_>, _>>()?
                };
                (&rest[..i], items)
            }
            None => (t, Vec::new()),
        };
        if name.is_empty() {
            return Err(format!("`{text}`: no tensor name before the brackets"));
        }
        if items.iter().filter(|i| **i == Item::Ellipsis).count() > 1 {
            return Err(format!("`{text}`: more than one `...`"));
        }
        Ok(Selection {
            name: name.to_string(),
            items,
            text: text.to_string(),
        })
    }

    /// The items, one per axis of a tensor of `ndim` axes (`...` and missing trailing axes
    /// expanded to `:`).
    fn per_axis(&self, ndim: usize) -> Result<Vec<Item>, String> {
        let named = self.items.iter().filter(|i| **i != Item::Ellipsis).count();
        if named > ndim {
            return Err(format!(
                "too many indices: {named} for a tensor of {ndim} dimensions"
            ));
        }
        let mut out = Vec::with_capacity(ndim);
        for it in &self.items {
            if *it == Item::Ellipsis {
                out.extend(std::iter::repeat_n(Item::Slice(None, None), ndim - named));
            } else {
                out.push(it.clone());
            }
        }
        out.resize(ndim, Item::Slice(None, None));
        Ok(out)
    }

    /// The region this selection picks in `shape`, or why it picks none.
    pub fn region(&self, shape: &[u64]) -> Result<Region, String> {
        let items = self.per_axis(shape.len())?;
        let mut r = Region {
            start: Vec::with_capacity(shape.len()),
            len: Vec::with_capacity(shape.len()),
            dropped: Vec::with_capacity(shape.len()),
        };
        for (axis, (item, &n)) in items.iter().zip(shape).enumerate() {
            let (s, l, drop) = resolve(item, n, axis)?;
            r.start.push(s);
            r.len.push(l);
            r.dropped.push(drop);
        }
        Ok(r)
    }
}

/// Normalises a bound of an axis of size `n`: negative counts from the end; past either end is
/// an error (numpy would clamp).
fn bound(b: i64, n: u64, axis: usize, what: &str) -> Result<u64, String> {
    let n_i = i128::from(n);
    let v = if b < 0 {
        n_i + i128::from(b)
    } else {
        i128::from(b)
    };
    if v < 0 || v > n_i {
        return Err(format!(
            "slice {what} {b} is out of bounds for axis {axis} with size {n}"
        ));
    }
    Ok(v as u64)
}

fn resolve(item: &Item, n: u64, axis: usize) -> Result<(u64, u64, bool), String> {
    match *item {
        Item::Index(i) => {
            let v = if i < 0 {
                i128::from(n) + i128::from(i)
            } else {
                i128::from(i)
            };
            if v < 0 || v >= i128::from(n) {
                return Err(format!(
                    "index {i} is out of bounds for axis {axis} with size {n}"
                ));
            }
            Ok((v as u64, 1, true))
        }
        Item::Slice(a, b) => {
            let s = a.map_or(Ok(0), |a| bound(a, n, axis, "start"))?;
            let e = b.map_or(Ok(n), |b| bound(b, n, axis, "stop"))?;
            if e <= s {
                return Err(format!(
                    "slice {}:{} of axis {axis} (size {n}) selects nothing",
                    a.map(|v| v.to_string()).unwrap_or_default(),
                    b.map(|v| v.to_string()).unwrap_or_default()
                ));
            }
            Ok((s, e - s, false))
        }
        Item::Ellipsis => Ok((0, n, false)),
    }
}

impl Region {
    /// The whole of a tensor of `shape`.
    pub fn whole(shape: &[u64]) -> Region {
        Region {
            start: vec![0; shape.len()],
            len: shape.to_vec(),
            dropped: vec![false; shape.len()],
        }
    }

    /// Number of elements picked.
    pub fn numel(&self) -> u64 {
        self.len.iter().product()
    }

    /// The shape of the picked elements as numpy gives a slice (int-indexed axes dropped).
    pub fn out_shape(&self) -> Vec<u64> {
        self.len
            .iter()
            .zip(&self.dropped)
            .filter(|(_, d)| !**d)
            .map(|(l, _)| *l)
            .collect()
    }

    /// True when the region covers every index of the last axis of `shape` (a whole row).
    pub fn whole_rows(&self, shape: &[u64]) -> bool {
        match (self.len.last(), shape.last()) {
            (Some(l), Some(n)) => *l == *n,
            _ => true,
        }
    }

    /// The contiguous runs `(first element, elements)` the region covers in a row-major tensor
    /// of `shape`, in order. `cap` bounds how many runs may be listed.
    pub fn runs(&self, shape: &[u64], cap: u64) -> Result<Vec<(u64, u64)>, String> {
        let nd = shape.len();
        if nd == 0 {
            return Ok(vec![(0, 1)]);
        }
        // Axes k.. are whole: each run spans axis k-1's picked range times those axes.
        let mut k = nd;
        while k > 0 && self.start[k - 1] == 0 && self.len[k - 1] == shape[k - 1] {
            k -= 1;
        }
        if k == 0 {
            return Ok(vec![(0, shape.iter().product())]);
        }
        let inner: u64 = shape[k..].iter().product();
        let run_len = self.len[k - 1] * inner;
        let count: u64 = self.len[..k - 1].iter().product();
        if count > cap {
            return Err(format!(
                "the selection is {count} separate runs of elements, over the limit of {cap}"
            ));
        }
        let mut strides = vec![1u64; nd];
        for d in (0..nd - 1).rev() {
            strides[d] = strides[d + 1] * shape[d + 1];
        }
        let mut idx = self.start[..k - 1].to_vec();
        let mut out = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let base: u64 = idx.iter().zip(&strides).map(|(i, s)| i * s).sum();
            out.push((base + self.start[k - 1] * strides[k - 1], run_len));
            for d in (0..k - 1).rev() {
                idx[d] += 1;
                if idx[d] < self.start[d] + self.len[d] {
                    break;
                }
                idx[d] = self.start[d];
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(t: &str, shape: &[u64]) -> Result<Region, String> {
        Selection::parse(t)?.region(shape)
    }

    /// Random texts from the selection alphabet (and a few hostile bytes) never panic the
    /// parser, the region or the runs, and every region accepted lies inside the shape.
    #[test]
    fn random_selections_never_panic_and_stay_in_bounds() {
        const ALPHABET: &[&str] = &[
            "w",
            "[",
            "]",
            ":",
            ",",
            "...",
            "-",
            "0",
            "1",
            "7",
            "9",
            " ",
            "+",
            "_",
            ".",
            "\u{0}",
            "é",
            "99999999999999999999",
            "-9223372036854775808",
            "]=",
            "::",
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200_000 {
            let n = 1 + next() % 12;
            let mut t = String::from("w");
            for _ in 0..n {
                t.push_str(ALPHABET[(next() % ALPHABET.len() as u64) as usize]);
            }
            let Ok(sel) = Selection::parse(&t) else {
                continue;
            };
            for shape in [&[6u64, 8][..], &[3], &[], &[2, 0, 4], &[u64::MAX / 2, 2]] {
                let Ok(r) = sel.region(shape) else {
                    continue;
                };
                for (k, &d) in shape.iter().enumerate() {
                    assert!(r.start[k] + r.len[k] <= d, "{t} on {shape:?}: {r:?}");
                }
                let _ = r.runs(shape, 1 << 20);
            }
        }
    }

    #[test]
    fn parses_numpy_basic_slices() {
        let s = Selection::parse("model.w[1024:1152]").unwrap();
        assert_eq!(s.name, "model.w");
        assert_eq!(s.items, vec![Item::Slice(Some(1024), Some(1152))]);
        let s = Selection::parse("w[:, -8:, 3, ...]").unwrap();
        assert_eq!(
            s.items,
            vec![
                Item::Slice(None, None),
                Item::Slice(Some(-8), None),
                Item::Index(3),
                Item::Ellipsis
            ]
        );
        assert_eq!(Selection::parse("w").unwrap().items, vec![]);
        assert_eq!(Selection::parse("w[]").unwrap().items, vec![]);
        assert_eq!(
            Selection::parse("w[0:4:1]").unwrap().items,
            vec![Item::Slice(Some(0), Some(4))]
        );
        assert!(Selection::parse("w[0:4:2]").unwrap_err().contains("step 2"));
        assert!(Selection::parse("w[a:4]").is_err());
        assert!(Selection::parse("[0:4]").is_err());
        assert!(Selection::parse("w[...,...]").is_err());
    }

    #[test]
    fn regions_follow_numpy_and_refuse_out_of_bounds() {
        let r = region("w[1024:1152]", &[4096, 4096]).unwrap();
        assert_eq!(
            (r.start.clone(), r.len.clone()),
            (vec![1024, 0], vec![128, 4096])
        );
        let r = region("w[-8:, 3]", &[10, 5]).unwrap();
        assert_eq!((r.start.clone(), r.len.clone()), (vec![2, 3], vec![8, 1]));
        assert_eq!(r.out_shape(), vec![8]);
        let r = region("w[..., 1:3]", &[2, 3, 4]).unwrap();
        assert_eq!(r.start, vec![0, 0, 1]);
        assert!(region("w[5000:5010]", &[4096, 8])
            .unwrap_err()
            .contains("out of bounds for axis 0 with size 4096"));
        assert!(region("w[4096]", &[4096])
            .unwrap_err()
            .contains("index 4096"));
        assert!(region("w[-4097]", &[4096]).is_err());
        assert!(region("w[5:5]", &[10])
            .unwrap_err()
            .contains("selects nothing"));
        assert!(region("w[0, 0, 0]", &[2, 2])
            .unwrap_err()
            .contains("too many"));
        assert_eq!(region("s", &[]).unwrap().numel(), 1);
    }

    #[test]
    fn runs_merge_whole_trailing_axes() {
        let r = region("w[1:3]", &[4, 5]).unwrap();
        assert_eq!(r.runs(&[4, 5], 100).unwrap(), vec![(5, 10)]);
        let r = region("w[:, 1:3]", &[4, 5]).unwrap();
        assert_eq!(
            r.runs(&[4, 5], 100).unwrap(),
            vec![(1, 2), (6, 2), (11, 2), (16, 2)]
        );
        let r = region("w[1, 1:3, 2]", &[2, 3, 4]).unwrap();
        assert_eq!(r.runs(&[2, 3, 4], 100).unwrap(), vec![(18, 1), (22, 1)]);
        let r = region("w", &[2, 3]).unwrap();
        assert_eq!(r.runs(&[2, 3], 100).unwrap(), vec![(0, 6)]);
        assert!(region("w[:, 0]", &[1000, 2])
            .unwrap()
            .runs(&[1000, 2], 10)
            .is_err());
    }
}
