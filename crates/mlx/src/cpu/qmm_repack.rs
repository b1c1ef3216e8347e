//! `cpu::qmm_int8` on weights laid out once, at load time, for its integer
//! dot products (what llama.cpp calls repacking): the fast-precision layers of
//! a model hold their weights this way, so that no call lays them out again.
//! Exact-precision layers hold the same layout, for `cpu::qmm`'s arithmetic
//! (`qmm_exact_repack`).
//!
//! Layout, per tile of eight output columns (`TILE`, one 32-bit vector lane
//! each; columns past `n` are zero and never stored):
//! - weights: `k * bits / 32` vectors of eight 32-bit words; word `c` of
//!   vector `u` holds column `c`'s weights `4 * s .. 4 * s + 4` for the
//!   `8 / bits` slots `s = u * 8 / bits + j`, byte `i` of the word holding
//!   weight `4 * s + i` in its bits `j * bits ..`. Still `bits` bits a weight
//!   (a 4-bit layer does not grow), unpacked by a shift and a mask, and a
//!   group's weights are whole vectors (groups of 32 or more).
//! - scales and biases: per group the eight scales then the eight biases
//!   (plain loads, where the row-major layout needs gathers), as float16 or
//!   bfloat16 where every value of the layer is one exactly (decided at load:
//!   a GGUF Q4_0 model's float32 scales are float16 values), else as float32:
//!   a quarter of a 4-bit weight's bytes at group 32 in float32, an eighth in
//!   16 bits. Widening is exact, so the format never changes a result.
//!
//! Each row of `x` is quantized as `qmm_int8` does, in index order, and
//! broadcast four bytes at a time against a vector of weights: each lane sums
//! its own column's products, with no reduction across the vector, for one
//! row (decode) as for a prompt. The integer sums are exact and the float
//! steps are `qmm_int8`'s portable path's, in its order, so every row count
//! and instruction set gives that path's bits (tested below).
use std::ops::Range;

use crate::cpu::half::{f16_value, round_bf16, round_f16};
use crate::cpu::kernel::{cpu_kernel_f32, par_ranges, Kernel, KernelF32, OutPtr};
use crate::cpu::qmm::compute_dtype;
use crate::cpu::qmm_int8::{Isa, Scratch, PARALLEL_MIN, SCRATCH, TILE};
use crate::cpu::qmm_quantize::{lo_shift, quantize_rows};
use crate::quant::Precision;
use crate::{Array, Dtype, Error, Result};

/// How a repacked weight holds its scales and biases (all of them one way).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum SbFormat {
    F32,
    /// 16-bit values, two to a float32 word, the lower-indexed in the low
    /// half (memory order on a little-endian CPU, as vector loads read them).
    F16,
    Bf16,
    /// Float16 scales only, every bias being `scale * c` in float32, bit for
    /// bit (a GGUF Q4_0 block's `-8 * d`), computed so again when read.
    F16Scaled(f32),
}

impl SbFormat {
    /// The format as two kernel parameters: its code and `c`.
    pub(crate) fn params(self) -> [f32; 2] {
        match self {
            SbFormat::F32 => [0.0, 0.0],
            SbFormat::F16 => [1.0, 0.0],
            SbFormat::Bf16 => [2.0, 0.0],
            SbFormat::F16Scaled(c) => [3.0, c],
        }
    }
    fn from_params(code: f32, c: f32) -> Option<SbFormat> {
        [SbFormat::F32, SbFormat::F16, SbFormat::Bf16, SbFormat::F16Scaled(c)].into_iter().find(|f| f.params()[0] == code)
    }
    /// Float32 words per tile and group: eight scales and eight biases (or
    /// the scales alone).
    pub(crate) fn group_words(self) -> usize {
        match self {
            SbFormat::F32 => 2 * TILE,
            SbFormat::F16 | SbFormat::Bf16 => TILE,
            SbFormat::F16Scaled(_) => TILE / 2,
        }
    }
    /// Value `i` of a group's sixteen (scales, then biases) in float32 (exact).
    #[inline(always)]
    fn read(self, group: &[f32], i: usize) -> f32 {
        let half = |i: usize| (group[i / 2].to_bits() >> (16 * (i % 2))) as u16;
        match self {
            SbFormat::F32 => group[i],
            SbFormat::F16 => f16_value(half(i)),
            SbFormat::Bf16 => f32::from_bits((half(i) as u32) << 16),
            SbFormat::F16Scaled(c) if i >= TILE => f16_value(half(i - TILE)) * c,
            SbFormat::F16Scaled(_) => f16_value(half(i)),
        }
    }
    /// `v` (exactly one of this format's values) as its 16 bits.
    fn bits16(self, v: f32) -> u32 {
        match self {
            SbFormat::Bf16 => v.to_bits() >> 16,
            _ => crate::cpu::half::f16_bits(v) as u32,
        }
    }

    /// The narrowest format holding every scale and bias exactly: their own
    /// 16-bit dtype, or float32 values that all are float16 (else bfloat16)
    /// values, which takes reading them (once, at load), float16 scales alone
    /// where every bias is also `scale * c` for one `c`; with whether it read
    /// them.
    fn narrowest(scales: &Array, biases: &Array) -> Result<(SbFormat, bool)> {
        let both = |d: Dtype| scales.dtype() == d && biases.dtype() == d;
        if both(Dtype::Float16) {
            return Ok((SbFormat::F16, false));
        }
        if both(Dtype::Bfloat16) {
            return Ok((SbFormat::Bf16, false));
        }
        let (s, b) = (scales.astype(Dtype::Float32)?.to_vec::<f32>()?, biases.astype(Dtype::Float32)?.to_vec::<f32>()?);
        let exact = |round: fn(f32) -> f32, v: &[f32]| v.iter().all(|&v| round(v).to_bits() == v.to_bits());
        if exact(round_f16, &s) {
            // `c` from the first nonzero scale, then every bias checked against the product
            // the kernels compute.
            let c = s.iter().zip(&b).find(|(s, _)| **s != 0.0).map_or(0.0, |(s, b)| b / s);
            if s.iter().zip(&b).all(|(s, b)| (s * c).to_bits() == b.to_bits()) {
                return Ok((SbFormat::F16Scaled(c), true));
            }
            if exact(round_f16, &b) {
                return Ok((SbFormat::F16, true));
            }
        }
        if exact(round_bf16, &s) && exact(round_bf16, &b) {
            return Ok((SbFormat::Bf16, true));
        }
        Ok((SbFormat::F32, true))
    }
}

/// A quantized weight (affine, with biases) in the repacked layout, for its
/// precision's kernel: `cpu::qmm_int8`'s arithmetic (fast) or `cpu::qmm`'s
/// (exact, MLX's bits). Its arrays are float32 holding the layout's words, so
/// that no other op can take them for MLX's packing.
pub struct Repacked {
    weight: Array,
    sb: Array,
    n: i32,
    k: i32,
    group_size: i32,
    bits: i32,
    /// The original scales' dtype: with `x`'s, it makes the result's, as in
    /// MLX's op (and a lookup's, as in MLX's `dequantize`).
    scales_dtype: Dtype,
    format: SbFormat,
    precision: Precision,
}

