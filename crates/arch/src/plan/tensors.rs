//! The tensor phase of the plan: each HF tensor of the release, in the reference's order,
//! dropped, stacked with its experts, split into parts, or written as one output tensor.

use super::*;
use crate::origin::View;
use crate::split::Mxfp4;
use crate::table::{NameRules, Split};

/// The output tensors of a release, with what was dropped and the file type they make.
pub(super) struct Planned {
    /// The generated tensors, then the release's, in the reference's order.
    pub(super) out: Vec<OutTensor>,
    /// HF tensors not written, with the reason.
    pub(super) dropped: Vec<(String, &'static str)>,
    /// `general.file_type`.
    pub(super) file_type: u32,
}

/// Plans the release's tensors after the `generated` ones; refuses incomplete expert blocks and,
/// when `all_layers` (a release, not an adapter's factors), a layer count the weights do not hold.
pub(super) fn plan_tensors(
    release: &Release,
    tensors: &[SourceTensor],
    opts: &PlanOptions,
    generated: Vec<OutTensor>,
    fp8: &crate::fp8::Fp8,
    all_layers: bool,
) -> Result<Planned> {
    let Release { dir, spec, hp, .. } = release;
    // Only the q/k permutation needs the head counts (an SSM model has none).
    let heads = ["n_heads", "num_attention_heads", "n_head"];
    let n_head = if spec.permute_qk {
        hp.need_u32(&heads)?
    } else {
        hp.u32(&heads)?.unwrap_or(0)
    };
    let n_head_kv = hp
        .u32(&["n_kv_heads", "num_key_value_heads"])?
        .unwrap_or(n_head);
    let order = source_order(tensors, opts.sort_names);
    if spec.hooks.contains(&Hook::NemotronH) {
        crate::nemotron_h::check_tensors(hp, tensors, dir)?;
    }
    let mut experts = match spec.experts {
        Some(e) => Some(Experts::new(e, hp, release.block_count)?),
        None => None,
    };
    if spec.hooks.contains(&Hook::Gemma3n) {
        crate::gemma3n::check_config(hp)?;
    }
    // MXFP4 experts, repacked and written before every other tensor of the release.
    let mxfp4 = Mxfp4::new(spec, hp, tensors, &order, dir)?;
    let n_generated = generated.len();
    let mut planner = Planner {
        release,
        tensors,
        outtype: opts.outtype,
        n_head,
        n_head_kv,
        out: generated,
        mx_out: Vec::new(),
        dropped: Vec::new(),
        fp8,
        altup: Default::default(),
    };
    for i in order {
        planner.add(i, &mut experts, &mxfp4)?;
    }
    planner.altup_complete()?;
    if let Some(ex) = &experts {
        ex.finish(dir)?;
    }
    let Planner {
        mut out,
        mx_out,
        dropped,
        ..
    } = planner;
    out.splice(n_generated..n_generated, mx_out);
    let file_type = match opts.outtype {
        OutType::F32 | OutType::F16 | OutType::Bf16 if mxfp4.active() => MOSTLY_MXFP4_MOE,
        o => o.file_type(),
    };
    // A multi-token-prediction draft holds none of the main layers, by design.
    if all_layers && !tensors.is_empty() && !release.mtp_only {
        check_layers(&out, release.main_layers, hp)?;
        if spec.hooks.contains(&Hook::QwenLinearAttention) {
            let names: Vec<String> = out.iter().map(|t| t.name.clone()).collect();
            let qwen35 = spec.hooks.contains(&Hook::LinearAttentionVReorder);
            crate::qwen_next::check_complete(&names, hp, dir, qwen35)?;
        }
        if spec.hooks.contains(&Hook::NemotronH) {
            let names: Vec<String> = out.iter().map(|t| t.name.clone()).collect();
            crate::nemotron_h::check_complete(&names, hp, dir)?;
        }
    }
    Ok(Planned {
        out,
        dropped,
        file_type,
    })
}

/// Indices of `tensors` in the reference's order: by file, then by name when `sort_names`.
pub(super) fn source_order(tensors: &[SourceTensor], sort_names: bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    if sort_names {
        order.sort_by(|&a, &b| {
            (&tensors[a].file, &tensors[a].name).cmp(&(&tensors[b].file, &tensors[b].name))
        });
    } else {
        order.sort_by(|&a, &b| tensors[a].file.cmp(&tensors[b].file));
    }
    order
}

/// The HF name the architecture's rules map (`language_model.` and the stripped prefixes
/// removed, suffixes renamed), or why the tensor is not written.
fn rule_name(rules: &NameRules, name: &str) -> std::result::Result<String, &'static str> {
    if SKIPPED_SUFFIXES.iter().any(|s| name.ends_with(s)) {
        return Err("not used by llama.cpp");
    }
    if rules.text_of_multimodal && is_multimodal_part(name) {
        return Err("not part of the text model");
    }
    let text_name;
    let mut hf = name;
    if rules.text_of_multimodal && hf.contains("language_model.") {
        text_name = hf.replace("language_model.", "");
        hf = &text_name;
    }
    for p in rules.strip_prefix {
        hf = hf.strip_prefix(p).unwrap_or(hf);
    }
    let mut hf = hf.to_owned();
    for (from, to) in rules.suffix_renames {
        if let Some(stem) = hf.strip_suffix(from) {
            hf = format!("{stem}{to}");
        }
    }
    if rules.drop.contains(&hf.as_str()) || rules.drop_prefixes.iter().any(|p| hf.starts_with(p)) {
        return Err("not used by llama.cpp");
    }
    Ok(hf)
}

