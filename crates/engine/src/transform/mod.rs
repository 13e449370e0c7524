//! The operation interface of the output plan: a [`Transform`] computes any unit-aligned range
//! of an output tensor from the input byte ranges it names. Casts, (de)quantization, row
//! permutations, stacking and their compositions implement it; the executor schedules them.
//!
//! One file per transform: [`cast`] (with [`cast::Measured`], a narrowing cast whose error is
//! measured), [`quantize`] (quantize, dequantize, requantize), [`permute`], [`stack`], [`slice`],
//! [`gather`], [`concat`] (strided views one after another), [`interleave`], [`plus_one`], [`neg_exp`] (the SSM families' `-exp(A_log)`), [`scale`] (Falcon-H1's multipliers), [`fp8`] (an FP8 release's scaled weights), and [`chain`] (one transform after another).
//! [`quality`] is the error measurement the lossy ones accumulate; it knows nothing of the trait.

use std::ops::Range;
use std::sync::Arc;

use weightport_core::Result;

pub(crate) mod cast;
pub(crate) mod chain;
pub(crate) mod concat;
pub(crate) mod fp8;
pub(crate) mod gather;
pub(crate) mod interleave;
pub(crate) mod lora_merge;
pub(crate) mod neg_exp;
pub(crate) mod permute;
pub(crate) mod plus_one;
pub(crate) mod quality;
pub(crate) mod quantize;
pub(crate) mod scale;
pub(crate) mod slice;
pub(crate) mod stack;
#[cfg(test)]
mod tests;

use quality::Quality;

/// An operation producing an output tensor from input bytes.
pub trait Transform: Send + Sync {
    /// A short description for plans and reports (`F16→F32`).
    fn describe(&self) -> String;
    /// Output bytes per indivisible unit; the executor's chunks are multiples of it.
    fn unit(&self) -> u64;
    /// The input byte ranges (`(k, range)`: `k` indexes the output tensor's `inputs`) that
    /// output range `out` needs.
    fn needs(&self, out: Range<u64>) -> Vec<(usize, Range<u64>)>;
    /// Computes output range `out` into `dst` from `inputs` (the ranges `needs` named, in order).
    fn apply(&self, out: Range<u64>, inputs: &[&[u8]], dst: &mut [u8]) -> Result<()>;
    /// True when output range `out` is exactly the input ranges `needs(out)` names, one after
    /// another, and `apply` only copies them (stacking). The executor then hashes and writes the
    /// mapped input slices themselves, as for an identity, instead of copying them first.
    fn concatenates(&self) -> bool {
        false
    }
    /// True when `apply` maps one input to the output value by value at a fixed ratio of bytes
    /// (casts): `needs(out)` is one range of input 0 proportional to `out`, and any piece of it
    /// whole in input units can be computed on its own into its share of `out`. A chain then
    /// applies it to a concatenation's pieces where they lie, instead of gathering them first.
    fn elementwise(&self) -> bool {
        false
    }
    /// True when applying it to consecutive pieces of an output range gives the same bytes
    /// and the same [`Transform::outcome`] as applying it to the whole range at once (no
    /// state but additive counts: casts, stacking). The executor may then stage and apply a
    /// chunk piece by piece. Not the quantizers or [`cast::Measured`]: their error sums would
    /// be grouped otherwise.
    fn piecewise(&self) -> bool {
        false
    }
    /// True when the output holds exactly the input's values (widening casts, permutations).
    fn lossless(&self) -> bool {
        false
    }
    /// For a lossless operation on one input: the operation mapping output bytes back to the
    /// input's bytes, which verification uses to prove the output equal to the source.
    fn inverse(&self) -> Option<Arc<dyn Transform>> {
        None
    }
    /// What happened while applying it (overflow counts…), once the job has run.
    fn outcome(&self) -> Option<String> {
        None
    }
    /// For a lossy float operation (quantization, narrowing cast): its error against the
    /// source values ([`quality`]), once the job has run.
    fn quality(&self) -> Option<Quality> {
        None
    }
    /// Single-thread CPU nanoseconds per output value the kernel costs beyond moving the bytes
    /// (a quantizer's search; [`weightport_quant::quantize_ns_per_value`]): what `plan --units`
    /// balances units by. 0 for casts and copies.
    fn cost_ns(&self) -> f64 {
        0.0
    }
}

/// The output of a concatenating transform ([`Transform::concatenates`]): the input pieces its
/// `needs` named, one after another.
pub(crate) fn concatenate(inputs: &[&[u8]], dst: &mut [u8]) {
    let mut at = 0;
    for s in inputs {
        dst[at..at + s.len()].copy_from_slice(s);
        at += s.len();
    }
}