impl Repacked {
    /// `w` (MLX's packing, `[n, k * bits / 32]`) with its scales and biases
    /// repacked (lazily: graph nodes, read when the weights are), or `None`
    /// where the kernel does not apply: the layer then keeps MLX's layout and
    /// runs as before (`quant::quantized_matmul`). Decided here, once: the
    /// precision's kernel switched off (fast: `MLX_NODE_QMM_INT8_KERNEL=0`,
    /// exact: `MLX_NODE_QMM_KERNEL=0`), another device, other widths or group
    /// sizes; in exact precision, scales and biases not both float32 or both
    /// bfloat16 (then some `x` would compute in float16, or in bfloat16 with
    /// float32 biases, which `cpu::qmm` leaves to MLX's op too).
    pub fn new(w: &Array, scales: &Array, biases: &Array, group_size: i32, bits: i32, precision: Precision) -> Result<Option<Repacked>> {
        let float = |d: Dtype| matches!(d, Dtype::Float32 | Dtype::Float16 | Dtype::Bfloat16);
        let kernel_applies = match precision {
            Precision::Fast => Kernel::QmmInt8.enabled() && float(scales.dtype()) && float(biases.dtype()),
            Precision::Exact => {
                Kernel::Qmm.enabled() && scales.dtype() == biases.dtype() && matches!(scales.dtype(), Dtype::Float32 | Dtype::Bfloat16)
            }
        };
        if !matches!(bits, 2 | 4 | 8) || !matches!(group_size, 32 | 64 | 128) || w.dtype() != Dtype::Uint32 || w.ndim() != 2 || !kernel_applies {
            return Ok(None);
        }
        let (n, k) = (w.dim(0), w.dim(1) * (32 / bits));
        // Fast: 4-bit rows of whole units of 64, as `qmm_int8` takes them (where the kernel
        // declines, the layer keeps MLX's layout and its exact op).
        let units = precision == Precision::Exact || bits != 4 || k % 64 == 0;
        if n <= 0 || k <= 0 || k % group_size != 0 || !units || n >= 1 << 24 || k >= 1 << 24 {
            return Ok(None);
        }
        let (groups, tiles) = (k / group_size, (n as usize).div_ceil(TILE) as i64);
        if scales.shape() != [n, groups] || biases.shape() != [n, groups] {
            return Ok(None);
        }
        let (words, sbs) = (tiles * TILE as i64 * (k * bits / 32) as i64, tiles * groups as i64 * 2 * TILE as i64);
        if words > i32::MAX as i64 || sbs > i32::MAX as i64 {
            return Ok(None);
        }
        let (format, read) = SbFormat::narrowest(scales, biases)?;
        let sbs = tiles * groups as i64 * format.group_words() as i64;
        let [code, c] = format.params();
        let params = [k as f32, n as f32, group_size as f32, bits as f32, code, c];
        let sb = cpu_kernel_f32("RepackScalesInt8", REPACK_SCALES, &params, &[scales, biases], &[sbs as i32])?;
        if read {
            // Reading them left the scales and biases in memory: laid out now, they are freed with the
            // caller's arrays, rather than every layer's held until the model's weights are read.
            sb.eval()?;
        }
        Ok(Some(Repacked {
            weight: cpu_kernel_f32("RepackWeightsInt8", REPACK_WEIGHTS, &params, &[w], &[words as i32])?,
            sb,
            n,
            k,
            group_size,
            bits,
            scales_dtype: scales.dtype(),
            format,
            precision,
        }))
    }

    /// Rows `ids` of `dequantize(w)`: a token lookup in a tied embedding
    /// table held only in this layout, with the bits of MLX's `take` then
    /// `dequantize` (`nn::Embedding::Quantized`): `scale * q + bias` rounded
    /// to the original scales' dtype after each operation, as MLX's CPU op
    /// computes it in that type. A negative id counts from the end, as in
    /// `take`; an id out of range gives a row of NaN.
    pub fn rows(&self, ids: &Array) -> Result<Array> {
        let dtype_code = match self.scales_dtype {
            Dtype::Float32 => 0.0,
            Dtype::Float16 => 1.0,
            Dtype::Bfloat16 => 2.0,
            d => return Err(Error::new(format!("embedding lookup: scales of dtype {}", d.name()))),
        };
        let ids = match ids.dtype() {
            // The kernel reads float32 ids (exact below 2^24, and the table has fewer rows); uint32 would
            // reach it as bits.
            Dtype::Uint32 => ids.astype(Dtype::Int32)?,
            Dtype::Int8 | Dtype::Int16 | Dtype::Int32 | Dtype::Int64 | Dtype::Uint8 | Dtype::Uint16 | Dtype::Uint64 => ids.clone(),
            d => return Err(Error::new(format!("embedding lookup: ids of dtype {} (an integer type is needed)", d.name()))),
        };
        let mut shape = ids.shape();
        shape.push(self.k);
        let [code, c] = self.format.params();
        let params = [self.k as f32, self.n as f32, self.group_size as f32, self.bits as f32, code, c, dtype_code];
        let y = cpu_kernel_f32("DequantizeRowsRepacked", crate::cpu::qmm_repack_rows::ROWS, &params, &[&ids, &self.weight, &self.sb], &shape)?;
        if self.scales_dtype == Dtype::Float32 {
            Ok(y)
        } else {
            y.astype(self.scales_dtype)
        }
    }

    /// The precision its matmul computes in.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// `x @ dequantize(w).T` by its precision's arithmetic, with its bits:
    /// `cpu::qmm_int8`'s (fast; some prompt chunks: the exact kernel with fused
    /// multiply-adds, see `quant::fast_prompt_runs_exact`), or `cpu::qmm`'s and
    /// MLX's op's (exact).
    pub fn matmul(&self, x: &Array) -> Result<Array> {
        if x.ndim() == 0 || x.dim(-1) != self.k {
            return Err(Error::new(format!("quantized matmul: x has shape {:?}, the weight takes {} inputs", x.shape(), self.k)));
        }
        let out_dtype = compute_dtype(x.dtype(), self.scales_dtype)
            .ok_or_else(|| Error::new(format!("quantized matmul: x of dtype {} (a float is needed)", x.dtype().name())))?;
        let mut out_shape = x.shape();
        *out_shape.last_mut().expect("x has a last axis") = self.n;
        let [code, c] = self.format.params();
        let params = [self.k as f32, self.n as f32, self.group_size as f32, self.bits as f32, code, c];
        let exact = self.precision == Precision::Exact || crate::quant::fast_prompt_runs_exact(x, self.bits, self.group_size);
        let y = match exact {
            false => cpu_kernel_f32("QuantizedMatmulInt8Repacked", QMM_REPACKED, &params, &[x, &self.weight, &self.sb], &out_shape)?,
            true => {
                // Exact layers: `new` took float32 or bfloat16 scales and biases, so the compute type
                // is one of them; fast ones come here with float32 `x`, so float32.
                let bf16 = (out_dtype == Dtype::Bfloat16) as u8 as f32;
                // Fast layers' prompt chunks sum with fused multiply-adds (`qmm_exact_repack::Exact::fused`).
                let fused = (self.precision == Precision::Fast) as u8 as f32;
                let params = [params.as_slice(), &[bf16, fused]].concat();
                let kernel = crate::cpu::qmm_exact_repack::QMM_EXACT_REPACKED;
                cpu_kernel_f32("QuantizedMatmulExactRepacked", kernel, &params, &[x, &self.weight, &self.sb], &out_shape)?
            }
        };
        if out_dtype == Dtype::Float32 {
            Ok(y)
        } else {
            y.astype(out_dtype)
        }
    }

    /// The arrays it holds (to read them at load time).
    pub fn arrays(&self) -> [&Array; 2] {
        [&self.weight, &self.sb]
    }
}

/// The numbers every kernel here gets: `[k, n, group_size, bits]` (then
/// the scales' format, `SbFormat::params`, where it reads them).
pub(super) fn dims(params: &[f32]) -> [usize; 4] {
    [params[0], params[1], params[2], params[3]].map(|v| v as usize)
}

/// The scales' format a kernel was given (`params[4..6]`).
pub(super) fn format(params: &[f32]) -> Option<SbFormat> {
    SbFormat::from_params(*params.get(4)?, *params.get(5)?)
}

/// Words of one tile's repacked weights.
pub(super) fn tile_words(k: usize, bits: usize) -> usize {
    TILE * k * bits / 32
}

