//! The decode-attention kernel (`cpu::decode_attention`) against MLX's own
//! `scaled_dot_product_attention` on the positions each cache holds.

use mlx::cpu::decode_attention::{decode_attention, CachedKv};
use mlx::fast::{scaled_dot_product_attention_mlx, AttentionMask};
use mlx::{random, Array, Dtype};

pub(crate) fn normal(shape: &[i32], seed: u64) -> Array {
    random::normal(shape, Dtype::Float32, 0.0, 1.0, Some(&random::key(seed).unwrap())).unwrap()
}

/// A cache buffer `[rows, heads, capacity, d]`: `len` random positions, then
/// NaN where a cache has not written yet (read by mistake, they would show).
pub(crate) fn buffer(rows: i32, heads: i32, len: i32, capacity: i32, d: i32, seed: u64) -> Array {
    let held = normal(&[rows, heads, len, d], seed);
    if capacity == len {
        return held;
    }
    let unwritten = Array::full(&[rows, heads, capacity - len, d], f64::NAN, Dtype::Float32).unwrap();
    Array::concatenate(&[&held, &unwritten], 2).unwrap()
}

/// MLX's attention, batch row by batch row over each cache's held positions,
/// for `q` `[B, n_q, T, d]` whose positions are the last `T` each cache holds
/// (causal for several positions), as `[B, T, n_q * d]`.
pub(crate) fn reference(q: &Array, kv: &[CachedKv], scale: f32, causal: bool) -> Vec<f32> {
    let mut out = Vec::new();
    let mut b = 0;
    for c in kv {
        for r in 0..c.keys.dim(0) {
            let held = |a: &Array| a.slice_axis(0, r, r + 1).unwrap().slice_axis(2, 0, c.len).unwrap();
            let qb = q.slice_axis(0, b, b + 1).unwrap();
            let o = scaled_dot_product_attention_mlx(
                &qb,
                &held(c.keys),
                &held(c.values),
                scale,
                if causal { AttentionMask::Causal } else { AttentionMask::None },
            )
            .unwrap();
            out.extend(o.transpose(&[0, 2, 1, 3]).unwrap().flatten().unwrap().to_vec::<f32>().unwrap());
            b += 1;
        }
    }
    out
}

fn has_kernel() -> bool {
    mlx::cpu::kernel::Kernel::DecodeAttention.enabled()
}

#[test]
fn decode_attention_equals_mlx() {
    // (query heads per key head, head dimension): MHA, SmolLM2's 3, Qwen3-0.6B's 2 at 128, 8.
    let cases: [(i32, i32); 6] = [(1, 64), (3, 64), (8, 64), (1, 128), (2, 128), (8, 128)];
    let n_kv = 2;
    for (i, &(ratio, d)) in cases.iter().enumerate() {
        let n_q = n_kv * ratio;
        let s = 100 * i as u64;
        // A batch of three sequences, each its own cache and length (1, 17,
        // 300), with unwritten room after them; then one cache of two rows of one length.
        let lens = [(1, 1, 256), (1, 17, 256), (1, 300, 512), (2, 5, 5)];
        let b: i32 = lens.iter().map(|l| l.0).sum();
        let bufs: Vec<(Array, Array)> = lens
            .iter()
            .enumerate()
            .map(|(j, &(rows, len, cap))| (buffer(rows, n_kv, len, cap, d, s + 2 * j as u64), buffer(rows, n_kv, len, cap, d, s + 2 * j as u64 + 1)))
            .collect();
        let kv: Vec<CachedKv> = bufs.iter().zip(&lens).map(|((k, v), l)| CachedKv { keys: k, values: v, len: l.1 }).collect();
        let q = normal(&[b, n_q, 1, d], s + 99);
        let scale = (d as f32).powf(-0.5);
        let Some(got) = decode_attention(&q, &kv, scale).unwrap() else {
            assert!(!has_kernel(), "case {i}: the kernel declined");
            continue;
        };
        assert_eq!(got.shape(), vec![b, 1, n_q * d], "case {i}");
        let (got, want) = (got.to_vec::<f32>().unwrap(), reference(&q, &kv, scale, false));
        // Outputs are weighted means of order-one values; the sums' order is
        // not OpenBLAS's, so the last bits differ.
        let worst = want.iter().zip(&got).map(|(a, g)| (a - g).abs()).fold(0f32, f32::max);
        assert!(worst <= 1e-5, "case {i} (ratio {ratio}, d {d}): off by {worst}");
        assert!(got.iter().all(|g| g.is_finite()), "case {i}");
    }
}

