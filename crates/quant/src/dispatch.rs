//! How the kernels run: each is built twice, for the baseline CPU and with AVX2, and takes the
//! AVX2 build at run time when the CPU has it ([`multiversion!`]); the weighted kernels run
//! their lockstep lanes over a row in batches ([`in_batches!`]).
//!
//! Both builds are the same code: AVX2 only widens the lanes (IEEE f32 operations are the
//! same, no FMA is enabled and Rust never contracts), so they write the same bytes; the
//! reference tests check both ([`set_portable_only`]).
//!
//! What a kernel runs in its hot loop must be `#[inline(always)]` functions, or closures
//! written in the kernel's own body: a closure is compiled as its own function with the target
//! features of the function it is written in, so one written in a helper runs on SSE only even
//! when the AVX2 build calls it (Q4_K's weighted kernel ran at 85 instead of 134 MB/s that way).

thread_local! {
    /// Per thread, so a test checking the portable build does not switch the kernels of tests
    /// running beside it.
    static PORTABLE_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True when this thread's kernels must skip their AVX2 builds ([`set_portable_only`]).
pub(crate) fn portable_only() -> bool {
    PORTABLE_ONLY.with(std::cell::Cell::get)
}

/// Test hook: when `true`, kernels called from this thread skip their CPU-specific (AVX2)
/// builds. Results are identical either way; the reference tests use this to check both.
pub fn set_portable_only(on: bool) {
    PORTABLE_ONLY.with(|p| p.set(on));
}

/// Defines the function written inside it so that it runs its body compiled for AVX2 when the
/// CPU has it (and [`portable_only`] is off), and as written otherwise:
///
/// ```text
/// multiversion! {
///     /// Docs.
///     pub(crate) fn quantize_q4_k(x: &[f32], y: &mut [BlockQ4K]) {
///         quantize_q4_k_portable(x, y)
///     }
/// }
/// ```
///
/// The body is expanded twice, once inside a `#[target_feature(enable = "avx2")]` function:
/// closures written in it are compiled with AVX2 in that copy.
macro_rules! multiversion {
    (
        $(#[$attr:meta])*
        $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block
    ) => {
        $(#[$attr])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                if std::is_x86_feature_detected!("avx2") && !$crate::dispatch::portable_only() {
                    #[target_feature(enable = "avx2")]
                    unsafe fn avx2($($arg: $ty),*) $(-> $ret)? $body
                    // SAFETY: the CPU supports AVX2 (checked just above).
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body
        }
    };
}

/// Runs lane-batch functions over a row: `$f1` on batches of `$n1` blocks (of `$elems`
/// values) while whole ones remain, then `$f2` on batches of `$n2`, and so on (the last tier is
/// normally 1 block). Each `$f` gets `(x, y, qw)` of its batch, and `$ctx` after them if given.
///
/// The `$f` must be `#[inline(always)]` functions, not closures (see the module documentation).
macro_rules! in_batches {
    ($x:expr, $y:expr, $qw:expr, $elems:expr; $($n:expr => $f:path),+) => {
        in_batches!(@run $x, $y, $qw, $elems, (); $($n => $f),+)
    };
    ($x:expr, $y:expr, $qw:expr, $elems:expr, ctx = $ctx:expr; $($n:expr => $f:path),+) => {
        in_batches!(@run $x, $y, $qw, $elems, ($ctx); $($n => $f),+)
    };
    (@run $x:expr, $y:expr, $qw:expr, $elems:expr, $ctx:tt; $($n:expr => $f:path),+) => {{
        let (mut x, mut y, mut qw) = ($x, $y, $qw);
        $(
            let mut xc = x.chunks_exact($elems * $n);
            let mut yc = y.chunks_exact_mut($n);
            let mut wc = qw.chunks_exact($elems * $n);
            for ((xb, yb), wb) in (&mut xc).zip(&mut yc).zip(&mut wc) {
                in_batches!(@call $f, xb, yb, wb, $ctx);
            }
            (x, y, qw) = (xc.remainder(), yc.into_remainder(), wc.remainder());
        )+
        let _ = (x, y, qw);
    }};
    (@call $f:path, $a:ident, $b:ident, $c:ident, ()) => { $f($a, $b, $c) };
    (@call $f:path, $a:ident, $b:ident, $c:ident, ($ctx:expr)) => { $f($a, $b, $c, $ctx) };
}