/// The tensor phase's state: what is planned so far.
struct Planner<'r, 'a> {
    release: &'r Release<'a>,
    tensors: &'r [SourceTensor],
    outtype: OutType,
    n_head: u32,
    n_head_kv: u32,
    out: Vec<OutTensor>,
    /// The MXFP4 parts, which go before every other tensor of the release.
    mx_out: Vec<OutTensor>,
    dropped: Vec<(String, &'static str)>,
    /// The FP8 scales, consumed by their weights.
    fp8: &'r crate::fp8::Fp8,
    /// Gemma 3n's altup parts read so far, per stack ([`crate::gemma3n::STACKS`]).
    altup: [[Option<usize>; crate::gemma3n::PARTS]; 2],
}

impl Planner<'_, '_> {
    /// Plans HF tensor `i`.
    fn add(&mut self, i: usize, experts: &mut Option<Experts>, mxfp4: &Mxfp4) -> Result<()> {
        let spec = self.release.spec;
        let t = &self.tensors[i];
        if let Some(&why) = self.fp8.dropped.get(&t.name) {
            self.dropped.push((t.name.clone(), why));
            return Ok(());
        }
        if spec.hooks.contains(&Hook::XieluValues) && crate::xielu::is_param(&t.name) {
            self.dropped.push((t.name.clone(), crate::xielu::DROPPED));
            return Ok(());
        }
        if self.release.no_mtp && self.is_mtp(&t.name) {
            self.dropped
                .push((t.name.clone(), "multi-token-prediction layer, left out"));
            return Ok(());
        }
        if self.release.mtp_only && !self.is_mtp(&t.name) && !is_draft_shared(&t.name) {
            self.dropped.push((
                t.name.clone(),
                "not part of the multi-token-prediction draft",
            ));
            return Ok(());
        }
        if spec.hooks.contains(&Hook::SkipMtpLayers) && self.is_mtp_layer(&t.name) {
            self.dropped
                .push((t.name.clone(), "multi-token-prediction layer, skipped"));
            return Ok(());
        }
        let qwen_next = spec.hooks.contains(&Hook::QwenLinearAttention);
        let renamed = if qwen_next {
            crate::qwen_next::mtp_name(&t.name, self.release.main_layers)
        } else {
            t.name.clone()
        };
        let hf = match rule_name(&spec.names, &renamed) {
            Ok(hf) => hf,
            Err(reason) => {
                self.dropped.push((t.name.clone(), reason));
                return Ok(());
            }
        };
        if mxfp4.consumed(&hf) {
            return Ok(());
        }
        if spec.hooks.contains(&Hook::Gemma3n) {
            if let Some((s, k)) = crate::gemma3n::stack_part(&hf, &self.release.hp)? {
                return self.add_altup(s, k, i);
            }
        }
        if spec.hooks.contains(&Hook::MiniMaxM2) {
            let Release { dir, hp, .. } = self.release;
            crate::minimax::check_shape(&hf, t, hp, dir)?;
        } else if spec.hooks.contains(&Hook::CheckShapes) {
            let Release { dir, hp, .. } = self.release;
            crate::shapes::check_shape(&hf, t, hp, dir)?;
        }
        if qwen_next {
            let Release { dir, hp, .. } = self.release;
            crate::qwen_next::check_shape(&hf, t, hp, dir)?;
            if spec.hooks.contains(&Hook::LinearAttentionVReorder) {
                if let Some((views, shape)) = crate::qwen_next::v_reorder(&hf, t, hp, dir)? {
                    return self.add_reordered(&hf, i, views, shape);
                }
            }
        }
        // Splits first: a fused expert tensor (`mlp.experts.gate_up_proj`) also holds the
        // per-expert marker.
        if let Some(split) = spec.splits.iter().find(|s| hf.ends_with(s.suffix)) {
            if split.rule == SplitRule::QkvzHeads {
                return self.add_views(&hf, i);
            }
            return self.add_split(split, &hf, i, mxfp4);
        }
        if let Some(ex) = experts.as_mut().filter(|ex| hf.contains(ex.spec.marker)) {
            return self.add_expert(ex, &hf, i);
        }
        let one = self.single(&hf, i)?;
        self.out.push(one);
        Ok(())
    }