/// Column `col`'s weight `e` in the repacked weights `w` (`bits` bits, `k` a column).
#[inline(always)]
pub(super) fn repacked_weight(w: &[u32], k: usize, bits: usize, col: usize, e: usize) -> u32 {
    let (per, (tile, c)) = (8 / bits, (col / TILE, col % TILE));
    let (s, i) = (e / 4, e % 4);
    let word = w[tile * tile_words(k, bits) + s / per * TILE + c];
    (word >> (8 * i + (s % per) * bits)) & ((1u32 << bits) - 1)
}

/// Column `col`'s scale and bias of group `g` in the repacked `sb`.
#[inline(always)]
pub(super) fn scale_bias(sb: &[f32], format: SbFormat, groups: usize, col: usize, g: usize) -> (f32, f32) {
    let (tile, c) = (col / TILE, col % TILE);
    let group = &sb[(tile * groups + g) * format.group_words()..][..format.group_words()];
    (format.read(group, c), format.read(group, TILE + c))
}

const REPACK_WEIGHTS: KernelF32 = |params, inputs, out| {
    let [k, n, _, bits] = dims(params);
    let w = inputs[0];
    if w.len() != n * k * bits / 32 || out.len() != n.div_ceil(TILE) * tile_words(k, bits) {
        out.fill(f32::NAN);
        return;
    }
    // SAFETY: f32 and u32 have the same size and alignment; the words are only moved, as integers.
    let w = unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u32>(), w.len()) };
    let out = OutPtr(out.as_mut_ptr());
    par_ranges(n.div_ceil(TILE), n * k >= PARALLEL_MIN, |tiles| {
        // The whole `OutPtr` (which is `Sync`), not its field.
        let dst = &out;
        let words = tile_words(k, bits);
        for tile in tiles {
            // SAFETY: the tile's words are inside `out` and belong to this range only; f32 and
            // u32 have the same size and alignment, and the words are only stored, as integers.
            let t = unsafe { std::slice::from_raw_parts_mut(dst.0.add(tile * words).cast::<u32>(), words) };
            repack_tile(w, n, k, bits, tile, t);
        }
    });
};

/// One tile's words in the repacked layout (`w` in MLX's packing) into `t`.
/// A row's word `u` holds the same weights in both layouts, so each word is
/// only reordered within (`interleave`) and moved to column `c` of word row `u`.
fn repack_tile(w: &[u32], n: usize, k: usize, bits: usize, tile: usize, t: &mut [u32]) {
    let rw = k * bits / 32;
    let cols = TILE.min(n - tile * TILE);
    if cols < TILE {
        // The missing columns of a partial last tile hold zero weights.
        t.fill(0);
    }
    for c in 0..cols {
        let row = &w[(tile * TILE + c) * rw..][..rw];
        for (u, &word) in row.iter().enumerate() {
            t[u * TILE + c] = interleave(word, bits);
        }
    }
}

/// A word of `32 / bits` weights in MLX's order (weight `m` at bit `m * bits`)
/// in the repacked order: weight `4 * j + i` at bit `8 * i + j * bits`, so that
/// byte `i` holds weights `i`, `i + 4`, ... (a transpose of `8 / bits` rows of
/// four fields into four bytes).
#[inline(always)]
fn interleave(word: u32, bits: usize) -> u32 {
    // The fields of `x`'s low byte (`bits` wide, `8 / bits` of them) one to a byte.
    let spread = |x: u32| match bits {
        // Nibble 0 to byte 0, nibble 1 to byte 1.
        4 => ((x & 0xF) | ((x & 0xF0) << 4)) & 0x0F0F,
        // Fields of two bits: field `i` to byte `i`.
        _ => ((x & 0x3) | ((x & 0xC) << 6) | ((x & 0x30) << 12) | ((x & 0xC0) << 18)) & 0x0303_0303,
    };
    match bits {
        8 => word,
        // Weights 0-3 (the low 16 bits) to the bytes' low nibbles, 4-7 to their high ones.
        4 => {
            let half = |h: u32| spread(h & 0xFF) | (spread((h >> 8) & 0xFF) << 16);
            half(word & 0xFFFF) | (half(word >> 16) << 4)
        }
        // Byte `j` of the word holds weights 4j..4j+3, which go to bits 2j of bytes 0-3.
        _ => (0..4).fold(0, |acc, j| acc | (spread((word >> (8 * j)) & 0xFF) << (2 * j))),
    }
}

const REPACK_SCALES: KernelF32 = |params, inputs, out| {
    let [k, n, gs, _] = dims(params);
    let groups = k / gs;
    let (scales, biases) = (inputs[0], inputs[1]);
    let Some(format) = format(params) else { return out.fill(f32::NAN) };
    if scales.len() != n * groups || biases.len() != scales.len() || out.len() != n.div_ceil(TILE) * groups * format.group_words() {
        out.fill(f32::NAN);
        return;
    }
    out.fill(0.0);
    for (col, (s, b)) in scales.chunks_exact(groups).zip(biases.chunks_exact(groups)).enumerate() {
        let (tile, c) = (col / TILE, col % TILE);
        for g in 0..groups {
            let group = &mut out[(tile * groups + g) * format.group_words()..][..format.group_words()];
            for (i, v) in [(c, s[g]), (TILE + c, b[g])] {
                if i >= TILE && matches!(format, SbFormat::F16Scaled(_)) {
                    // Not stored: `scale * c`.
                } else if format == SbFormat::F32 {
                    group[i] = v;
                } else {
                    // `Repacked::new` chose the format: every value is one of it exactly.
                    let word = group[i / 2].to_bits() | format.bits16(v) << (16 * (i % 2));
                    group[i / 2] = f32::from_bits(word);
                }
            }
        }
    }
};

/// One call's operands, with `x` already quantized (in index order).
pub(super) struct Packed<'a> {
    w: &'a [u32],
    sb: &'a [f32],
    format: SbFormat,
    xq: &'a [i8],
    xd: &'a [f32],
    xsum: &'a [f32],
    /// For 8-bit weights, per row and group the integer `sum(256 * hi + lo)`
    /// (`lo_shift(8)`)
    /// of the quantized `x` (`group_sums`); empty otherwise. Only the x86 AVX2
    /// path reads it.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    xint: &'a [i32],
    m: usize,
    n: usize,
    k: usize,
    group_size: usize,
    bits: usize,
}

/// For 8-bit weights, `xint` gets per row and group of the quantized `x`
/// (`xq`, each row's `hi` then `lo` part) the integer `sum(256 * hi + lo)`
/// (`lo_shift(8)`):
/// AVX2's path sums the weights less 128 (see `x86::tiles`) and adds back
/// `128` times it. Exact: at most 128 * 32,639 in size.
fn group_sums(xq: &[i8], k: usize, group_size: usize, bits: usize, xint: &mut Vec<i32>) {
    xint.clear();
    if bits != 8 {
        return;
    }
    for row in xq.chunks_exact(2 * k) {
        let (hi, lo) = row.split_at(k);
        let sums = hi.chunks_exact(group_size).zip(lo.chunks_exact(group_size));
        xint.extend(sums.map(|(h, l)| h.iter().zip(l).map(|(&h, &l)| ((h as i32) << lo_shift(bits)) + l as i32).sum::<i32>()));
    }
}

impl Packed<'_> {
    fn groups(&self) -> usize {
        self.k / self.group_size
    }
    /// Row `m`'s part (0: `hi`, 1: `lo`) of the quantized `x`.
    fn xq(&self, m: usize, part: usize) -> &[i8] {
        &self.xq[(2 * m + part) * self.k..][..self.k]
    }
}

