//! The release's tensors and where each output tensor's bytes come from: the data types the
//! plan ([`plan`](mod@crate::plan)) produces and the fused-tensor splits ([`crate::split`]) build, in a
//! module of their own so that neither depends on the other for them.

use weightport_core::DType;

/// One tensor of the HF release, from headers alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceTensor {
    /// HF name (`model.layers.0.self_attn.q_proj.weight`).
    pub name: String,
    /// Shape, outermost first (PyTorch order).
    pub shape: Vec<u64>,
    /// Stored element type.
    pub dtype: DType,
    /// The file it is stored in, relative to the release directory. The output is ordered by
    /// `(file, name)`, which is the reference's order for safetensors releases (parts in sorted
    /// file-name order, names sorted within a part); for a `.bin` release the reference keeps
    /// the state dict's own order instead.
    pub file: String,
}

/// Where an output tensor's data comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// An HF tensor.
    Hf {
        /// Its HF name.
        name: String,
        /// Its index in the slice given to [`plan`](fn@crate::plan).
        index: usize,
    },
    /// Computed from the hyper-parameters (e.g. Llama 3's `rope_freqs.weight`): the F32 values.
    Generated(Vec<f32>),
    /// HF tensors of one shape and type stacked along a new leading axis, in this order (the
    /// experts of a Mixture-of-Experts layer): the output's bytes are the sources' bytes one
    /// after another, each cast as the output is.
    Stack {
        /// `(HF name, index in the slice given to [`plan`](fn@crate::plan))` of each part, in stacking order.
        sources: Vec<(String, usize)>,
    },
    /// A strided view of one HF tensor ([`View`]): the output's element `i` (row-major over
    /// the view's sizes) is the source's element `offset + Σ idx_k · stride_k`, cast as the output
    /// is (a transposed or interleaved part of a fused tensor, [`crate::split`]).
    View {
        /// Its HF name.
        name: String,
        /// Its index in the slice given to [`plan`](fn@crate::plan).
        index: usize,
        /// Which elements, in which order.
        view: View,
    },
    /// Strided views of one HF tensor one after another ([`View`]s): the output's elements
    /// are the first view's, then the second's, …, cast as the output is; the output's shape
    /// is the plan's (any shape of as many elements). Qwen3-Next's fused `in_proj_qkvz`, whose
    /// per-key-head q, k, v and z rows the reference regroups ([`crate::qwen_next`]).
    Views {
        /// Its HF name.
        name: String,
        /// Its index in the slice given to [`plan`](fn@crate::plan).
        index: usize,
        /// The views, in output order.
        views: Vec<View>,
    },
    /// Blocks of several byte tensors interleaved: output block `k` is block `k` of each part
    /// ([`BlockPart::width`] bytes of its view) one after another, then rewritten in place by
    /// `map` (GPT-OSS's MXFP4 experts: the scale byte, then the 16 bytes of FP4 values). Written
    /// as is: the parts already hold the output type's bytes.
    Blocks {
        /// The parts, in the order their bytes enter a block.
        parts: Vec<BlockPart>,
        /// The rewrite of each assembled block.
        map: BlockMap,
    },
    /// Rows `rows` (outermost axis) of one HF tensor: the output's bytes are that contiguous
    /// range of the source's, cast as the output is (Gemma 3's token embedding cut to the
    /// vocabulary; one part of a fused tensor).
    Rows {
        /// Its HF name.
        name: String,
        /// Its index in the slice given to [`plan`](fn@crate::plan).
        index: usize,
        /// The rows kept, `start..end` of the source's first dimension.
        rows: std::ops::Range<u64>,
    },
    /// One HF tensor followed by zero rows (outermost axis) up to the planned shape's rows: the
    /// output's bytes are the source's, cast as the output is, then zeros (Gemma 3n's
    /// embeddings padded to `vocab_size`, `torch.cat([data, zeros])`).
    PadRows {
        /// Its HF name.
        name: String,
        /// Its index in the slice given to [`plan`](fn@crate::plan).
        index: usize,
        /// The source's rows (fewer than the output's).
        source_rows: u64,
    },
}

/// One part of an [`Origin::Blocks`]: a byte view of an HF tensor and the bytes of it each
/// output block takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockPart {
    /// Its HF name.
    pub name: String,
    /// Its index in the slice given to [`plan`](fn@crate::plan).
    pub index: usize,
    /// Its bytes, in block order.
    pub view: View,
    /// Bytes per block.
    pub width: u64,
}

/// Elements of a tensor taken as torch's `as_strided` takes them, in units of elements: the
/// output's shape is the sizes of `dims`, its element at index `(i_0, …, i_n)` is the source's
/// element `offset + Σ i_k · stride_k`. Format-neutral: a transpose swaps strides, every other
/// row is a stride of two rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// The first element.
    pub offset: u64,
    /// `(size, stride)` per output dimension, outermost first.
    pub dims: Vec<(u64, u64)>,
}

impl View {
    /// The output shape.
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().map(|d| d.0).collect()
    }
}

/// How an assembled block of an [`Origin::Blocks`] is rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockMap {
    /// An MXFP4 block: byte 0 the E8M0 scale, then 16 bytes of 32 FP4 values. The release holds
    /// element `2i` in the low nibble of byte `i` and `2i + 1` in its high nibble; GGUF's block
    /// holds element `j` in the low nibble of byte `j` and `j + 16` in its high nibble
    /// (`GptOssModel.transform_nibble_layout`; gguf-py's MXFP4 block is `e, qs[16]`).
    Mxfp4Nibbles,
}

impl BlockMap {
    /// Rewrites `block` in place.
    pub fn apply(self, block: &mut [u8]) {
        match self {
            BlockMap::Mxfp4Nibbles => {
                let Some(qs) = block.get_mut(1..17) else {
                    return;
                };
                let mut src = [0u8; 16];
                src.copy_from_slice(qs);
                for k in 0..8 {
                    let (a, b) = (src[k], src[8 + k]);
                    qs[2 * k] = (a & 0x0F) | (b << 4);
                    qs[2 * k + 1] = (a >> 4) | (b & 0xF0);
                }
            }
        }
    }
}