    /// Gemma 3n: part `k` of altup stack `s`; the stack once its three parts are read (the
    /// reference's `torch.stack`, which needs one shape).
    fn add_altup(&mut self, s: usize, k: usize, i: usize) -> Result<()> {
        let t = &self.tensors[i];
        let stack = &mut self.altup[s];
        if stack[k].replace(i).is_some() {
            return Err(bad(
                &self.release.hp.path,
                format!("tensor `{}` appears twice", t.name),
            ));
        }
        let Some(parts) = stack.iter().copied().collect::<Option<Vec<usize>>>() else {
            return Ok(());
        };
        let first = &self.tensors[parts[0]];
        if let Some(other) = parts[1..]
            .iter()
            .map(|&j| &self.tensors[j])
            .find(|o| o.shape != first.shape || o.dtype != first.dtype)
        {
            return Err(Error::Unsupported {
                at: Location::file(self.release.dir).tensor(&other.name),
                format: Some(Format::Gguf),
                what: format!(
                    "an altup projection of shape {:?} {} stacked with `{}` of shape {:?} {}",
                    other.shape,
                    other.dtype.name(),
                    first.name,
                    first.shape,
                    first.dtype.name()
                ),
            });
        }
        let name = crate::gemma3n::STACKS[s].1;
        let sources = parts
            .iter()
            .map(|&j| (self.tensors[j].name.clone(), j))
            .collect();
        self.push_stack(name, name.to_string(), sources);
        Ok(())
    }

    /// Plans the stack of `sources` (same shape and type, the first's taken) as `name`, its type
    /// decided by the name `typed_as` (the table's name: with `{bid}` for expert stacks).
    fn push_stack(&mut self, typed_as: &str, name: String, sources: Vec<(String, usize)>) {
        let first = &self.tensors[sources[0].1];
        let mut shape = vec![sources.len() as u64];
        shape.extend_from_slice(&first.shape);
        let (force_f32, dtype) = out_dtype(typed_as, &shape, self.outtype);
        self.out.push(OutTensor {
            name,
            origin: Origin::Stack { sources },
            shape,
            permute: None,
            force_f32,
            value: None,
            dtype,
        });
    }