/// A repacked matmul's operands (`params` `[k, n, group_size, bits, format,
/// c, ..]`, `inputs` `x`, weights, scales) checked against each other and
/// `out`'s length: its dimensions, format and weights' words, or `None`.
pub(super) fn operands<'a>(params: &[f32], inputs: &[&'a [f32]], out_len: usize) -> Option<([usize; 4], SbFormat, &'a [f32], &'a [u32], &'a [f32])> {
    let [k, n, group_size, bits] = dims(params);
    let format = format(params)?;
    let [x, w, sb] = [*inputs.first()?, *inputs.get(1)?, *inputs.get(2)?];
    let ok = k > 0
        && n > 0
        && matches!(bits, 2 | 4 | 8)
        && matches!(group_size, 32 | 64 | 128)
        && k % group_size == 0
        && x.len() % k == 0
        && out_len == x.len() / k * n
        && w.len() == n.div_ceil(TILE) * tile_words(k, bits)
        && sb.len() == n.div_ceil(TILE) * (k / group_size) * format.group_words();
    // SAFETY: f32 and u32 have the same size and alignment; the words are only read as integers.
    let w = unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u32>(), w.len()) };
    ok.then_some(([k, n, group_size, bits], format, x, w, sb))
}

const QMM_REPACKED: KernelF32 = |params, inputs, out| {
    let Some(([k, n, group_size, bits], format, x, w, sb)) = operands(params, inputs, out.len()) else { return out.fill(f32::NAN) };
    let m = x.len() / k;
    let groups = k / group_size;
    let mut compute = |(xq, xd, xsum, xint): &mut Scratch| {
        xq.resize(2 * m * k, 0);
        xd.resize(m * groups, 0.0);
        xsum.resize(m * groups, 0.0);
        // 8 bits: index order (the layout above).
        quantize_rows(x, k, group_size, (8, lo_shift(bits)), xq, xd, xsum);
        group_sums(xq, k, group_size, bits, xint);
        let p = Packed { w, sb, format, xq, xd, xsum, xint, m, n, k, group_size, bits };
        let out_ptr = OutPtr(out.as_mut_ptr());
        let isa = Isa::detect();
        par_ranges(n.div_ceil(TILE), m * n * k >= PARALLEL_MIN, |tiles| run_tiles(&p, tiles, out_ptr, isa));
    };
    // As in `qmm_int8`: a decode step's or small batch's rows in the thread's scratch, a prompt's
    // allocated per call.
    if m <= TILE {
        SCRATCH.with(|scratch| compute(&mut scratch.borrow_mut()));
    } else {
        compute(&mut Default::default());
    }
};

