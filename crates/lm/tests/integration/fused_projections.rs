//! Quantized layers held as one at load (`Weights::linear_fused`: q/k/v, gate/up)
//! must give the separate layers' outputs bit for bit, in exact and fast
//! precision, for a decode row and a prompt's rows: the model's tokens stay
//! MLX-LM's (with the weights repacked for the precision's kernel). Layers
//! that cannot be fused load as they are.
use std::collections::HashMap;
use std::path::Path;

use lm::weights::Weights;
use mlx::nn::Linear;
use mlx::quant::{quantize, Mode, Precision};
use mlx::{random, Array, Dtype};

const IN: i32 = 128;

fn normal(shape: &[i32], seed: u64) -> Array {
    random::normal(shape, Dtype::Float32, 0.0, 0.5, Some(&random::key(seed).unwrap())).unwrap()
}

/// Checkpoint tensors of the layers `(name, outputs, bits)`, affine in groups of `group_size`, each
/// with a `.bias` when `bias`.
fn checkpoint(layers: &[(&str, i32, i32)], group_size: i32, bias: bool) -> HashMap<String, Array> {
    let mut t = HashMap::new();
    for (i, &(name, out, bits)) in layers.iter().enumerate() {
        let (q, s, b) = quantize(&normal(&[out, IN], 10 + i as u64), group_size, bits, Mode::Affine).unwrap();
        t.insert(format!("{name}.weight"), q);
        t.insert(format!("{name}.scales"), s);
        t.insert(format!("{name}.biases"), b.unwrap());
        if bias {
            t.insert(format!("{name}.bias"), normal(&[out], 20 + i as u64));
        }
    }
    t
}

fn weights(t: HashMap<String, Array>, precision: Precision) -> Weights {
    Weights::from_tensors(t, Path::new("model.safetensors"), None, None).with_precision(precision)
}

fn bits_of(a: &Array) -> Vec<u32> {
    a.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn fused_layers_give_the_separate_layers_bits() {
    let names = ["q_proj", "k_proj", "v_proj"];
    let outs = [64, 32, 32];
    let mut fast_differs = false;
    for bits in [4, 8] {
        for group_size in [32, 64] {
            // Qwen2's q/k/v have a bias; most families' do not.
            let bias = group_size == 32;
            let layers: Vec<(&str, i32, i32)> = names.iter().zip(outs).map(|(&n, o)| (n, o, bits)).collect();
            let t = checkpoint(&layers, group_size, bias);
            let mut exact_outputs = Vec::new();
            for precision in [Precision::Exact, Precision::Fast] {
                let mut separate = weights(t.clone(), precision);
                let parts: Vec<Linear> = names.iter().zip(outs).map(|(n, o)| separate.linear(n, IN, o, bias).unwrap()).collect();
                separate.finish().unwrap();
                let mut w = weights(t.clone(), precision);
                let prefixes = names.map(String::from);
                let fused = w.linear_fused(&prefixes, IN, &outs, bias).unwrap().expect("q/k/v quantized alike are held as one");
                w.finish().unwrap();
                // The layers hold their weights repacked for their precision's kernel (the fused
                // one after concatenation).
                let repacked = |l: &Linear| matches!(l, Linear::Repacked { .. }) && l.precision() == precision;
                assert!(std::iter::once(&fused).chain(&parts).all(repacked), "{precision:?}: not repacked");
                for rows in [1, 20] {
                    let x = normal(&[1, rows, IN], 30 + rows as u64);
                    let y = fused.forward(&x).unwrap();
                    assert_eq!(y.shape(), [1, rows, 128]);
                    let split = y.split_at(&[64, 96], -1).unwrap();
                    for ((part, got), name) in parts.iter().zip(&split).zip(names) {
                        let want = part.forward(&x).unwrap();
                        let case = format!("{name}, {bits} bits, groups of {group_size}, {rows} rows, {precision:?}");
                        assert_eq!(bits_of(got), bits_of(&want), "{case}");
                        match precision {
                            Precision::Exact => exact_outputs.push(bits_of(&want)),
                            Precision::Fast => fast_differs |= exact_outputs.remove(0) != bits_of(&want),
                        }
                    }
                }
            }
        }
    }
    // The fast cases ran the int8 kernel, not the exact one again.
    assert!(fast_differs, "fast precision gave exact precision's bits everywhere");
}

/// Layers of different widths or group sizes, or in float, are not fused: nothing is
/// taken, and they load one by one.
#[test]
fn layers_unlike_each_other_stay_separate() {
    let prefixes = ["gate_proj", "up_proj"].map(String::from);
    let mixed = checkpoint(&[("gate_proj", 32, 8), ("up_proj", 32, 4)], 64, false);
    let mut groups = checkpoint(&[("gate_proj", 32, 4)], 64, false);
    groups.extend(checkpoint(&[("up_proj", 32, 4)], 32, false));
    let mut float = HashMap::new();
    float.insert("gate_proj.weight".to_string(), normal(&[32, IN], 1));
    float.insert("up_proj.weight".to_string(), normal(&[32, IN], 2));
    for t in [mixed, groups, float] {
        let mut w = weights(t, Precision::Exact);
        assert!(w.linear_fused(&prefixes, IN, &[32, 32], false).unwrap().is_none());
        for p in &prefixes {
            w.linear(p, IN, 32, false).unwrap();
        }
        w.finish().unwrap();
    }
}
