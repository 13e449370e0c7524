//! The search tables of ggml's 2-bit and 1-bit grid quantizers (`iq2xs_init_impl`), derived
//! once per grid from the dequantization grids in [`crate::grids`].
//!
//! A grid point is 8 levels `l ∈ {0, 1, 2}`; ggml keeps it as the bytes `2l + 1`, packs the
//! levels of any 8 values into a 16-bit key `Σ l_k · 4^k`, and maps every key to its grid
//! index, or, for keys off the grid, to a list of nearest grid points: all points at the
//! `nwant` smallest squared distances, ordered by (distance, index). The quantizers only ever
//! look up keys whose levels are all ≤ 2, so only those lists are built (ggml also builds
//! lists for keys with level 3, which nothing reads).

use std::sync::OnceLock;

use crate::grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID};

/// ggml's `kmap_size`: keys are below 2·(4⁸−1)/3 + 2.
const KMAP_SIZE: usize = 43692;

/// One grid's search tables.
pub(crate) struct GridTables {
    /// Grid points as ggml's `kgrid_q2xs`: per value `2l + 1`.
    pub(crate) points: Vec<[i8; 8]>,
    /// Key → grid index (≥ 0) or `-(list + 1)` into `lists` (< 0); `i32::MIN` for keys the
    /// quantizers never produce.
    map: Vec<i32>,
    /// Per neighbour list: where its indices start in `near_idx`, how many, and where its
    /// positions start in `near_pos`.
    lists: Vec<(u32, u32, u32)>,
    /// Concatenated neighbour lists (grid indices, nearest distances first, then by index).
    near_idx: Vec<u16>,
    /// The lists' points as f32, in chunks of [`LANES`] neighbours stored value-major
    /// (`chunk[i * LANES + lane]`), padded with NaN (a NaN distance never wins).
    near_pos: Vec<f32>,
}

/// Neighbours per chunk of `near_pos`.
pub(crate) const LANES: usize = 8;

/// An off-grid key's nearest grid points.
pub(crate) struct Near<'a> {
    /// Their grid indices, in ggml's order.
    pub(crate) idx: &'a [u16],
    /// Their points (`2l + 1`), chunked as in [`GridTables`]'s `near_pos`.
    pub(crate) pos: &'a [f32],
}

/// Where a key lands.
pub(crate) enum Lookup<'a> {
    /// The key is a grid point.
    OnGrid,
    /// The key is off the grid: its nearest grid points.
    Near(Near<'a>),
}

impl GridTables {
    /// Grid index of `key`, or its neighbour list.
    #[inline(always)]
    pub(crate) fn lookup(&self, key: u16) -> Lookup<'_> {
        let m = self.map[key as usize];
        if m >= 0 {
            return Lookup::OnGrid;
        }
        let (at, n, pos_at) = self.lists[(-(m as i64) - 1) as usize];
        let (at, n, pos_at) = (at as usize, n as usize, pos_at as usize);
        Lookup::Near(Near {
            idx: &self.near_idx[at..at + n],
            pos: &self.near_pos[pos_at..pos_at + n.div_ceil(LANES) * 8 * LANES],
        })
    }

    /// Number of keys in the map (keys at or above it do not exist).
    pub(crate) fn map_len(&self) -> usize {
        self.map.len()
    }

    /// Grid index of `key`, if it is a grid point.
    #[inline(always)]
    pub(crate) fn index_of(&self, key: u16) -> Option<usize> {
        let m = self.map[key as usize];
        (m >= 0).then_some(m as usize)
    }
}

/// The grids that have tables.
#[derive(Clone, Copy)]
pub(crate) enum Grid {
    /// IQ2_XXS: 256 points, neighbours at the 2 nearest distances.
    Iq2Xxs,
    /// IQ2_XS: 512 points, 2 distances.
    Iq2Xs,
    /// IQ2_S: 1024 points, 1 distance.
    Iq2S,
    /// IQ1_S and IQ1_M: 2048 points, 3 distances.
    Iq1S,
}

/// The tables of `grid`, built at first use.
pub(crate) fn tables(grid: Grid) -> &'static GridTables {
    static T: [OnceLock<GridTables>; 4] = [const { OnceLock::new() }; 4];
    match grid {
        Grid::Iq2Xxs => T[0].get_or_init(|| build(&IQ2XXS_GRID, 2)),
        Grid::Iq2Xs => T[1].get_or_init(|| build(&IQ2XS_GRID, 2)),
        Grid::Iq2S => T[2].get_or_init(|| build(&IQ2S_GRID, 1)),
        Grid::Iq1S => T[3].get_or_init(|| build(&IQ1S_GRID, 3)),
    }
}

/// Level (0, 1, 2) of one byte of a dequantization grid: IQ2 grids hold 8/25/43, the IQ1
/// grid −1/0/1.
fn level(byte: u8) -> i8 {
    match byte {
        8 | 0xff => 0,
        25 | 0 => 1,
        43 | 1 => 2,
        _ => unreachable!("grid byte {byte} is not a generated grid level"),
    }
}