pub(super) fn run_tiles(p: &Packed, tiles: Range<usize>, out: OutPtr, isa: Isa) {
    match isa {
        Isa::Scalar => scalar_tiles(p, tiles, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::detect` (or the tests' `available`) chose it: the CPU has AVX2 and F16C.
        Isa::Avx2 => unsafe { x86::tiles_avx2(p, tiles, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above: the CPU has AVX2, F16C and AVX-VNNI.
        Isa::AvxVnni => unsafe { x86::tiles_avxvnni(p, tiles, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above: the CPU has AVX2, F16C, AVX-512 F, BW, VNNI and VL.
        Isa::Avx512Vnni => unsafe { x86::tiles_avx512_wide(p, tiles, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, and the OS granted this process AMX's tile data (`amx_usable`).
        Isa::Amx if p.m >= amx::MIN_ROWS => unsafe { amx::tiles(p, tiles, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as for Avx512Vnni (Amx's CPU has all it has).
        Isa::Amx => unsafe { x86::tiles_avx512_wide(p, tiles, out) },
    }
}

#[cfg(target_arch = "x86_64")]
#[path = "qmm_repack_amx.rs"]
mod amx;

/// Whether this CPU has AMX-INT8 and the OS grants this process its tile
/// data (asked once), and `MLX_NODE_CPU_FEATURES` allows it.
#[cfg(target_arch = "x86_64")]
pub(crate) fn amx_usable() -> bool {
    crate::cpu::math::amx_allowed() && amx::granted()
}

/// The portable path on the repacked layout: `qmm_int8::scalar_tiles`'
/// arithmetic, in its order.
fn scalar_tiles(p: &Packed, tiles: Range<usize>, out: OutPtr) {
    let (groups, bits, shift) = (p.groups(), p.bits, lo_shift(p.bits));
    let (per, per_group, mask) = (8 / bits, p.group_size * bits / 32, (1u32 << bits) - 1);
    for tile in tiles {
        let wt = &p.w[tile * tile_words(p.k, bits)..][..tile_words(p.k, bits)];
        for m in 0..p.m {
            let (xh, xl) = (p.xq(m, 0), p.xq(m, 1));
            let mut acc = [0f32; TILE];
            for g in 0..groups {
                let (mut hi, mut lo) = ([0i32; TILE], [0i32; TILE]);
                for u in g * per_group..(g + 1) * per_group {
                    for c in 0..TILE {
                        let word = wt[u * TILE + c];
                        for j in 0..per {
                            for i in 0..4 {
                                let (q, e) = (((word >> (8 * i + j * bits)) & mask) as i32, 4 * (u * per + j) + i);
                                hi[c] += q * xh[e] as i32;
                                lo[c] += q * xl[e] as i32;
                            }
                        }
                    }
                }
                let (d, xs) = (p.xd[m * groups + g], p.xsum[m * groups + g]);
                for c in 0..TILE {
                    // Past `n` the tile's scales are zero (and its columns not stored).
                    let (scale, bias) = scale_bias(p.sb, p.format, groups, tile * TILE + c, g);
                    acc[c] += ((hi[c] << shift) + lo[c]) as f32 * (scale * d);
                    acc[c] += bias * xs;
                }
            }
            for (c, &v) in acc.iter().enumerate().take(p.n - tile * TILE) {
                // SAFETY: (m, column) is inside `out`, and the column belongs to this call.
                unsafe { *out.0.add(m * p.n + tile * TILE + c) = v };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{tile_words, Packed, SbFormat, TILE};
    use crate::cpu::kernel::OutPtr;
    use crate::cpu::qmm::avx2::store_lanes;
    use crate::cpu::qmm_int8::x86::{add_group, dot_avx512vnni, dot_avxvnni, dot_lanes_avx2};
    use crate::cpu::qmm_int8::CHUNK;
    use crate::cpu::qmm_quantize::lo_shift;

    /// The vector path, once per instruction set (a target feature cannot be
    /// a generic parameter): per `CHUNK` rows, tile by tile (`T` tiles at a
    /// time), `R` rows at a time (up to `$most`) against each vector of
    /// weights, unpacked once for them.
    macro_rules! tiles {
        ($name:ident, $features:literal, $dot:ident, $most:literal, $pairs16:literal) => {
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $name(p: &Packed, tiles: Range<usize>, out: OutPtr) {
                /// Rows `m0..m0 + R` of tiles `tile..tile + T`, at `BITS` bits a weight.
                #[target_feature(enable = $features)]
                #[inline]
                unsafe fn rows<const R: usize, const T: usize, const BITS: usize>(
                    p: &Packed,
                    m0: usize,
                    tile: usize,
                    out: OutPtr,
                    ahead: Option<Range<usize>>,
                ) {
                    let groups = p.groups();
                    let (per, per_group) = (8 / BITS, p.group_size * BITS / 32);
                    let wt: [*const u32; T] = std::array::from_fn(|t| p.w.as_ptr().add((tile + t) * tile_words(p.k, BITS)));
                    let sb: [*const f32; T] = std::array::from_fn(|t| p.sb.as_ptr().add((tile + t) * groups * p.format.group_words()));
                    let xh: [*const i8; R] = std::array::from_fn(|r| p.xq(m0 + r, 0).as_ptr());
                    let xl: [*const i8; R] = std::array::from_fn(|r| p.xq(m0 + r, 1).as_ptr());
                    let bcast = |x: *const i8, o: usize| _mm256_set1_epi32(x.add(o).cast::<i32>().read_unaligned());
                    let mask = _mm256_set1_epi8(((1u32 << BITS) - 1) as u8 as i8);
                    let shift = _mm256_set1_epi32(lo_shift(BITS) as i32);
                    let mut acc = [[_mm256_setzero_ps(); T]; R];
                    for g in 0..groups {
                        if let Some(t) = &ahead {
                            prefetch_packed(p, t.clone(), g, groups);
                        }
                        // One row of one tile sums into two accumulators per part (alternate slots),
                        // so that its dot products do not all wait on one another (two tiles already
                        // give a row two independent sums per part).
                        let (mut hi, mut lo) = ([[[_mm256_setzero_si256(); 2]; T]; R], [[[_mm256_setzero_si256(); 2]; T]; R]);
                        // With AVX2 and 2- or 4-bit weights, `vpmaddubsw`'s pair sums (at most
                        // 2 * 15 * 127 = 3810 in size) are added up in i16 over 8 slots (30480 at
                        // most, exact), then widened into the row's `16 * hi + lo` at once (`vpmaddwd`
                        // by 16 and by 1; `lo_shift`): per row and slot, 4.5 vector operations after the
                        // broadcasts instead of 6 (a quarter fewer), and the same integers.
                        let pairs16 = $pairs16 && BITS < 8;
                        // With AVX2 and 8-bit weights `q`, each row sums `(q - 128) * x` as llama.cpp
                        // sums its signed Q8_0 weights: `vpmaddubsw(|q - 128|, x * sign(q - 128))`,
                        // whose pair sums (at most 2 * 128 * 127 = 32512) fit i16, then `vpmaddwd`
                        // by 1; the group's `128 * sum(x)` (`xint`) is added back below. Five
                        // operations per row and slot instead of eight widening every byte.
                        let signed8 = $pairs16 && BITS == 8;
                        let (flip, ones) = (_mm256_set1_epi8(-128), _mm256_set1_epi16(1));
                        let (mut hi16, mut lo16, mut isum16) =
                            ([[_mm256_setzero_si256(); T]; R], [[_mm256_setzero_si256(); T]; R], [[_mm256_setzero_si256(); T]; R]);
                        for u in g * per_group..(g + 1) * per_group {
                            let w: [__m256i; T] = std::array::from_fn(|t| _mm256_loadu_si256(wt[t].add(u * TILE).cast()));
                            let (ws, wa) = if signed8 {
                                let ws = w.map(|w| _mm256_xor_si256(w, flip));
                                (ws, ws.map(|ws| _mm256_abs_epi8(ws)))
                            } else {
                                (w, w)
                            };
                            for j in 0..per {
                                let wj = w.map(|w| match BITS {
                                    8 => w,
                                    4 if j == 0 => _mm256_and_si256(w, mask),
                                    _ => _mm256_and_si256(_mm256_srl_epi16(w, _mm_cvtsi32_si128((j * BITS) as i32)), mask),
                                });
                                let slot = u * per + j;
                                let (o, a) = (4 * slot, if R == 1 && T == 1 { slot % 2 } else { 0 });
                                for r in 0..R {
                                    // Each broadcast serves the `T` tiles.
                                    let (bh, bl) = (bcast(xh[r], o), bcast(xl[r], o));
                                    for t in 0..T {
                                        if pairs16 {
                                            hi16[r][t] = _mm256_add_epi16(hi16[r][t], _mm256_maddubs_epi16(wj[t], bh));
                                            lo16[r][t] = _mm256_add_epi16(lo16[r][t], _mm256_maddubs_epi16(wj[t], bl));
                                        } else if signed8 {
                                            let dot = |acc, x| {
                                                _mm256_add_epi32(
                                                    acc,
                                                    _mm256_madd_epi16(_mm256_maddubs_epi16(wa[t], _mm256_sign_epi8(x, ws[t])), ones),
                                                )
                                            };
                                            hi[r][t][a] = dot(hi[r][t][a], bh);
                                            lo[r][t][a] = dot(lo[r][t][a], bl);
                                        } else {
                                            hi[r][t][a] = $dot(hi[r][t][a], wj[t], bh, BITS);
                                            lo[r][t][a] = $dot(lo[r][t][a], wj[t], bl, BITS);
                                        }
                                    }
                                }
                                // Every 8 slots (a group holds 8, 16 or 32).
                                if pairs16 && slot % SLOTS16 == SLOTS16 - 1 {
                                    let (up, ones) = (_mm256_set1_epi16(1 << lo_shift(BITS)), _mm256_set1_epi16(1));
                                    for r in 0..R {
                                        for t in 0..T {
                                            let part = _mm256_add_epi32(_mm256_madd_epi16(hi16[r][t], up), _mm256_madd_epi16(lo16[r][t], ones));
                                            isum16[r][t] = _mm256_add_epi32(isum16[r][t], part);
                                            (hi16[r][t], lo16[r][t]) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                                        }
                                    }
                                }
                            }
                        }
                        let scale_bias: [(__m256, __m256); T] = std::array::from_fn(|t| scale_bias(sb[t], p.format, g));
                        for r in 0..R {
                            let at = (m0 + r) * groups + g;
                            for t in 0..T {
                                let (h, l) = (_mm256_add_epi32(hi[r][t][0], hi[r][t][1]), _mm256_add_epi32(lo[r][t][0], lo[r][t][1]));
                                let isum = if pairs16 {
                                    isum16[r][t]
                                } else if signed8 {
                                    let back = _mm256_set1_epi32(128 * *p.xint.get_unchecked(at));
                                    _mm256_add_epi32(_mm256_add_epi32(_mm256_sllv_epi32(h, shift), l), back)
                                } else {
                                    _mm256_add_epi32(_mm256_sllv_epi32(h, shift), l)
                                };
                                let (scale, bias) = scale_bias[t];
                                add_group(&mut acc[r][t], isum, scale, bias, *p.xd.get_unchecked(at), *p.xsum.get_unchecked(at));
                            }
                        }
                    }
                    for (r, tiles) in acc.iter().enumerate() {
                        for (t, a) in tiles.iter().enumerate() {
                            let n0 = (tile + t) * TILE;
                            store_lanes(out.0.add((m0 + r) * p.n + n0), *a, p.n - n0);
                        }
                    }
                }

                #[target_feature(enable = $features)]
                #[inline]
                unsafe fn all<const BITS: usize>(p: &Packed, tiles: Range<usize>, out: OutPtr) {
                    // AVX2 takes two tiles a pass, two rows at a time: one broadcast of a row's part
                    // then serves both tiles' `vpmaddubsw`, and the two rows' four part pointers stay
                    // in registers (four rows of one tile spent an eighth of the loop's instructions
                    // on their address arithmetic). Decode, one row, on a Zen 3: Qwen3-0.6B 4-bit
                    // ~33 -> ~41 tok/s, Q4_0 ~28 -> ~37, Q8_0 ~20 -> ~25; eight rows about as before
                    // (their `vpmaddubsw` are the bound; docs/decode-profile.md).
                    let two = $pairs16;
                    for r0 in (0..p.m).step_by(CHUNK) {
                        let end = (r0 + CHUNK).min(p.m);
                        let mut tile = tiles.start;
                        while tile < tiles.end {
                            let t = if two && tile + 1 < tiles.end { 2 } else { 1 };
                            for (m, r) in row_blocks(end - r0, if t == 2 { 2 } else { $most }) {
                                // The next tiles, read from memory under the first rows' work.
                                let ahead = (m == 0).then_some(tile + t..tile + 2 * t);
                                match (t, r) {
                                    (2, 2) => rows::<2, 2, BITS>(p, r0 + m, tile, out, ahead),
                                    (2, _) => rows::<1, 2, BITS>(p, r0 + m, tile, out, ahead),
                                    (_, 8) => rows::<8, 1, BITS>(p, r0 + m, tile, out, ahead),
                                    (_, 4) => rows::<4, 1, BITS>(p, r0 + m, tile, out, ahead),
                                    (_, 2) => rows::<2, 1, BITS>(p, r0 + m, tile, out, ahead),
                                    _ => rows::<1, 1, BITS>(p, r0 + m, tile, out, ahead),
                                }
                            }
                            tile += t;
                        }
                    }
                }

                match p.bits {
                    2 => all::<2>(p, tiles, out),
                    4 => all::<4>(p, tiles, out),
                    _ => all::<8>(p, tiles, out),
                }
            }
        };
    }

    /// The blocks `(first row, rows)` a chunk's `len` rows are taken in: eight
    /// at a time where the path holds eight rows (`most`), then four (where it
    /// holds four), two (for two or three left, or all but one where it holds
    /// two) or one.
    fn row_blocks(len: usize, most: usize) -> impl Iterator<Item = (usize, usize)> {
        let mut m = 0;
        std::iter::from_fn(move || {
            let r = match len - m {
                0 => return None,
                left if most >= 8 && left >= 8 => 8,
                left if most >= 4 && left >= 4 => 4,
                1 => 1,
                _ => 2,
            };
            m += r;
            Some((m - r, r))
        })
    }

    /// Group `g`'s eight scales and eight biases from a tile's `sb`, widened
    /// to float32 (exact: F16C's `vcvtph2ps`, or a shift for bfloat16).
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    pub(crate) unsafe fn scale_bias(sb: *const f32, format: SbFormat, g: usize) -> (__m256, __m256) {
        let at = sb.add(g * format.group_words());
        let half = |i: usize| _mm_loadu_si128(at.cast::<__m128i>().add(i));
        match format {
            SbFormat::F32 => (_mm256_loadu_ps(at), _mm256_loadu_ps(at.add(TILE))),
            SbFormat::F16 => (_mm256_cvtph_ps(half(0)), _mm256_cvtph_ps(half(1))),
            SbFormat::F16Scaled(c) => {
                let scale = _mm256_cvtph_ps(half(0));
                (scale, _mm256_mul_ps(scale, _mm256_set1_ps(c)))
            }
            SbFormat::Bf16 => {
                let widen = |h: __m128i| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)));
                (widen(half(0)), widen(half(1)))
            }
        }
    }

    /// Vector `u` of two tiles' repacked weights (at `wa` and `wb`), the
    /// first tile's eight words in the low half, the second's in the high.
    #[target_feature(enable = "avx2,avx512f")]
    #[inline]
    pub(crate) unsafe fn pair_vector(wa: *const u32, wb: *const u32, u: usize) -> __m512i {
        let low = _mm512_castsi256_si512(_mm256_loadu_si256(wa.add(u * TILE).cast()));
        _mm512_inserti64x4::<1>(low, _mm256_loadu_si256(wb.add(u * TILE).cast()))
    }

    /// Slot `j` of a `pair_vector` at `BITS` bits a weight: each byte's weight
    /// in bits `j * BITS ..` (`mask` that many ones in every byte).
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    pub(super) unsafe fn pair_slot<const BITS: usize>(w: __m512i, j: usize, mask: __m512i) -> __m512i {
        match BITS {
            8 => w,
            4 if j == 0 => _mm512_and_si512(w, mask),
            _ => _mm512_and_si512(_mm512_srl_epi16(w, _mm_cvtsi32_si128((j * BITS) as i32)), mask),
        }
    }

    /// Part `part` of `parts` of tiles `tiles`' repacked weights and scales
    /// (`tile_words` and `gw` words a tile), brought toward L1: issued while
    /// the tiles before them compute, so that their reads from memory overlap
    /// that work instead of stalling their own first loads (decode steps and
    /// batches read every weight from memory once). Nothing past the arrays
    /// is asked for.
    #[inline(always)]
    pub(crate) unsafe fn prefetch_tiles(w: &[u32], sb: &[f32], (tw, gw): (usize, usize), tiles: Range<usize>, part: usize, parts: usize) {
        let regions = [(w.as_ptr().cast::<u8>(), w.len() * 4, tw * 4), (sb.as_ptr().cast::<u8>(), sb.len() * 4, gw * 4)];
        for (base, len, per_tile) in regions {
            let (from, to) = (tiles.start * per_tile, (tiles.end * per_tile).min(len));
            let lines = to.saturating_sub(from).div_ceil(64);
            for line in part * lines / parts..(part + 1) * lines / parts {
                _mm_prefetch::<_MM_HINT_T0>(base.add(from + 64 * line).cast());
            }
        }
    }

    /// `prefetch_tiles` of `p`'s.
    #[inline(always)]
    pub(super) unsafe fn prefetch_packed(p: &Packed, tiles: Range<usize>, part: usize, parts: usize) {
        let words = (tile_words(p.k, p.bits), p.groups() * p.format.group_words());
        prefetch_tiles(p.w, p.sb, words, tiles, part, parts)
    }

    /// Group `g`'s scales and biases of two tiles (their `sb` at `sa` and
    /// `sb`), widened as `scale_bias` does, side by side as `pair_vector`
    /// lays their weights: `[scales, biases]`, the first tile's low.
    #[target_feature(enable = "avx2,f16c,avx512f")]
    #[inline]
    pub(crate) unsafe fn pair_scale_bias(sa: *const f32, sb: *const f32, format: SbFormat, g: usize) -> [__m512; 2] {
        let join = |a: __m256, b: __m256| _mm512_castpd_ps(_mm512_insertf64x4::<1>(_mm512_castpd256_pd512(_mm256_castps_pd(a)), _mm256_castps_pd(b)));
        let ((scale_a, bias_a), (scale_b, bias_b)) = (scale_bias(sa, format, g), scale_bias(sb, format, g));
        [join(scale_a, scale_b), join(bias_a, bias_b)]
    }

    /// Slots whose `vpmaddubsw` pair sums the AVX2 path adds up in i16 before widening.
    const SLOTS16: usize = 8;

    // Rows at a time on one tile: 4 in AVX2's 16 vector registers (AVX2 takes a range's odd last
    // tile so; the rest go two tiles by two rows, `all`), 8 in AVX-512's 32. VNNI's `vpdpbusd`
    // sums into i32 itself, so only AVX2 adds pair sums in i16.
    tiles!(tiles_avx2, "avx2,f16c", dot_lanes_avx2, 4, true);
    tiles!(tiles_avxvnni, "avx2,f16c,avxvnni", dot_avxvnni, 4, false);
    tiles!(tiles_avx512vnni, "avx2,f16c,avx512vnni,avx512vl", dot_avx512vnni, 8, false);
    /// AVX-512 VNNI on 512-bit vectors: two tiles side by side (tile `t`'s
    /// eight columns in the low half, `t + 1`'s in the high half), so that one
    /// broadcast of a row's four bytes and one `vpdpbusd` serve sixteen
    /// columns: half the instructions of the 256-bit path, which measured
    /// 1.8x the bytes per second on 512 bits here (Sapphire Rapids, one core,
    /// independent chains). The same integer sums, and the float steps are
    /// `add_group`'s per lane, both tiles in one 512-bit vector (as two 256-bit
    /// halves they were 9% of a batch of eight's call: 1024 -> 3072 at 4 bits,
    /// one thread, Zen 4, 0.3025 against 0.275 ms), so the same bits. A
    /// range's odd last tile takes the 256-bit path.
    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
    pub(super) unsafe fn tiles_avx512_wide(p: &Packed, tiles: Range<usize>, out: OutPtr) {
        /// Rows `m0..m0 + R` of tiles `tile` and `tile + 1`, at `BITS` bits a weight.
        #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
        #[inline]
        unsafe fn rows<const R: usize, const BITS: usize>(p: &Packed, m0: usize, tile: usize, out: OutPtr, ahead: Option<Range<usize>>) {
            let groups = p.groups();
            let (per, per_group) = (8 / BITS, p.group_size * BITS / 32);
            let tw = tile_words(p.k, BITS);
            let (wa, wb) = (p.w.as_ptr().add(tile * tw), p.w.as_ptr().add((tile + 1) * tw));
            let gw = groups * p.format.group_words();
            let (sa, sb) = (p.sb.as_ptr().add(tile * gw), p.sb.as_ptr().add((tile + 1) * gw));
            let xh: [*const i8; R] = std::array::from_fn(|r| p.xq(m0 + r, 0).as_ptr());
            let xl: [*const i8; R] = std::array::from_fn(|r| p.xq(m0 + r, 1).as_ptr());
            let bcast = |x: *const i8, o: usize| _mm512_set1_epi32(x.add(o).cast::<i32>().read_unaligned());
            let mask = _mm512_set1_epi8(((1u32 << BITS) - 1) as u8 as i8);
            let shift = _mm512_set1_epi32(lo_shift(BITS) as i32);
            let mut acc = [_mm512_setzero_ps(); R];
            for g in 0..groups {
                if let Some(t) = &ahead {
                    prefetch_packed(p, t.clone(), g, groups);
                }
                // As the 256-bit path: one row alone alternates two accumulators per part.
                let (mut hi, mut lo) = ([[_mm512_setzero_si512(); 2]; R], [[_mm512_setzero_si512(); 2]; R]);
                for u in g * per_group..(g + 1) * per_group {
                    let w = pair_vector(wa, wb, u);
                    for j in 0..per {
                        let wj = pair_slot::<BITS>(w, j, mask);
                        let slot = u * per + j;
                        let (o, a) = (4 * slot, if R == 1 { slot % 2 } else { 0 });
                        for r in 0..R {
                            hi[r][a] = _mm512_dpbusd_epi32(hi[r][a], wj, bcast(xh[r], o));
                            lo[r][a] = _mm512_dpbusd_epi32(lo[r][a], wj, bcast(xl[r], o));
                        }
                    }
                }
                let [scale, bias] = pair_scale_bias(sa, sb, p.format, g);
                for r in 0..R {
                    let (h, l) = (_mm512_add_epi32(hi[r][0], hi[r][1]), _mm512_add_epi32(lo[r][0], lo[r][1]));
                    let isum = _mm512_add_epi32(_mm512_sllv_epi32(h, shift), l);
                    let at = (m0 + r) * groups + g;
                    let (d, xsum) = (*p.xd.get_unchecked(at), *p.xsum.get_unchecked(at));
                    // `add_group`'s steps on both tiles at once: the same operations per lane.
                    let t = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(scale, _mm512_set1_ps(d)));
                    acc[r] = _mm512_add_ps(acc[r], t);
                    acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(bias, _mm512_set1_ps(xsum)));
                }
            }
            for (r, a) in acc.iter().enumerate() {
                let (row, n0) = (out.0.add((m0 + r) * p.n), tile * TILE);
                store_lanes(row.add(n0), _mm512_castps512_ps256(*a), p.n - n0);
                store_lanes(row.add(n0 + TILE), _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(*a))), p.n - n0 - TILE);
            }
        }

        #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
        #[inline]
        unsafe fn all<const BITS: usize>(p: &Packed, pairs: Range<usize>, out: OutPtr) {
            for r0 in (0..p.m).step_by(CHUNK) {
                let end = (r0 + CHUNK).min(p.m);
                for tile in pairs.clone().step_by(2) {
                    for (m, r) in row_blocks(end - r0, 8) {
                        // The next pair, read from memory under the first rows' work.
                        let ahead = (m == 0).then_some(tile + 2..tile + 4);
                        match r {
                            8 => rows::<8, BITS>(p, r0 + m, tile, out, ahead),
                            4 => rows::<4, BITS>(p, r0 + m, tile, out, ahead),
                            2 => rows::<2, BITS>(p, r0 + m, tile, out, ahead),
                            _ => rows::<1, BITS>(p, r0 + m, tile, out, ahead),
                        }
                    }
                }
            }
        }

        let paired = tiles.start..tiles.end - tiles.len() % 2;
        match p.bits {
            2 => all::<2>(p, paired.clone(), out),
            4 => all::<4>(p, paired.clone(), out),
            _ => all::<8>(p, paired.clone(), out),
        }
        if paired.end < tiles.end {
            tiles_avx512vnni(p, paired.end..tiles.end, out);
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::cpu::qmm_int8::tests::{problem_data, run, Data};
    use crate::cpu::qmm_int8::weight;

    /// `w`, `scales` and `biases` repacked by the load-time kernels' own code,
    /// the scales and biases in `format` (which must hold them exactly).
    pub(in crate::cpu) fn repack(
        w: &[u32],
        s: &[f32],
        b: &[f32],
        (k, n, gs, bits): (usize, usize, usize, usize),
        format: SbFormat,
    ) -> (Vec<u32>, Vec<f32>, SbFormat) {
        let [code, c] = format.params();
        let params = [k as f32, n as f32, gs as f32, bits as f32, code, c];
        let tiles = n.div_ceil(TILE);
        let mut words = vec![0f32; tiles * tile_words(k, bits)];
        // SAFETY: u32 and f32 have the same size and alignment (the kernel's input is the words' bits).
        let wf = unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<f32>(), w.len()) };
        REPACK_WEIGHTS(&params, &[wf], &mut words);
        let mut sb = vec![f32::NAN; tiles * (k / gs) * format.group_words()];
        REPACK_SCALES(&params, &[s, b], &mut sb);
        (words.iter().map(|v| v.to_bits()).collect(), sb, format)
    }

    fn run_repacked(
        isa: Isa,
        x: &[f32],
        (w, sb, format): &(Vec<u32>, Vec<f32>, SbFormat),
        (m, k, n, gs, bits): (usize, usize, usize, usize, usize),
    ) -> Vec<f32> {
        let groups = k / gs;
        let mut xq = vec![0i8; 2 * m * k];
        let (mut xd, mut xsum) = (vec![0f32; m * groups], vec![0f32; m * groups]);
        quantize_rows(x, k, gs, (8, lo_shift(bits)), &mut xq, &mut xd, &mut xsum);
        let mut xint = Vec::new();
        group_sums(&xq, k, gs, bits, &mut xint);
        let p = Packed { w, sb, format: *format, xq: &xq, xd: &xd, xsum: &xsum, xint: &xint, m, n, k, group_size: gs, bits };
        let mut got = vec![f32::NAN; m * n];
        run_tiles(&p, 0..n.div_ceil(TILE), OutPtr(got.as_mut_ptr()), isa);
        got
    }

    /// Every instruction set on the repacked layout gives the bits of
    /// `qmm_int8`'s portable path on MLX's layout, for one row, a small
    /// batch and a prompt, and each row the bits it gets alone, with its
    /// scales and biases held in each format; a NaN or an infinity makes its
    /// row NaN only.
    #[test]
    fn the_repacked_layout_gives_the_portable_bits_for_every_row_count() {
        // Every width and group size, `n` a multiple of the tile and not, 1 to 8 rows and more
        // (a partial row block of 4 after whole ones, and more than a CHUNK of 64, with AMX's
        // tiles where the CPU has them).
        let cases = [
            (1, 256, 70, 64, 4),
            (3, 128, 33, 32, 8),
            (2, 256, 40, 128, 2),
            (5, 576, 17, 32, 4),
            (1, 512, 24, 128, 8),
            (4, 64, 9, 32, 2),
            (2, 256, 20, 128, 4),
            (8, 192, 12, 64, 4),
            (7, 96, 10, 32, 8),
            (6, 96, 10, 32, 2),
            (11, 128, 20, 64, 8),
            (70, 64, 13, 32, 4),
            (9, 256, 16, 128, 2),
            // AMX's rows (16 or more): groups of 128 (two products a group) with a lone row after
            // two blocks, one group a row, an odd tile count (a lone tile) with a partial block,
            // a partial last tile.
            (17, 128, 24, 128, 4),
            (16, 64, 16, 64, 8),
            (21, 96, 40, 32, 2),
            (24, 256, 9, 64, 8),
        ];
        for (i, &(m, k, n, gs, bits)) in cases.iter().enumerate() {
            let Data { mut x, w, mut s, mut b, .. } = problem_data(m, k, n, gs, bits, 40 + i as u64);
            // Each format in turn, the scales and biases rounded to it first (for scales alone, the
            // biases made -8 times the scales, as a GGUF Q4_0 block's).
            let format = [SbFormat::F32, SbFormat::F16, SbFormat::Bf16, SbFormat::F16Scaled(-8.0)][i % 4];
            let round = [|v: f32| v, round_f16, round_bf16, round_f16][i % 4];
            s.iter_mut().chain(b.iter_mut()).for_each(|v| *v = round(*v));
            if let SbFormat::F16Scaled(c) = format {
                b.iter_mut().zip(&s).for_each(|(b, s)| *b = s * c);
            }
            let dims = (m as usize, k as usize, n as usize, gs as usize, bits as usize);
            let (m, k, n) = (dims.0, dims.1, dims.2);
            // A NaN in the first row and an infinity in the last where there are three rows or more.
            let bad = if m >= 3 { vec![0, m - 1] } else { vec![] };
            if m >= 3 {
                x[3] = f32::NAN;
                x[(m - 1) * k + k / 2] = f32::INFINITY;
            }
            let portable = run(Isa::Scalar, &x, &w, &s, &b, dims);
            let alone: Vec<f32> = x.chunks_exact(k).flat_map(|row| run(Isa::Scalar, row, &w, &s, &b, (1, k, n, dims.3, dims.4))).collect();
            let packed = repack(&w, &s, &b, (k, n, dims.3, dims.4), format);
            assert_eq!(packed.0.len(), n.div_ceil(TILE) * TILE * k * dims.4 / 32, "case {i}: the weights keep their size");
            let sb_words = [2 * TILE, TILE, TILE, TILE / 2][i % 4];
            assert_eq!(packed.1.len(), n.div_ceil(TILE) * k / dims.3 * sb_words, "case {i}: {format:?} scales' size");
            for isa in Isa::available() {
                let got = run_repacked(isa, &x, &packed, dims);
                for (r, ((g, want), a)) in got.chunks_exact(n).zip(portable.chunks_exact(n)).zip(alone.chunks_exact(n)).enumerate() {
                    if bad.contains(&r) {
                        assert!(g.iter().all(|v| v.is_nan()), "case {i}, {isa:?}: row {r} is not NaN");
                    } else {
                        let same = |o: &[f32]| g.iter().zip(o).all(|(g, o)| g.is_finite() && g.to_bits() == o.to_bits());
                        assert!(same(want), "case {i}, {isa:?}, {format:?}: row {r} of {m} differs from the portable path");
                        assert!(same(a), "case {i}, {isa:?}: row {r} of {m} differs from that row alone");
                    }
                }
            }
        }
    }

    #[test]
    fn the_largest_integer_sums_are_exact_on_every_path() {
        // Every weight at its largest (15 or 3) and every `x` quantized to parts of the largest
        // size, so the AVX2 path's i16 sums of 8 slots reach their bound (30480): a row of 1.0s
        // (hi 127), one of -1.0s (hi -127) and one whose parts are 126 and 127 (lo near its
        // largest), 1, 3 and 17 rows (the lone row's accumulators, the 2-row block, AMX's tiles).
        // 8-bit weights at 255, at 0 (AVX2 takes `q - 128`: 128 in size, its pair sums' bound
        // 32512) and alternating.
        let cases = [(2usize, u32::MAX), (4, u32::MAX), (8, u32::MAX), (8, 0), (8, 0xFF00_FF00)];
        for (bits, word) in cases {
            let (k, n, gs) = (256usize, 16usize, 64usize);
            let w = vec![word; n * k * bits / 32];
            let (s, b) = (vec![1.0f32; n * k / gs], vec![0.0f32; n * k / gs]);
            let near = (126.0 + 127.0 / 256.0) / 127.0;
            let rows: Vec<f32> = [1.0f32, -1.0, near].iter().flat_map(|&v| (0..k).map(move |e| if e % gs == 0 { v.signum() } else { v })).collect();
            for m in [1usize, 3, 17] {
                let x = &rows.iter().cycle().take(m * k).copied().collect::<Vec<f32>>();
                let dims = (m, k, n, gs, bits);
                let portable = run(Isa::Scalar, x, &w, &s, &b, dims);
                let packed = repack(&w, &s, &b, (k, n, gs, bits), SbFormat::F32);
                for isa in Isa::available() {
                    let got = run_repacked(isa, x, &packed, dims);
                    assert!(
                        got.iter().zip(&portable).all(|(g, p)| g.to_bits() == p.to_bits()),
                        "{bits} bits ({word:#x}), {m} rows, {isa:?}: {:?} against {:?}",
                        &got[..4],
                        &portable[..4]
                    );
                }
            }
        }
    }

    /// Every weight of the repacked layout (read back as the kernels read it)
    /// is the weight at that column and index in MLX's packing, for each width,
    /// a partial last tile included, whose missing columns hold zeros.
    #[test]
    fn the_repacked_weights_are_mlx_weights_reordered() {
        for bits in [2usize, 4, 8] {
            let (k, n) = (128usize, TILE + 3);
            let mut state = 0x2545_F491_4F6C_DD1Du64;
            let w: Vec<u32> = (0..n * k * bits / 32)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u32
                })
                .collect();
            let (s, b) = (vec![1.0f32; n * k / 32], vec![0.0f32; n * k / 32]);
            let (packed, _, _) = repack(&w, &s, &b, (k, n, 32, bits), SbFormat::F32);
            for col in 0..2 * TILE {
                let row = &w[col.min(n - 1) * k * bits / 32..][..k * bits / 32];
                for e in 0..k {
                    let want = if col < n { weight(row, bits, e) as u32 } else { 0 };
                    assert_eq!(repacked_weight(&packed, k, bits, col, e), want, "{bits} bits, column {col}, weight {e}");
                }
            }
        }
    }

    /// Scales and biases are held in 16 bits where every one of them is a
    /// float16 value (else a bfloat16 one) exactly, else in float32.
    #[test]
    fn the_scales_take_the_narrowest_exact_format() {
        let arr = |v: &[f32]| Array::from_slice(v, &[v.len() as i32]).unwrap();
        // 1 + 2^-10 and 65504 take ten fraction bits (bfloat16 has seven); 2^-24 is float16's
        // smallest subnormal; 2^100 overflows float16.
        let f16s = [1.0009765625, -0.0078125, 65504.0, -0.0, 5.9604645e-8];
        let bf16s = [f32::from_bits(0x7180_0000), 0.5, -3.0];
        let neither = [0.1; 5];
        let pick = |s: &[f32], b: &[f32]| SbFormat::narrowest(&arr(s), &arr(b)).unwrap().0;
        let mut other = f16s;
        other.reverse();
        assert_eq!(pick(&f16s, &other), SbFormat::F16);
        assert_eq!(pick(&f16s, &f16s), SbFormat::F16Scaled(1.0), "biases equal to the scales");
        assert_eq!(pick(&f16s, &bf16s), SbFormat::F32, "neither holds both");
        assert_eq!(pick(&bf16s, &bf16s), SbFormat::Bf16);
        assert_eq!(pick(&f16s, &neither), SbFormat::F32);
        let small = [1.0009765625, -0.0078125, 0.5, -0.0, 3.0];
        let mut times = small.map(|s| s * -8.0);
        assert_eq!(pick(&small, &times), SbFormat::F16Scaled(-8.0), "biases -8 times the scales");
        times[4] = 1.0;
        assert_eq!(pick(&small, &times), SbFormat::F16, "all but one");
        let h = arr(&[0.1]).astype(Dtype::Float16).unwrap();
        assert_eq!(SbFormat::narrowest(&h, &h).unwrap(), (SbFormat::F16, false), "16-bit values are not read");
    }
}
