//! weightport-npz: NumPy `.npy` arrays and `.npz` archives as a [`TensorSource`].
//!
//! ```text
//! .npy  [\x93NUMPY│major│minor│HLEN (u16 LE in 1.0, u32 LE in 2.0/3.0)│header text][data]
//!       header text: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }   + padding
//!       data: shape × itemsize bytes, in descr's byte order, C or Fortran order
//! .npz  a ZIP archive (ZIP64 when numpy wrote it) of NAME.npy members, stored (np.savez) or
//!       deflated (np.savez_compressed); NAME is the tensor name and may contain '/'
//! ```
//!
//! See: <https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html> and APPNOTE.TXT.
//!
//! * [`header`]: a strict parser of the npy header literal (nothing is ever evaluated) and the
//!   dtype policy: `b1 i1 u1 i2 u2 i4 u4 i8 u8 f2 f4 f8 c8` are read; `<V2` is read as BF16
//!   only with [`ReadOptions::void2_as_bf16`]; object arrays (`|O`, a pickle) are refused;
//!   everything else (complex128, strings, datetimes, structured dtypes) is unsupported.
//! * [`open_npy`], [`open_npy_dir`] → [`NpySource`]; [`open_npz`] → [`NpzSource`].
//! * [`probe_npy`], [`probe_npz`]: content probes for the format registry.
//!
//! # Reading protocol
//!
//! Every tensor yields little-endian row-major bytes. [`TensorSource::access`] says how:
//!
//! * [`Access::Mapped`]: stored little-endian C-order data; [`TensorSource::bytes`] returns a
//!   zero-copy slice of the mapped file.
//! * [`Access::Random`]: stored big-endian or Fortran-order data (gathered and byte-swapped per
//!   call), and deflated Fortran-order members (each call is one full inflate pass over the
//!   member, so large chunks are much cheaper than small ones).
//! * [`Access::Sequential`]: deflated C-order members. Read them front to back from offset 0 in
//!   consecutive ranges, from one thread: each call continues the member's inflate cursor. Any
//!   other order still returns correct bytes, but a call behind the cursor restarts inflating
//!   from the member start (O(offset) per call) and one ahead of it inflates the gap. When a
//!   pass reaches the end, the stream's real length and CRC-32 are checked against the central
//!   directory; a mismatch is an error from that last call.
//!
//! `read_into` on any non-mapped tensor needs offsets and lengths that are multiples of the
//! element size ([`weightport_core::DType::granule`]). Memory stays bounded by the caller's
//! buffer plus a scratch buffer (see [`NpzSource::with_scratch`]) and ~40 KiB of inflate state
//! per member being read.
#![deny(missing_docs)]

mod array;
pub mod header;
mod layout;
mod npy;
mod npz;
pub mod registration;

pub use array::DEFAULT_SCRATCH;
pub use npy::{open_npy, open_npy_dir, probe_npy, NpySource};
pub use npz::{open_npz, probe_npz, probe_npz_source, NpzSource};

#[cfg(doc)]
use weightport_core::{Access, ReadOptions, TensorSource};