#[allow(clippy::needless_range_loop)] // keys index the map and are the loop's subject
fn build(dequant_grid: &[u64], nwant: usize) -> GridTables {
    let points: Vec<[i8; 8]> = dequant_grid
        .iter()
        .map(|&g| std::array::from_fn(|k| 2 * level((g >> (8 * k)) as u8) + 1))
        .collect();
    let mut map = vec![i32::MIN; KMAP_SIZE];
    for (i, p) in points.iter().enumerate() {
        map[key_of(p.map(|v| (v - 1) / 2))] = i as i32;
    }
    let (mut lists, mut near_idx, mut near_pos) = (Vec::new(), Vec::new(), Vec::new());
    // buckets[d2] collects grid indices at squared distance d2, in index order; levels differ
    // by at most 2, so positions by at most 4 and d2 ≤ 8·16.
    let mut buckets: Vec<Vec<u16>> = vec![Vec::new(); 8 * 16 + 1];
    for key in 0..KMAP_SIZE {
        if map[key] != i32::MIN || !levels_below_3(key) {
            continue;
        }
        let pos: [i8; 8] = std::array::from_fn(|k| 2 * ((key >> (2 * k)) & 3) as i8 + 1);
        buckets.iter_mut().for_each(Vec::clear);
        for (j, p) in points.iter().enumerate() {
            let d2: i32 = (0..8).map(|k| i32::from(p[k] - pos[k]).pow(2)).sum();
            buckets[d2 as usize].push(j as u16);
        }
        map[key] = -(lists.len() as i32) - 1;
        let at = near_idx.len();
        for b in buckets.iter().filter(|b| !b.is_empty()).take(nwant) {
            near_idx.extend_from_slice(b);
        }
        let list = &near_idx[at..];
        lists.push((at as u32, list.len() as u32, near_pos.len() as u32));
        for chunk in list.chunks(LANES) {
            for i in 0..8 {
                near_pos.extend((0..LANES).map(|l| {
                    chunk
                        .get(l)
                        .map_or(f32::NAN, |&j| f32::from(points[j as usize][i]))
                }));
            }
        }
    }
    GridTables {
        points,
        map,
        lists,
        near_idx,
        near_pos,
    }
}

/// The nearest of an off-grid key's neighbours: the index of the first one with the smallest
/// `Σᵢ w[i]·(scale·q(pᵢ) − xval[i])²` (summed in `i` order, as ggml's loops do) over its
/// point `p`. `None` if no distance is below `f32::MAX` (ggml then aborts). [`LANES`]
/// neighbours at a time, so each neighbour's sum is still in `i` order.
#[inline(always)]
pub(crate) fn nearest(
    near: &Near,
    xval: &[f32],
    w: &[f32],
    scale: f32,
    q: impl Fn(f32) -> f32,
) -> Option<usize> {
    let mut best_d2 = f32::MAX;
    let mut best = None;
    for (c, chunk) in near.pos.chunks_exact(8 * LANES).enumerate() {
        let mut d2 = [0f32; LANES];
        for i in 0..8 {
            let p: &[f32; LANES] = chunk[i * LANES..(i + 1) * LANES].try_into().unwrap();
            for l in 0..LANES {
                let diff = scale * q(p[l]) - xval[i];
                d2[l] += w[i] * diff * diff;
            }
        }
        // Scanning the lanes with `if d2 < best` ends on the first lane holding the smallest
        // value below `best` (NaN never wins).
        let mut m = best_d2;
        for &d in &d2 {
            m = if d < m { d } else { m };
        }
        if m < best_d2 {
            let l = d2.iter().position(|&d| d == m)?;
            best_d2 = m;
            best = Some(near.idx[c * LANES + l] as usize);
        }
    }
    best
}

/// The key of 8 levels.
pub(crate) fn key_of(levels: [i8; 8]) -> usize {
    (0..8).fold(0, |u, k| u | ((levels[k] as usize) << (2 * k)))
}

fn levels_below_3(key: usize) -> bool {
    (0..8).all(|k| (key >> (2 * k)) & 3 != 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_off_grid_key_has_neighbours() {
        for g in [Grid::Iq2Xxs, Grid::Iq2Xs, Grid::Iq2S, Grid::Iq1S] {
            let t = tables(g);
            for key in 0..6561usize {
                let levels: [i8; 8] =
                    std::array::from_fn(|k| ((key / 3usize.pow(k as u32)) % 3) as i8);
                match t.lookup(key_of(levels) as u16) {
                    Lookup::OnGrid => {
                        let i = t.index_of(key_of(levels) as u16).unwrap();
                        assert_eq!(t.points[i].map(|v| (v - 1) / 2), levels);
                    }
                    Lookup::Near(n) => assert!(!n.idx.is_empty() && n.pos.len() >= n.idx.len() * 8),
                }
            }
        }
    }
}