#[test]
fn several_queries_attend_causally_as_mlx() {
    // (query heads per key head, head dimension, queries, positions held before them).
    let cases = [(1, 64, 2, 0), (3, 64, 17, 0), (3, 64, 40, 300), (2, 128, 33, 5), (8, 128, 16, 1)];
    let n_kv = 2;
    for (i, &(ratio, d, t, before)) in cases.iter().enumerate() {
        let n_q = n_kv * ratio;
        let s = 1000 + 100 * i as u64;
        let len = before + t;
        // One sequence, and a second cache of two rows beside it.
        let (k0, v0) = (buffer(1, n_kv, len, len + 64, d, s), buffer(1, n_kv, len, len + 64, d, s + 1));
        let (k1, v1) = (buffer(2, n_kv, t + 3, t + 3, d, s + 2), buffer(2, n_kv, t + 3, t + 3, d, s + 3));
        let kv = [CachedKv { keys: &k0, values: &v0, len }, CachedKv { keys: &k1, values: &v1, len: t + 3 }];
        let q = normal(&[3, n_q, t, d], s + 4);
        let scale = (d as f32).powf(-0.5);
        let Some(got) = decode_attention(&q, &kv, scale).unwrap() else {
            assert!(!has_kernel(), "case {i}: the kernel declined");
            continue;
        };
        assert_eq!(got.shape(), vec![3, t, n_q * d], "case {i}");
        let (got, want) = (got.to_vec::<f32>().unwrap(), reference(&q, &kv, scale, true));
        let worst = want.iter().zip(&got).map(|(a, g)| (a - g).abs()).fold(0f32, f32::max);
        assert!(worst <= 1e-5, "case {i} (ratio {ratio}, d {d}, {t} queries after {before}): off by {worst}");
        assert!(got.iter().all(|g| g.is_finite()), "case {i}");
        // A position's result does not depend on the positions that came with it: the
        // last three alone (each seeing the same keys) give their bits in the whole chunk.
        if t >= 3 {
            let tail =
                decode_attention(&q.slice_axis(2, t - 3, t).unwrap(), &kv, scale).unwrap().expect("the kernel applies").to_vec::<f32>().unwrap();
            let row = (n_q * d) as usize;
            for b in 0..3 {
                let whole = &got[(b * t as usize + t as usize - 3) * row..][..3 * row];
                assert!(whole.iter().zip(&tail[b * 3 * row..][..3 * row]).all(|(a, b)| a.to_bits() == b.to_bits()), "case {i}, row {b}");
            }
        }
    }
}

/// Caches of 16-bit values (a bfloat16 or float16 model's) are read as they
/// are, widened exactly per head: the bits of the kernel on the same caches
/// in float32, the result in the queries' dtype. Decode and a prompt's
/// positions, two caches, unwritten (NaN) room after the held positions.
#[test]
fn sixteen_bit_caches_give_the_float32_bits() {
    for dtype in [Dtype::Bfloat16, Dtype::Float16] {
        let cast = |a: &Array| a.astype(dtype).unwrap();
        let (k0, v0) = (cast(&buffer(1, 2, 37, 64, 128, 21)), cast(&buffer(1, 2, 37, 64, 128, 22)));
        let (k1, v1) = (cast(&buffer(2, 2, 300, 301, 128, 23)), cast(&buffer(2, 2, 300, 301, 128, 24)));
        let wide = [&k0, &v0, &k1, &v1].map(|a| a.astype(Dtype::Float32).unwrap());
        let kv16 = [CachedKv { keys: &k0, values: &v0, len: 37 }, CachedKv { keys: &k1, values: &v1, len: 300 }];
        let kv32 = [CachedKv { keys: &wide[0], values: &wide[1], len: 37 }, CachedKv { keys: &wide[2], values: &wide[3], len: 300 }];
        for t in [1, 5] {
            let q = cast(&normal(&[3, 4, t, 128], 25 + t as u64));
            let Some(got) = decode_attention(&q, &kv16, 0.088).unwrap() else {
                assert!(!has_kernel(), "{dtype:?}: the kernel declined");
                continue;
            };
            assert_eq!((got.dtype(), got.shape()), (dtype, vec![3, t, 4 * 128]), "{dtype:?}, {t} positions");
            let want = decode_attention(&q.astype(Dtype::Float32).unwrap(), &kv32, 0.088).unwrap().expect("the kernel applies");
            let bits = |a: &Array| a.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want.astype(dtype).unwrap()), "{dtype:?}, {t} positions");
            assert!(got.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap().iter().all(|v| v.is_finite()), "{dtype:?}");
        }
    }
}

