//! In-place CPU kernels (`cpu_kernel_f32_in_place`): they reuse their input's
//! buffer when nothing else holds it, as MLX's element-wise ops do, and leave
//! an input that is still used alone. One test in its own process (so nothing
//! runs beside it), since it reads MLX's process-wide memory counters.
use mlx::cpu::math::{gelu, softmax_last_kernel};
use mlx::{memory, random, Array, Dtype};

/// Peak bytes above what was active before `f`'s graph ran, for its result.
fn peak_of(f: impl Fn() -> Array) -> (usize, Array) {
    memory::clear_cache().unwrap();
    let before = memory::stats().unwrap().active;
    memory::reset_peak().unwrap();
    let y = f();
    y.eval().unwrap();
    (memory::stats().unwrap().peak - before, y)
}

#[test]
fn in_place_kernels_reuse_a_free_input_and_keep_a_held_one() {
    let key = random::key(3).unwrap();
    let x = random::normal(&[64, 1024], Dtype::Float32, 0.0, 3.0, Some(&key)).unwrap();
    x.eval().unwrap();
    let bytes = 64 * 1024 * 4;
    let original: Vec<f32> = x.to_vec().unwrap();
    type Kernel = fn(&Array) -> mlx::Result<Array>;
    let kernels: [(&str, Kernel, Kernel); 2] = [
        ("softmax", softmax_last_kernel, |a: &Array| a.softmax(&[-1], false)),
        ("gelu", gelu, |a: &Array| {
            let cdf = a.divide_scalar(std::f64::consts::SQRT_2)?.erf()?.add_scalar(1.0)?;
            a.multiply(&cdf)?.divide_scalar(2.0)
        }),
    ];
    for (name, ours, theirs) in kernels {
        // A temporary input (x * 2, used by nothing else): one buffer for it and the result.
        let (peak, y) = peak_of(|| ours(&x.multiply_scalar(2.0).unwrap()).unwrap());
        // (plus the scalar 2)
        assert!((bytes..bytes + 64).contains(&peak), "{name}: peak {peak} B; the result should take over its temporary input's buffer ({bytes} B)");
        let want = theirs(&x.multiply_scalar(2.0).unwrap()).unwrap();
        let same = |a: &Array, b: &Array| -> bool {
            let (a, b): (Vec<f32>, Vec<f32>) = (a.to_vec().unwrap(), b.to_vec().unwrap());
            a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits())
        };
        assert!(same(&y, &want), "{name}: in place gives other values than MLX's ops");

        // An input still held (x): a new buffer, and x keeps its values.
        let (peak, y) = peak_of(|| ours(&x).unwrap());
        assert!((bytes..bytes + 64).contains(&peak), "{name}: peak {peak} B; a held input needs one new buffer ({bytes} B)");
        assert_eq!(x.to_vec::<f32>().unwrap(), original, "{name} wrote into an input that is still in use");
        assert!(same(&y, &theirs(&x).unwrap()), "{name}: copied input gives other values than MLX's ops");
    }
}
