//! The few-rows float32 matmul kernel (`gemv_cpu`: OpenBLAS's bits without
//! its packing) against MLX's matmul on the same inputs, at Qwen3-0.6B's and
//! T3's decode shapes. Each kernel output is checked bit for bit first.
use mlx::cpu::gemv as gemv_cpu;
use mlx::{random, Array, Dtype};

use crate::qmm::time_ms;

pub fn main() {
    println!("\n### Float32 matmul, one to eight rows (decode, and a batch decoding together)\n");
    if !gemv_cpu::active() {
        println!("Not measured: the kernel is not in use with this BLAS ({}).", mlx::info::blas_name().unwrap());
        return;
    }
    println!("| shape (rows x in -> out) | MLX's matmul (sgemm), ms (sd) | mlx-node kernel, ms (sd) | speed-up | same bits |");
    println!("|---|--:|--:|--:|:-:|");
    let shapes = [
        (1, 1024, 3072, "0.6B decode, MLP up"),
        (1, 3072, 1024, "0.6B decode, MLP down"),
        (1, 1024, 151_936, "0.6B decode, LM head"),
        (2, 1024, 4096, "T3 guidance pair, MLP up"),
        (1, 512, 151_936, "100M decode, LM head"),
        (4, 512, 151_936, "100M batch of 4, LM head"),
        (8, 512, 151_936, "100M batch of 8, LM head"),
        (8, 1024, 3072, "0.6B batch of 8, MLP up"),
    ];
    for &(m, k, n, what) in &shapes {
        let key = |s: u64| random::key(s).unwrap();
        let x = random::normal(&[m, k], Dtype::Float32, 0.0, 1.0, Some(&key(1))).unwrap();
        let w = random::normal(&[n, k], Dtype::Float32, 0.0, 0.05, Some(&key(2))).unwrap();
        mlx::eval(&[&x, &w]).unwrap();
        let ours = || gemv_cpu::matmul_t(&x, &w, None).unwrap().expect("the kernel takes this shape");
        let theirs = || x.matmul(&w.t().unwrap()).unwrap();
        let bits = |a: Array| a.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let same = bits(ours()) == bits(theirs());
        assert!(same, "{what}: the kernel's output differs from MLX's matmul");
        let (tm, sm) = time_ms(20, theirs);
        let (to, so) = time_ms(20, ours);
        println!("| {m} x {k} -> {n} ({what}) | {tm:.2} ({sm:.2}) | {to:.2} ({so:.2}) | {:.1}x | {} |", tm / to, if same { "yes" } else { "no" });
    }
    println!(
        "\nEach row repeats one matrix, so the 12-16 MB ones stay in the CPU's caches, where OpenBLAS's \
         packing copy is cheap. In a model every weight comes from memory once per step, like the LM head \
         here: see the decode rows of benchmark/RESULTS.md."
    );
}