    /// Gemma 3n: refuses an altup stack of which some but not all parts were read (the
    /// reference would leave it out, and llama.cpp cannot load the file without it).
    fn altup_complete(&self) -> Result<()> {
        for (s, parts) in self.altup.iter().enumerate() {
            let read = parts.iter().flatten().count();
            if read == 0 || read == parts.len() {
                continue;
            }
            let k = parts.iter().position(Option::is_none).unwrap_or(0);
            return Err(Error::Unsupported {
                at: Location::file(self.release.dir),
                format: Some(Format::Gguf),
                what: format!(
                    "a Gemma 3n release without `{}{k}.weight` (its {read} other parts are there)",
                    crate::gemma3n::STACKS[s].0
                ),
            });
        }
        Ok(())
    }

    /// True for a tensor of a layer past `num_hidden_layers` (`model.layers.N.`, N ≥ the
    /// block count): the reference's `re.match(r"model.layers.(\d+)", name)`.
    fn is_mtp_layer(&self, name: &str) -> bool {
        let Some(rest) = name.strip_prefix("model.layers.") else {
            return false;
        };
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        rest[..digits]
            .parse::<u64>()
            .is_ok_and(|n| n >= u64::from(self.release.block_count))
    }

    /// A tensor of the multi-token-prediction layers ([`Release::no_mtp`],
    /// [`Release::mtp_only`]): a layer past the main ones (GLM-4.5's NextN layer) or Qwen's
    /// `mtp.*` block (the reference's `filter_tensors` with `no_mtp` / `mtp_only`).
    fn is_mtp(&self, name: &str) -> bool {
        let name = text_name(name);
        let bare = name.strip_prefix("model.").unwrap_or(&name);
        let Some(rest) = name.strip_prefix("model.layers.") else {
            return bare.starts_with("mtp.");
        };
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        rest[..digits]
            .parse::<u64>()
            .is_ok_and(|n| n >= u64::from(self.release.main_layers))
    }

    /// An expert tensor: once its block is complete, the block's stacks.
    fn add_expert(&mut self, ex: &mut Experts, hf: &str, i: usize) -> Result<()> {
        let (bid, stacks) = ex.add(hf, i, self.tensors, self.release.dir)?;
        for (name, sources) in stacks {
            self.push_stack(&name, fill(&name, Some(bid)), sources);
        }
        Ok(())
    }

    /// A fused tensor: its parts, MXFP4 repacks or strided views.
    fn add_split(&mut self, split: &Split, hf: &str, i: usize, mxfp4: &Mxfp4) -> Result<()> {
        let t = &self.tensors[i];
        if let SplitRule::Mxfp4 { alternating } = split.rule {
            for (part, origin, shape) in mxfp4.repack(hf, i, alternating)? {
                self.mx_out.push(OutTensor {
                    name: self.gguf_name(t, &part, &format!("`{part}`"))?,
                    origin,
                    shape,
                    permute: None,
                    force_f32: false,
                    value: None,
                    dtype: DType::MXFP4,
                });
            }
            return Ok(());
        }
        let Release { dir, hp, .. } = self.release;
        for (part, view) in crate::split::views(split, hf, t, hp, dir)? {
            let name = self.gguf_name(t, &part, &format!("`{part}`"))?;
            let shape = view.shape();
            let (force_f32, dtype) = out_dtype(&name, &shape, self.outtype);
            self.out.push(OutTensor {
                name,
                origin: Origin::View {
                    name: t.name.clone(),
                    index: i,
                    view,
                },
                shape,
                permute: None,
                force_f32,
                value: split.rule.value_op(),
                dtype,
            });
        }
        Ok(())
    }

    /// A fused tensor whose parts are each several views of it ([`SplitRule::QkvzHeads`]).
    fn add_views(&mut self, hf: &str, i: usize) -> Result<()> {
        let t = &self.tensors[i];
        let Release { dir, hp, .. } = self.release;
        for (part, views, shape) in crate::qwen_next::qkvz_parts(hf, t, hp, dir)? {
            let name = self.gguf_name(t, &part, &format!("`{part}`"))?;
            let (force_f32, dtype) = out_dtype(&name, &shape, self.outtype);
            self.out.push(OutTensor {
                name,
                origin: Origin::Views {
                    name: t.name.clone(),
                    index: i,
                    views,
                },
                shape,
                permute: None,
                force_f32,
                value: None,
                dtype,
            });
        }
        Ok(())
    }