/// A 16-bit cache that is a strided view (not one row-contiguous block) is
/// gathered by the node, two bytes a value, into the bits of the same cache
/// held contiguously.
#[test]
fn a_strided_sixteen_bit_cache_gives_the_contiguous_bits() {
    let to16 = |a: &Array| a.astype(Dtype::Float16).unwrap();
    // [1, 40, 2, 64] transposed to [1, 2, 40, 64]: each head's positions are strided.
    let (k, v) =
        (to16(&normal(&[1, 40, 2, 64], 31)).transpose(&[0, 2, 1, 3]).unwrap(), to16(&normal(&[1, 40, 2, 64], 32)).transpose(&[0, 2, 1, 3]).unwrap());
    let (kc, vc) = (k.contiguous().unwrap(), v.contiguous().unwrap());
    assert_eq!(kc.dtype(), Dtype::Float16);
    let q = normal(&[1, 4, 1, 64], 33);
    let Some(got) = decode_attention(&q, &[CachedKv { keys: &k, values: &v, len: 40 }], 0.125).unwrap() else {
        assert!(!has_kernel(), "the kernel declined");
        return;
    };
    let want = decode_attention(&q, &[CachedKv { keys: &kc, values: &vc, len: 40 }], 0.125).unwrap().expect("the kernel applies");
    let bits = |a: &Array| a.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&want));
}

/// `cpu_kernel_f32_bits16` hands 16-bit inputs over as words, so an odd
/// number of values is refused with an error, not read past its end.
#[test]
fn an_odd_sixteen_bit_input_is_an_error() {
    fn copy_words(_: &[f32], inputs: &[&[f32]], out: &mut [f32]) {
        out.copy_from_slice(&inputs[0][..out.len()]);
    }
    let odd = Array::full(&[3], 1.0, Dtype::Float16).unwrap();
    let err = mlx::cpu::kernel::cpu_kernel_f32_bits16("CopyWords", copy_words, &[], &[&odd], &[1]).and_then(|o| o.eval().map(|_| o));
    let msg = err.expect_err("an odd 16-bit input must fail").to_string();
    assert!(msg.contains("even size"), "{msg}");
    // An even one reaches the kernel as its bits: two float16 ones (0x3c00) in one word.
    let even = Array::full(&[2], 1.0, Dtype::Float16).unwrap();
    let o = mlx::cpu::kernel::cpu_kernel_f32_bits16("CopyWords", copy_words, &[], &[&even], &[1]).unwrap();
    assert_eq!(o.to_vec::<f32>().unwrap()[0].to_bits(), 0x3c00_3c00);
}

#[test]
fn decode_attention_declines_what_it_does_not_fit() {
    let (k, v) = (buffer(1, 2, 4, 8, 64, 1), buffer(1, 2, 4, 8, 64, 2));
    let kv = |len| [CachedKv { keys: &k, values: &v, len }];
    let q = normal(&[1, 4, 1, 64], 3);
    assert_eq!(decode_attention(&q, &kv(4), 0.125).unwrap().is_some(), has_kernel());
    // Two query positions (a prompt's) in a cache of four: taken.
    assert_eq!(decode_attention(&normal(&[1, 4, 2, 64], 4), &kv(4), 0.125).unwrap().is_some(), has_kernel());
    // Query heads not a multiple of key heads.
    assert!(decode_attention(&normal(&[1, 3, 1, 64], 5), &kv(4), 0.125).unwrap().is_none());
    // No position, or more than the buffer holds.
    assert!(decode_attention(&q, &kv(0), 0.125).unwrap().is_none());
    assert!(decode_attention(&q, &kv(9), 0.125).unwrap().is_none());
    // Batch rows that the caches do not add up to.
    assert!(decode_attention(&normal(&[2, 4, 1, 64], 6), &kv(4), 0.125).unwrap().is_none());
    // Queries of another float dtype are taken (cast for the kernel; the result in theirs);
    // keys and values of two dtypes, or not a float, are not.
    let half = q.astype(Dtype::Bfloat16).unwrap();
    let got = decode_attention(&half, &kv(4), 0.125).unwrap();
    assert_eq!(got.map(|o| o.dtype()), has_kernel().then_some(Dtype::Bfloat16));
    let v16 = v.astype(Dtype::Bfloat16).unwrap();
    assert!(decode_attention(&q, &[CachedKv { keys: &k, values: &v16, len: 4 }], 0.125).unwrap().is_none());
    let (ki, vi) = (k.astype(Dtype::Int32).unwrap(), v.astype(Dtype::Int32).unwrap());
    assert!(decode_attention(&q, &[CachedKv { keys: &ki, values: &vi, len: 4 }], 0.125).unwrap().is_none());
    // Head dimension not a multiple of 8.
    let (k12, v12) = (buffer(1, 2, 4, 4, 12, 7), buffer(1, 2, 4, 4, 12, 8));
    let q12 = normal(&[1, 2, 1, 12], 9);
    assert!(decode_attention(&q12, &[CachedKv { keys: &k12, values: &v12, len: 4 }], 0.5).unwrap().is_none());
    // No caches.
    assert!(decode_attention(&q, &[], 0.125).unwrap().is_none());
    // More queries than the cache holds positions.
    assert!(decode_attention(&normal(&[1, 4, 5, 64], 7), &kv(4), 0.125).unwrap().is_none());
}

