//! A causal prompt's attention weights with the masked scores left out
//! (`cpu::causal_weights`) against the whole product and MLX's mask and
//! softmax, bit for bit, on shapes the calibration does not probe.
use mlx::cpu::causal_weights::{active, causal_weights};
use mlx::{info, random, Array, Dtype};

fn normal(shape: &[i32], seed: u64) -> Array {
    random::normal(shape, Dtype::Float32, 0.0, 1.0, Some(&random::key(seed).unwrap())).unwrap()
}

fn bits(a: &Array) -> Vec<u32> {
    a.to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()).collect()
}

/// MLX's ops: the whole product, the mask as a `where` to the lowest float, its softmax.
fn reference(q: &Array, k: &Array) -> Array {
    let k = if q.ndim() == 5 { k.expand_dims(&[2]).unwrap() } else { k.clone() };
    let scores = q.matmul(&k.swapaxes(-1, -2).unwrap()).unwrap();
    let (l, s) = (q.dim(-2), k.dim(-2));
    let qi = Array::arange((s - l) as f64, s as f64, 1.0, Dtype::Int32).unwrap().expand_dims(&[1]).unwrap();
    let ki = Array::arange(0.0, s as f64, 1.0, Dtype::Int32).unwrap().expand_dims(&[0]).unwrap();
    let masked = Array::where_(&qi.greater_equal(&ki).unwrap(), &scores, &scores.scalar_like(f32::MIN as f64).unwrap()).unwrap();
    masked.softmax(&[-1], true).unwrap()
}

/// On OpenBLAS's AVX-512 core types the calibration must pass (each score is one
/// run over the head dimension there); on Haswell and Zen it must fail, as their
/// kernels sum by tile (measured with Debian's OpenBLAS 0.3.21).
#[test]
fn use_follows_the_core_type() {
    let core = info::openblas_core().unwrap();
    let on = mlx::cpu::kernel::Kernel::Attention.enabled();
    eprintln!("OpenBLAS core {core:?}: causal weights {}", active());
    if !on {
        assert!(!active(), "switched off");
    } else if matches!(core.as_str(), "SkylakeX" | "Cooperlake" | "SapphireRapids") {
        assert!(active(), "OpenBLAS core {core}: the blocks give the whole product's bits");
    } else if matches!(core.as_str(), "Haswell" | "Zen") {
        assert!(!active(), "OpenBLAS core {core}: its kernels sum by tile");
    }
}

#[test]
fn equals_mlx_bit_for_bit() {
    // (q shape, keys): grouped and not, a whole prompt, a chunk after cached keys,
    // a last block of 64 to 127 rows, two batch rows, head dimensions 64 and 128,
    // queries past OpenBLAS's threading threshold.
    let cases: [(&[i32], i32); 6] = [
        (&[1, 2, 3, 128, 64], 128),
        (&[1, 4, 4, 257, 128], 257),
        (&[2, 2, 2, 191, 64], 500),
        (&[1, 8, 300, 128], 300),
        (&[1, 1, 2, 1000, 128], 1500),
        (&[1, 2, 2, 130, 64], 130),
    ];
    for (i, &(shape, s)) in cases.iter().enumerate() {
        let q = normal(shape, 10 + i as u64).multiply_scalar(0.1).unwrap();
        let k = normal(&[shape[0], shape[1], s, shape[shape.len() - 1]], 20 + i as u64);
        let Some(got) = causal_weights(&q, &k).unwrap() else {
            assert!(!active(), "case {i}: declined while active");
            continue;
        };
        let want = reference(&q, &k);
        assert_eq!(got.shape(), want.shape(), "case {i}");
        let (g, w) = (bits(&got), bits(&want));
        assert!(g == w, "case {i}: first difference at {:?}", g.iter().zip(&w).position(|(a, b)| a != b));
    }
}

#[test]
fn declines_what_it_does_not_take() {
    let k = normal(&[1, 2, 200, 64], 1);
    // Fewer than two blocks of queries.
    assert!(causal_weights(&normal(&[1, 2, 127, 64], 2), &k).unwrap().is_none());
    // More queries than keys.
    assert!(causal_weights(&normal(&[1, 2, 201, 64], 3), &k).unwrap().is_none());
    // Another head dimension, other key heads, not float32.
    assert!(causal_weights(&normal(&[1, 2, 150, 32], 4), &k).unwrap().is_none());
    assert!(causal_weights(&normal(&[1, 3, 150, 64], 5), &k).unwrap().is_none());
    let half = normal(&[1, 2, 150, 64], 6).astype(Dtype::Float16).unwrap();
    assert!(causal_weights(&half, &k.astype(Dtype::Float16).unwrap()).unwrap().is_none());
}

#[test]
fn the_switch_turns_it_off() {
    let text = crate::run_child(module_path!(), "switched_off_child", &[("MLX_NODE_ATTENTION_KERNEL", "0")]);
    assert!(text.contains("DECLINED true"), "{text}");
}

#[test]
#[ignore = "run as a child of the_switch_turns_it_off"]
fn switched_off_child() {
    let got = causal_weights(&normal(&[1, 2, 150, 64], 1), &normal(&[1, 2, 150, 64], 2)).unwrap();
    println!("DECLINED {}", got.is_none() && !active());
}
