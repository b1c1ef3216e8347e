//! `sampling-bench --attention`: one layer's attention in a decode step and in
//! a prompt's chunk (causal), as
//! the model runs it in fast precision (`cpu::decode_attention`, one node) and
//! in exact precision (MLX's ops: the cache's slices, `fast.rs`'s CPU
//! attention, the heads back to rows), each built and evaluated alone; the
//! least and median time of 400 calls (the least is what the work costs on
//! a machine that other work shares).
use std::time::Instant;

use mlx::cpu::decode_attention::{decode_attention, CachedKv};
use mlx::fast::{scaled_dot_product_attention, AttentionMask};
use mlx::{random, Array, Dtype};

fn normal(shape: &[i32], seed: u64) -> Array {
    let a = random::normal(shape, Dtype::Float32, 0.0, 1.0, Some(&random::key(seed).unwrap())).unwrap();
    a.eval().unwrap();
    a
}

fn time(f: &dyn Fn() -> Array) -> (f64, f64) {
    time_n(400, f)
}

fn time_n(n: usize, f: &dyn Fn() -> Array) -> (f64, f64) {
    let mut all: Vec<f64> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f().eval().unwrap();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    all.sort_by(|a, b| a.total_cmp(b));
    (all[0], all[all.len() / 2])
}

/// `only`: `decode` or `prompt` runs that table alone.
pub fn main(only: Option<&str>) {
    if only != Some("prompt") {
        decode();
    }
    if only != Some("decode") {
        prompt();
    }
}

fn decode() {
    println!("\n### One layer's decode attention (µs per call: least / median of 400)\n");
    println!("| shape | positions | one kernel (fast) | MLX's ops (exact) |");
    println!("|---|--:|--:|--:|");
    // SmolLM2-135M (9 query heads, 3 key heads of 64) and Qwen3-0.6B (16 and 8 of 128).
    for (name, n_q, n_kv, d) in [("SmolLM2-135M", 9, 3, 64), ("Qwen3-0.6B", 16, 8, 128)] {
        for (len, cap) in [(220, 256), (2000, 2048)] {
            let (k, v) = (normal(&[1, n_kv, cap, d], 1), normal(&[1, n_kv, cap, d], 2));
            let q = normal(&[1, n_q, 1, d], 3);
            let scale = (d as f32).powf(-0.5);
            let fused = time(&|| decode_attention(&q, &[CachedKv { keys: &k, values: &v, len }], scale).unwrap().expect("the kernel applies"));
            let ops = time(&|| {
                let (ks, vs) = (k.slice_axis(2, 0, len).unwrap(), v.slice_axis(2, 0, len).unwrap());
                let o = scaled_dot_product_attention(&q, &ks, &vs, scale, AttentionMask::None).unwrap();
                o.transpose(&[0, 2, 1, 3]).unwrap().reshape(&[1, 1, -1]).unwrap()
            });
            println!("| {name} | {len} | {:.0} / {:.0} | {:.0} / {:.0} |", fused.0, fused.1, ops.0, ops.1);
        }
    }
}

fn prompt() {
    println!("\n### One layer's prompt attention, causal (µs per call: least / median of 20)\n");
    println!("| shape | queries after cached positions | one kernel (fast) | MLX's ops (exact) |");
    println!("|---|--:|--:|--:|");
    for (name, n_q, n_kv, d) in [("SmolLM2-135M", 9, 3, 64), ("Qwen3-0.6B", 16, 8, 128)] {
        for (t, before) in [(551, 0), (64, 600)] {
            let len = t + before;
            let (k, v) = (normal(&[1, n_kv, len + 64, d], 1), normal(&[1, n_kv, len + 64, d], 2));
            let q = normal(&[1, n_q, t, d], 3);
            let scale = (d as f32).powf(-0.5);
            let fused = time_n(20, &|| decode_attention(&q, &[CachedKv { keys: &k, values: &v, len }], scale).unwrap().expect("the kernel applies"));
            let ops = time_n(20, &|| {
                let (ks, vs) = (k.slice_axis(2, 0, len).unwrap(), v.slice_axis(2, 0, len).unwrap());
                let o = scaled_dot_product_attention(&q, &ks, &vs, scale, AttentionMask::Causal).unwrap();
                o.transpose(&[0, 2, 1, 3]).unwrap().reshape(&[1, t, -1]).unwrap()
            });
            println!("| {name} | {t} after {before} | {:.0} / {:.0} | {:.0} / {:.0} |", fused.0, fused.1, ops.0, ops.1);
        }
    }
}
