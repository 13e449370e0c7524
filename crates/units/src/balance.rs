//! The balancer of `plan --units`: the job's output tensors split into units, by whole
//! output files where there are enough of them, else by tensors, the slowest unit as fast as a
//! contiguous cut allows by the estimated CPU time (or, for `--in-place`, dealt out costliest
//! first).

use weightport_core::{Error, Result};

use weightport_engine::Job;

use super::job::JobCosts;
use super::layout::Layout;

/// How many units: `--units N` or `--unit-size SIZE` (bytes read + written per unit).
#[derive(Debug, Clone, Copy)]
pub enum UnitSplit {
    /// Exactly this many units.
    Count(usize),
    /// As many units as needed for each to cost at most about this many bytes.
    Size(u64),
}

/// Splits the job into `n` contiguous, non-empty groups of atoms (`n` from `--units`, or from
/// `--unit-size` over the bytes moved), the slowest group as fast as a contiguous cut allows by
/// the estimated CPU time ([`JobCosts::work`]).
pub(crate) fn split(
    job: &Job,
    lay: &Layout,
    how: UnitSplit,
    in_place: bool,
) -> Result<Vec<Vec<usize>>> {
    let total: u64 = (0..job.tensor_count())
        .map(|k| job.cost(k))
        .sum::<u64>()
        .max(1);
    let n = match how {
        UnitSplit::Count(n) => n,
        UnitSplit::Size(s) => total.div_ceil(s.max(1)) as usize,
    };
    if n == 0 || n > job.tensor_count() {
        return Err(Error::Usage(format!(
            "{n} units: this output has {0} tensors, so between 1 and {0} units",
            job.tensor_count()
        )));
    }
    let atoms = atoms(job, lay, n);
    let work: Vec<f64> = atoms
        .iter()
        .map(|a| a.iter().map(|&k| job.work(k)).sum())
        .collect();
    if in_place {
        return Ok(deal(&atoms, &work, n));
    }
    let most = least_max(&work, n);
    Ok(pack(&atoms, &work, n, most))
}

/// `plan --in-place`: a unit's tensors need not be one byte range, so the atoms are dealt
/// out, the costliest first, each to the unit with the least work so far (LPT); each unit's
/// tensors then in file order.
fn deal(atoms: &[Vec<usize>], work: &[f64], n: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..atoms.len()).collect();
    order.sort_by(|&a, &b| work[b].total_cmp(&work[a]).then(a.cmp(&b)));
    let mut load = vec![0.0f64; n];
    let mut mine: Vec<Vec<usize>> = vec![Vec::new(); n];
    for a in order {
        let u = (0..n)
            .min_by(|&x, &y| {
                let empty = |u: usize| !mine[u].is_empty();
                (empty(x), load[x])
                    .partial_cmp(&(empty(y), load[y]))
                    .expect("finite work")
            })
            .expect("n > 0");
        load[u] += work[a];
        mine[u].push(a);
    }
    mine.into_iter()
        .map(|mut m| {
            m.sort_unstable();
            m.into_iter()
                .flat_map(|a| atoms[a].iter().copied())
                .collect()
        })
        .collect()
}

/// The least `m` such that `work`, cut into at most `n` contiguous groups, has no group over
/// `m` (bisection on the greedy packing; to a relative 1e-9).
fn least_max(work: &[f64], n: usize) -> f64 {
    let groups = |m: f64| {
        let (mut g, mut cur) = (1, 0.0);
        for &w in work {
            if cur > 0.0 && cur + w > m {
                (g, cur) = (g + 1, 0.0);
            }
            cur += w;
        }
        g
    };
    let mut lo = work.iter().copied().fold(0.0, f64::max);
    let mut hi = work.iter().sum::<f64>().max(lo);
    if groups(lo) <= n {
        return lo;
    }
    while hi - lo > hi * 1e-9 {
        let mid = (lo + hi) / 2.0;
        if groups(mid) <= n {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// `atoms` in order into exactly `n` non-empty contiguous units (`n` ≤ atoms), none over
/// `most` of work: a new unit starts when the atom would take the current one over `most`, or
/// when the atoms left are just enough for one per unit still to start.
fn pack(atoms: &[Vec<usize>], work: &[f64], n: usize, most: f64) -> Vec<Vec<usize>> {
    let (mut units, mut cur) = (vec![Vec::new()], 0.0);
    for (i, (a, &w)) in atoms.iter().zip(work).enumerate() {
        let open = units.last().is_some_and(|u: &Vec<usize>| !u.is_empty())
            && units.len() < n
            && (cur + w > most || atoms.len() - i == n - units.len());
        if open {
            units.push(Vec::new());
            cur = 0.0;
        }
        cur += w;
        units.last_mut().expect("a unit").extend(a);
    }
    units
}

/// Atoms units are made of: whole output files when there are at least `n` of them, else
/// single tensors, in file order and by offset within a file (so a unit's tensors in a file
/// are one byte range of it).
fn atoms(job: &Job, lay: &Layout, n: usize) -> Vec<Vec<usize>> {
    if job.output_plan().files.len() >= n && job.output_plan().files.len() > 1 {
        return job
            .output_plan()
            .files
            .iter()
            .map(|f| f.tensors.clone())
            .collect();
    }
    let mut order: Vec<usize> = Vec::with_capacity(job.tensor_count());
    for f in &job.output_plan().files {
        let mut ts = f.tensors.clone();
        ts.sort_by_key(|&k| lay.at[k].1);
        order.extend(ts);
    }
    if order.is_empty() {
        order = (0..job.tensor_count()).collect();
    }
    order.into_iter().map(|k| vec![k]).collect()
}

#[cfg(test)]
mod tests {
    use super::{least_max, pack};

    fn split(work: &[f64], n: usize) -> Vec<Vec<usize>> {
        let atoms: Vec<Vec<usize>> = (0..work.len()).map(|k| vec![k]).collect();
        pack(&atoms, work, n, least_max(work, n))
    }

    #[test]
    fn the_slowest_unit_is_as_fast_as_a_contiguous_cut_allows() {
        // Cut where the running total first reaches half, [1, 1, 1, 10, 1] gives 13 | 1; the
        // least max cut gives 3 | 11.
        assert_eq!(
            split(&[1.0, 1.0, 1.0, 10.0, 1.0], 2),
            [vec![0, 1, 2], vec![3, 4]]
        );
        assert_eq!(
            split(&[3.0, 3.0, 3.0, 3.0, 3.0], 2),
            [vec![0, 1, 2], vec![3, 4]]
        );
        assert_eq!(
            split(&[1.0, 8.0, 1.0, 1.0, 4.0], 2),
            [vec![0, 1], vec![2, 3, 4]]
        );
        // One atom sets the max: the rest packs up to it, the last unit gets what is left.
        assert_eq!(
            split(&[5.0, 1.0, 1.0, 1.0, 1.0, 1.0], 3),
            [vec![0], vec![1, 2, 3, 4], vec![5]]
        );
    }

    #[test]
    fn every_unit_gets_an_atom_even_when_some_cost_nothing() {
        assert_eq!(split(&[0.0, 0.0, 9.0], 3), [vec![0], vec![1], vec![2]]);
        assert_eq!(split(&[9.0, 0.0, 0.0], 3), [vec![0], vec![1], vec![2]]);
        assert_eq!(split(&[4.0, 4.0], 1), [vec![0, 1]]);
    }
}