    /// A tensor written as several views of it, with the reference's value transform
    /// (Qwen3.5's V-head reorder).
    fn add_reordered(
        &mut self,
        hf: &str,
        i: usize,
        views: Vec<crate::View>,
        shape: Vec<u64>,
    ) -> Result<()> {
        let t = &self.tensors[i];
        let name = self.gguf_name(t, hf, "this tensor")?;
        let (force_f32, dtype) = out_dtype(&name, &shape, self.outtype);
        self.out.push(OutTensor {
            name,
            origin: Origin::Views {
                name: t.name.clone(),
                index: i,
                views,
            },
            shape,
            permute: None,
            force_f32,
            value: crate::qwen_next::value_op(hf),
            dtype,
        });
        Ok(())
    }

    /// The GGUF name of `hf` (`what` of tensor `t`), or the refusal naming it.
    fn gguf_name(&self, t: &SourceTensor, hf: &str, what: &str) -> Result<String> {
        let Release {
            dir,
            spec,
            hp,
            block_count,
            ..
        } = self.release;
        let name = map_name(spec, hf, *block_count).ok_or_else(|| Error::Unsupported {
            at: Location::file(dir).tensor(&t.name),
            format: Some(Format::Gguf),
            what: format!("no GGUF name for {what} of a {} model", hp.hf_arch),
        })?;
        Ok(if spec.hooks.contains(&Hook::GraniteHybridLayers) {
            crate::ssm::granite_shared_expert_name(hp, hf, name)?
        } else {
            name
        })
    }

    /// A tensor written as one output tensor: renamed, permuted, cut or transposed as the
    /// architecture says.
    fn single(&self, hf: &str, i: usize) -> Result<OutTensor> {
        let t = &self.tensors[i];
        let name = self.gguf_name(t, hf, "this tensor")?;
        let permute = self.qk_permute(t)?;
        let (shape, origin) = self.source_view(t, i, &name)?;
        let (force_f32, dtype) = out_dtype(&name, &shape, self.outtype);
        let spec = self.release.spec;
        let value = if spec.hooks.contains(&Hook::QwenLinearAttention) {
            crate::qwen_next::value_op(hf)
        } else if spec.hooks.contains(&Hook::FalconH1Multipliers) {
            let rows = shape.first().copied().unwrap_or(1);
            crate::ssm::falcon_h1_scale(&self.release.hp, hf, rows)?
        } else {
            (spec.norm_plus_one && t.name.ends_with("norm.weight")).then_some(ValueOp::PlusOne)
        };
        Ok(OutTensor {
            name,
            origin,
            shape,
            permute,
            force_f32,
            value,
            dtype,
        })
    }

    /// The q/k row permutation of a `llama`-arch model, checked against the tensor's rows.
    fn qk_permute(&self, t: &SourceTensor) -> Result<Option<QkPermute>> {
        let spec = self.release.spec;
        if !spec.permute_qk {
            return Ok(None);
        }
        let n_head = self.n_head;
        let n_head_kv = if t.name.ends_with("q_proj.weight") || t.name.ends_with("q_proj.bias") {
            n_head
        } else if t.name.ends_with("k_proj.weight") || t.name.ends_with("k_proj.bias") {
            self.n_head_kv
        } else {
            return Ok(None);
        };
        if spec.hooks.contains(&Hook::GraniteHybridLayers)
            && !crate::ssm::in_attention_layer(&self.release.hp, self.release.block_count, &t.name)?
        {
            return Ok(None);
        }
        let p = QkPermute {
            n_head,
            n_head_kv: Some(n_head_kv),
        };
        let rows = t.shape.first().copied().unwrap_or(0);
        p.rows(rows as usize)
            .map_err(|e| bad(&self.release.hp.path, format!("tensor `{}`: {e}", t.name)))?;
        Ok(Some(p))
    }

