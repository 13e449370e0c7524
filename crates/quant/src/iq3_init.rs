//! The search tables of the 3-bit grids (IQ3_XXS: 256 points, IQ3_S: 512 points), derived
//! at first use from the grids in `grids.rs` as ggml's `iq3xs_init_impl` derives them.
//!
//! A grid point is 4 magnitudes with levels `l ∈ 0..8` (value `2l + 1`); a 4-tuple of levels
//! has the 12-bit key `Σ l_k << 3k`. The *map* sends a key to its grid index, and a key that
//! is not on the grid to its *neighbours*: every grid point whose squared distance to the
//! tuple is among the `nwant` smallest distinct distances (2 for IQ3_XXS, 3 for IQ3_S), in
//! order of (distance, index).

use std::sync::OnceLock;

use crate::grids::{IQ3S_GRID, IQ3XXS_GRID};

/// Where a 12-bit key leads.
pub(crate) enum Lookup<'a> {
    /// The key is grid point `index`.
    OnGrid(u16),
    /// The key is off the grid; these are its neighbours' indices.
    Off(&'a [u16]),
}

/// One grid's points and search tables.
pub(crate) struct Iq3Grid {
    /// Each point's values `2l + 1`, as f32 (exact) for the distance sums.
    pub(crate) values: Vec<[f32; 4]>,
    /// Each point's levels `l`.
    pub(crate) levels: Vec<[i8; 4]>,
    /// Key → grid index (≥ 0) or `-(offset + 1)` of its neighbour list in `neighbours`.
    map: Vec<i32>,
    /// Neighbour lists, each a count followed by that many grid indices.
    neighbours: Vec<u16>,
}

const KEYS: usize = 4096;

impl Iq3Grid {
    /// Where `key` (< 4096) leads.
    #[inline(always)]
    pub(crate) fn lookup(&self, key: usize) -> Lookup<'_> {
        let m = self.map[key];
        if m >= 0 {
            Lookup::OnGrid(m as u16)
        } else {
            let at = (-(m + 1)) as usize;
            let n = self.neighbours[at] as usize;
            Lookup::Off(&self.neighbours[at + 1..at + 1 + n])
        }
    }

    /// The grid index of `key`, if it is on the grid.
    #[inline(always)]
    pub(crate) fn index_of(&self, key: usize) -> Option<u16> {
        let m = self.map[key];
        (m >= 0).then_some(m as u16)
    }

    fn build(levels: Vec<[i8; 4]>, nwant: usize) -> Self {
        let mut map = vec![-1i32; KEYS];
        for (i, l) in levels.iter().enumerate() {
            map[key_of(l)] = i as i32;
        }
        let mut neighbours = Vec::new();
        for (key, m) in map.iter_mut().enumerate() {
            if *m >= 0 {
                continue;
            }
            let list = nearest(&levels, &levels_of(key), nwant);
            *m = -(neighbours.len() as i32 + 1);
            neighbours.push(list.len() as u16);
            neighbours.extend(list);
        }
        let values = levels
            .iter()
            .map(|l| l.map(|l| (2 * l + 1) as f32))
            .collect();
        Iq3Grid {
            values,
            levels,
            map,
            neighbours,
        }
    }
}

/// The 12-bit key of a tuple of levels.
#[inline(always)]
pub(crate) fn key_of(l: &[i8; 4]) -> usize {
    (0..4).fold(0, |k, i| k | (l[i] as usize) << (3 * i))
}

fn levels_of(key: usize) -> [i8; 4] {
    [0, 1, 2, 3].map(|i| ((key >> (3 * i)) & 7) as i8)
}

/// The grid points at the `nwant` smallest distinct squared distances from `pos`, ordered by
/// (distance, index).
fn nearest(grid: &[[i8; 4]], pos: &[i8; 4], nwant: usize) -> Vec<u16> {
    // distances between values 2l+1 are twice those between levels: the order is the same
    let mut d2: Vec<(i32, u16)> = grid
        .iter()
        .enumerate()
        .map(|(j, g)| {
            let d = (0..4).map(|k| 4 * (g[k] - pos[k]) as i32 * (g[k] - pos[k]) as i32);
            (d.sum(), j as u16)
        })
        .collect();
    d2.sort_unstable();
    let mut out = Vec::new();
    let (mut cur, mut nhave) = (d2[0].0, 1);
    for &(d, j) in &d2 {
        if d > cur {
            if nhave == nwant {
                break;
            }
            cur = d;
            nhave += 1;
        }
        out.push(j);
    }
    out
}

/// The IQ3_XXS grid (values 4, 12, …, 52, 62 in `IQ3XXS_GRID` are levels 0..8: `v >> 3`).
pub(crate) fn iq3xxs() -> &'static Iq3Grid {
    static G: OnceLock<Iq3Grid> = OnceLock::new();
    G.get_or_init(|| Iq3Grid::build(grid_levels(&IQ3XXS_GRID, 3), 2))
}

/// The IQ3_S grid (values `2l + 1` in `IQ3S_GRID`: `v >> 1`).
pub(crate) fn iq3s() -> &'static Iq3Grid {
    static G: OnceLock<Iq3Grid> = OnceLock::new();
    G.get_or_init(|| Iq3Grid::build(grid_levels(&IQ3S_GRID, 1), 3))
}

fn grid_levels(grid: &[u32], shift: u32) -> Vec<[i8; 4]> {
    grid.iter()
        .map(|&g| g.to_le_bytes().map(|b| (b >> shift) as i8))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_are_the_sorted_keys_ggml_builds_from() {
        // ggml's init lists the points by increasing key: the derived levels must be too,
        // and every level in 0..8
        for g in [iq3xxs(), iq3s()] {
            let keys: Vec<usize> = g.levels.iter().map(key_of).collect();
            assert!(keys.windows(2).all(|w| w[0] < w[1]));
            assert!(g.levels.iter().flatten().all(|&l| (0..8).contains(&l)));
        }
        let g = iq3xxs();
        assert_eq!(g.values[5], [15.0, 3.0, 1.0, 1.0]);
        let mut off = 0;
        for key in 0..KEYS {
            match g.lookup(key) {
                Lookup::OnGrid(i) => assert_eq!(key_of(&g.levels[i as usize]), key),
                Lookup::Off(n) => {
                    assert!(!n.is_empty());
                    off += 1;
                }
            }
        }
        assert_eq!(off, KEYS - 256);
    }
}