/// `MLX_NODE_DECODE_ATTENTION_KERNEL=0`: the kernel declines (the caller
/// then runs MLX's ops), in a process of its own as the switch is read once.
#[test]
fn the_switch_turns_it_off() {
    let text = crate::run_child(module_path!(), "switched_off_child", &[("MLX_NODE_DECODE_ATTENTION_KERNEL", "0")]);
    assert!(text.contains("DECLINED true"), "{text}");
}

#[test]
#[ignore = "run as a child of the_switch_turns_it_off"]
fn switched_off_child() {
    let (k, v) = (buffer(1, 2, 4, 8, 64, 1), buffer(1, 2, 4, 8, 64, 2));
    let q = normal(&[1, 4, 1, 64], 3);
    let got = decode_attention(&q, &[CachedKv { keys: &k, values: &v, len: 4 }], 0.125).unwrap();
    println!("DECLINED {}", got.is_none() && !mlx::cpu::kernel::Kernel::DecodeAttention.enabled());
}

/// One batch (two caches, grouped heads) through the kernel, one position and
/// five: the outputs' bits.
fn bits_of_one_batch() -> Vec<u32> {
    let (k0, v0) = (buffer(1, 2, 37, 64, 64, 11), buffer(1, 2, 37, 64, 64, 12));
    let (k1, v1) = (buffer(1, 2, 300, 300, 64, 13), buffer(1, 2, 300, 300, 64, 14));
    let q = normal(&[2, 6, 1, 64], 15);
    let kv = [CachedKv { keys: &k0, values: &v0, len: 37 }, CachedKv { keys: &k1, values: &v1, len: 300 }];
    let out = decode_attention(&q, &kv, 0.125).unwrap().expect("the kernel applies");
    // And a prompt's five positions, causally.
    let prompt = decode_attention(&normal(&[2, 6, 5, 64], 16), &kv, 0.125).unwrap().expect("the kernel applies");
    // And a float16 cache (widened by F16C where the CPU has it).
    let half = [&k0, &v0].map(|a| a.astype(Dtype::Float16).unwrap());
    let kv16 = [CachedKv { keys: &half[0], values: &half[1], len: 37 }];
    let q16 = normal(&[1, 6, 1, 64], 17).astype(Dtype::Float16).unwrap();
    let out16 = decode_attention(&q16, &kv16, 0.125).unwrap().expect("the kernel applies").astype(Dtype::Float32).unwrap();
    // And a head of 128 (the AVX2 weighted sum's two passes of 64), decode and prompt.
    let (k2, v2) = (buffer(1, 2, 90, 96, 128, 18), buffer(1, 2, 90, 96, 128, 19));
    let kv2 = [CachedKv { keys: &k2, values: &v2, len: 90 }];
    let wide = [1, 3].map(|t| decode_attention(&normal(&[1, 4, t, 128], 20 + t as u64), &kv2, 0.088).unwrap().expect("the kernel applies"));
    [out, prompt, out16, wide[0].clone(), wide[1].clone()].iter().flat_map(|a| a.to_vec::<f32>().unwrap()).map(|v| v.to_bits()).collect()
}

/// The portable copy (a CPU without AVX2 and FMA: `MLX_NODE_CPU_FEATURES=baseline`)
/// and the AVX2 copies (`avx2`: on a CPU with AVX-512, the paths it takes there
/// for prompts) give this process's bits, each in a process of its own.
#[test]
fn the_avx2_and_portable_paths_give_the_same_bits() {
    for cap in ["baseline", "avx2"] {
        let env = [("MLX_NODE_CPU_FEATURES", cap), ("MLX_NODE_DECODE_ATTENTION_KERNEL", ""), ("MLX_NODE_CPU_KERNELS", "")];
        let text = crate::run_child(module_path!(), "capped_child", &env);
        let line = text.lines().find_map(|l| l.find("BITS ").map(|i| &l[i + 5..])).unwrap_or_else(|| panic!("{cap}: no bits: {text}"));
        assert_eq!(line, format!("{:?}", bits_of_one_batch()), "{cap}");
    }
}

#[test]
#[ignore = "run as a child of the_avx2_and_portable_paths_give_the_same_bits"]
fn capped_child() {
    let baseline = std::env::var("MLX_NODE_CPU_FEATURES").as_deref() == Ok("baseline");
    assert!(!mlx::cpu::math::beyond_avx2(), "the child runs no AVX-512 copy");
    assert!(!baseline || !mlx::cpu::math::has_avx2_fma(), "the baseline child runs the portable copy");
    println!("BITS {:?}", bits_of_one_batch());
}
