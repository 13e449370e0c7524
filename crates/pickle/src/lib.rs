//! weightport-pickle: PyTorch checkpoints read by a restricted, symbolic pickle VM.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod allow;
pub mod torch;
pub mod value;
pub mod vm;