    /// The shape and origin of tensor `i` written as `gguf_name`: the whole tensor, or its rows
    /// up to the vocabulary (Gemma 3), its transpose, its rows past the position offset
    /// (XLM-RoBERTa).
    fn source_view(
        &self,
        t: &SourceTensor,
        i: usize,
        gguf_name: &str,
    ) -> Result<(Vec<u64>, Origin)> {
        let Release {
            dir,
            spec,
            hp,
            position_offset,
            ..
        } = self.release;
        let name = t.name.clone();
        let mut shape = t.shape.clone();
        let mut origin = Origin::Hf { name, index: i };
        // Gemma 3: embedding rows past the vocabulary are dropped (`data_torch[:n_vocab]`).
        if spec.embd_rows_to_vocab && gguf_name == "token_embd.weight" {
            let n_vocab = crate::tokenizer::spm_vocab_len(dir, hp)?;
            if shape.first().is_some_and(|&r| r > n_vocab) {
                shape[0] = n_vocab;
                let (name, index) = (t.name.clone(), i);
                origin = Origin::Rows {
                    name,
                    index,
                    rows: 0..n_vocab,
                };
            }
        }
        // Gemma 3n: embeddings padded with zero rows up to `vocab_size`.
        let padded = ["token_embd.weight", "per_layer_token_embd.weight"];
        if spec.hooks.contains(&Hook::Gemma3n) && padded.contains(&gguf_name) {
            let vocab = crate::gemma3n::padded_rows(hp)?;
            if let Some(&source_rows) = shape.first().filter(|&&r| r < vocab) {
                shape[0] = vocab;
                let (name, index) = (t.name.clone(), i);
                origin = Origin::PadRows {
                    name,
                    index,
                    source_rows,
                };
            }
        }
        if spec.transposed.iter().any(|s| t.name.ends_with(s)) {
            (shape, origin) = transposed(t, i, &shape, hp)?;
        }
        // XLM-RoBERTa: positions start after the padding id (`data_torch[offset:, :]`).
        if let (Some(offset), "position_embd.weight") = (*position_offset, gguf_name) {
            let first = shape.first().copied().unwrap_or(0);
            let rows = crate::xlmr::kept_rows(hp, &t.name, first, offset)?;
            shape[0] = rows.end - rows.start;
            let (name, index) = (t.name.clone(), i);
            origin = Origin::Rows { name, index, rows };
        }
        Ok((shape, origin))
    }
}

/// Tensor `i` of `shape` `[rows, cols]` read as `[cols, rows]`: (c, r) ← r·cols + c.
fn transposed(
    t: &SourceTensor,
    i: usize,
    shape: &[u64],
    hp: &HParams,
) -> Result<(Vec<u64>, Origin)> {
    let [rows, cols] = shape[..] else {
        return Err(bad(
            &hp.path,
            format!(
                "tensor `{}` is not 2-D {:?}: cannot be transposed",
                t.name, shape
            ),
        ));
    };
    let origin = Origin::View {
        name: t.name.clone(),
        index: i,
        view: View {
            offset: 0,
            dims: vec![(cols, 1), (rows, cols)],
        },
    };
    Ok((vec![cols, rows], origin))
}

/// A multimodal release's text name as the reference's filters see it (`language_model.`
/// removed by `TextModel.filter_tensors`).
fn text_name(name: &str) -> String {
    name.replacen("model.language_model.", "model.", 1)
}

/// The tensors a multi-token-prediction draft keeps besides its layers (the reference's
/// `mtp_only` keep list): the embedding, the final norm, the head.
fn is_draft_shared(name: &str) -> bool {
    let keep = [
        "model.embed_tokens.weight",
        "model.norm.weight",
        "lm_head.weight",
        "embed_tokens.weight",
        "norm.weight",
    ];
    keep.contains(&text_name(name).as_str())
}
