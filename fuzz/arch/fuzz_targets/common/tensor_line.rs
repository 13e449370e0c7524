//! One line of a fuzz input as one tensor of a weights file: `NAME DTYPE D0,D1,…` (F32, F16,
//! BF16; any other type word reads as I32). Shared by the targets whose input lists tensors.

use weightport_arch::SourceTensor;
use weightport_core::DType;

/// The tensor the line names, as stored in `file`; `None` for a line that is not one.
pub fn tensor(line: &str, file: &str) -> Option<SourceTensor> {
    let mut it = line.split(' ');
    let name = it.next()?.to_owned();
    let dtype = match it.next()? {
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        _ => DType::I32,
    };
    let shape = it
        .next()?
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|d| d.parse().ok())
        .collect::<Option<Vec<u64>>>()?;
    Some(SourceTensor {
        name,
        shape,
        dtype,
        file: file.into(),
    })
}
