//! Each op checked against values worked out by hand, and bad input checked
//! to come back as an Err carrying MLX's message, with the process alive.
use mlx::{fast, io, memory, quant, random, signal, transforms, Array, Compiled, Dtype};

fn arr(v: &[f32], shape: &[i32]) -> Array {
    Array::from_slice(v, shape).unwrap()
}

fn close(a: &Array, want: &[f32]) {
    let got = a.to_vec::<f32>().unwrap();
    assert_eq!(got.len(), want.len(), "got {got:?}, want {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "got {got:?}, want {want:?}");
    }
}

#[test]
fn creation_and_readback() {
    let a = arr(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
    assert_eq!(a.shape(), vec![2, 3]);
    assert_eq!(a.dtype(), Dtype::Float32);
    assert_eq!(a.size(), 6);
    assert_eq!(a.to_vec::<i32>().unwrap(), vec![1, 2, 3, 4, 5, 6]);
    let i = Array::from_slice(&[7i32, -1], &[2]).unwrap();
    assert_eq!(i.to_vec::<i32>().unwrap(), vec![7, -1]);
    let u = Array::from_slice(&[3u32], &[1]).unwrap();
    assert_eq!(u.item::<u32>().unwrap(), 3);
    let b = Array::from_slice(&[true, false], &[2]).unwrap();
    assert_eq!(b.to_vec::<bool>().unwrap(), vec![true, false]);
    // f16 / bf16 through casts and raw bytes: 1.5 is exact in both.
    let h = arr(&[1.5, -2.0], &[2]).astype(Dtype::Float16).unwrap();
    assert_eq!(h.dtype(), Dtype::Float16);
    assert_eq!(h.to_bytes(Dtype::Float16).unwrap(), vec![0x00, 0x3e, 0x00, 0xc0]);
    let bf = Array::from_bytes(&[0xc0, 0x3f], &[1], Dtype::Bfloat16).unwrap();
    assert_eq!(bf.item::<f32>().unwrap(), 1.5);
    assert!(Array::from_slice(&[1f32, 2.], &[3]).is_err());
    close(&Array::arange(0., 4., 1., Dtype::Float32).unwrap(), &[0., 1., 2., 3.]);
    close(&Array::full(&[2], 2.5, Dtype::Float32).unwrap(), &[2.5, 2.5]);
}

#[test]
fn elementwise() {
    let a = arr(&[1., 4., 9.], &[3]);
    let b = arr(&[2., 2., 3.], &[3]);
    close(&a.add(&b).unwrap(), &[3., 6., 12.]);
    close(&a.subtract(&b).unwrap(), &[-1., 2., 6.]);
    close(&a.multiply(&b).unwrap(), &[2., 8., 27.]);
    close(&a.divide(&b).unwrap(), &[0.5, 2., 3.]);
    close(&a.sqrt().unwrap(), &[1., 2., 3.]);
    close(&a.rsqrt().unwrap(), &[1., 0.5, 1. / 3.]);
    close(&a.maximum(&b).unwrap(), &[2., 4., 9.]);
    close(&a.power(&b).unwrap(), &[1., 16., 729.]);
    close(&a.add_scalar(1.0).unwrap(), &[2., 5., 10.]);
    close(&arr(&[0.], &[1]).exp().unwrap(), &[1.]);
    close(&arr(&[0.], &[1]).sigmoid().unwrap(), &[0.5]);
    close(&arr(&[-2., 3.], &[2]).abs().unwrap(), &[2., 3.]);
    close(&arr(&[-1.5, 1.5], &[2]).floor().unwrap(), &[-2., 1.]);
    assert_eq!(a.greater(&b).unwrap().to_vec::<bool>().unwrap(), vec![false, true, true]);
    assert_eq!(a.equal_scalar(4.0).unwrap().to_vec::<bool>().unwrap(), vec![false, true, false]);
    let c = a.less_scalar(5.0).unwrap();
    close(&Array::where_(&c, &a, &b).unwrap(), &[1., 4., 3.]);
    // A scalar keeps the array's dtype, as MLX's Python scalars do.
    let h = a.astype(Dtype::Bfloat16).unwrap();
    assert_eq!(h.multiply_scalar(0.5).unwrap().dtype(), Dtype::Bfloat16);
    let lo = Array::scalar(2.0, Dtype::Float32).unwrap();
    close(&a.clip(Some(&lo), None).unwrap(), &[2., 4., 9.]);
}

#[test]
fn matmul_and_shape_errors() {
    let a = arr(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let b = arr(&[1., 0., 0., 1., 1., 1.], &[3, 2]);
    close(&a.matmul(&b).unwrap(), &[4., 5., 10., 11.]);
    let c = arr(&[1., 1., 1., 1.], &[2, 2]);
    close(&c.addmm(&a, &b, 1.0, 2.0).unwrap(), &[6., 7., 12., 13.]);
    // A bad shape is an Err with MLX's message; the process lives on.
    let x = Array::zeros(&[2, 3], Dtype::Float32).unwrap();
    let y = Array::zeros(&[4, 5], Dtype::Float32).unwrap();
    let err = x.matmul(&y).unwrap_err();
    assert!(err.message.contains("matmul") || err.message.contains("shape"), "{}", err.message);
    assert!(x.reshape(&[7]).is_err());
    assert!(x.add(&y).is_err());
    assert!(x.sum(&[5], false).is_err());
    assert!(x.transpose(&[0]).is_err());
    // Still usable afterwards.
    close(&a.matmul(&b).unwrap(), &[4., 5., 10., 11.]);
}

#[test]
fn reductions() {
    let a = arr(&[1., 5., 3., 2., 8., 0.], &[2, 3]);
    close(&a.sum(&[1], false).unwrap(), &[9., 10.]);
    close(&a.sum(&[], false).unwrap(), &[19.]);
    close(&a.max(&[0], false).unwrap(), &[2., 8., 3.]);
    close(&a.min(&[1], true).unwrap(), &[1., 0.]);
    close(&a.mean(&[1], false).unwrap(), &[3., 10. / 3.]);
    close(&a.var(&[1], false, 0).unwrap(), &[8. / 3., 104. / 9.]);
    close(&a.var(&[0], true, 1).unwrap(), &[0.5, 4.5, 4.5]);
    assert!(a.var(&[2], false, 0).is_err());
    assert_eq!(a.argmax(1, false).unwrap().to_vec::<u32>().unwrap(), vec![1, 1]);
    assert_eq!(a.argmin(1, false).unwrap().to_vec::<u32>().unwrap(), vec![0, 2]);
    let z = arr(&[0., 0.], &[2]);
    close(&z.logsumexp(&[0], false).unwrap(), &[2f32.ln()]);
    close(&z.softmax(&[0], true).unwrap(), &[0.5, 0.5]);
    close(&arr(&[1., 2., 3.], &[3]).cumsum(0, false, true).unwrap(), &[1., 3., 6.]);
    close(&arr(&[1., 2., 3.], &[3]).cumsum(0, true, false).unwrap(), &[5., 3., 0.]);
    close(&arr(&[1., 3., 2.], &[3]).cummax(0, false, true).unwrap(), &[1., 3., 3.]);
}

#[test]
fn shapes() {
    let a = arr(&[0., 1., 2., 3., 4., 5.], &[2, 3]);
    close(&a.transpose(&[1, 0]).unwrap(), &[0., 3., 1., 4., 2., 5.]);
    assert_eq!(a.reshape(&[3, -1]).unwrap().shape(), vec![3, 2]);
    assert_eq!(a.expand_dims(&[0]).unwrap().shape(), vec![1, 2, 3]);
    assert_eq!(a.expand_dims(&[0]).unwrap().squeeze(&[]).unwrap().shape(), vec![2, 3]);
    assert_eq!(arr(&[1.], &[1]).broadcast_to(&[2, 2]).unwrap().shape(), vec![2, 2]);
    close(&Array::concatenate(&[&a, &a], 0).unwrap().slice_axis(0, 1, 3).unwrap(), &[3., 4., 5., 0., 1., 2.]);
    assert_eq!(Array::stack(&[&a, &a], 1).unwrap().shape(), vec![2, 2, 3]);
    let parts = a.split_at(&[1], 1).unwrap();
    close(&parts[0], &[0., 3.]);
    close(&parts[1], &[1., 2., 4., 5.]);
    assert_eq!(a.split_equal(3, 1).unwrap().len(), 3);
    close(&a.slice(&[0, 0], &[2, 3], &[1, 2]).unwrap(), &[0., 2., 3., 5.]);
    let upd = arr(&[9., 9.], &[2, 1]);
    close(&a.slice_update(&upd, &[0, 1], &[2, 2], &[1, 1]).unwrap(), &[0., 9., 2., 3., 9., 5.]);
    close(&arr(&[1., 2.], &[2]).pad(&[0], &[1], &[2], 0.).unwrap(), &[0., 1., 2., 0., 0.]);
    close(&arr(&[1., 2.], &[2]).repeat(2, 0).unwrap(), &[1., 1., 2., 2.]);
    let ones = Array::ones(&[2, 2], Dtype::Float32).unwrap();
    close(&ones.tril(0).unwrap(), &[1., 0., 1., 1.]);
    close(&ones.triu(1).unwrap(), &[0., 1., 0., 0.]);
    close(&a.swapaxes(0, 1).unwrap(), &[0., 3., 1., 4., 2., 5.]);
}

#[test]
fn indexing() {
    let a = arr(&[10., 11., 12., 13., 14., 15.], &[2, 3]);
    let idx = Array::from_slice(&[2i32, 0], &[2]).unwrap();
    close(&a.take(&idx, Some(1)).unwrap(), &[12., 10., 15., 13.]);
    close(&a.take(&idx, None).unwrap(), &[12., 10.]);
    let along = Array::from_slice(&[1i32, 2], &[2, 1]).unwrap();
    close(&a.take_along_axis(&along, 1).unwrap(), &[11., 15.]);
    let vals = arr(&[0., 0.], &[2, 1]);
    close(&a.put_along_axis(&along, &vals, 1).unwrap(), &[10., 0., 12., 13., 14., 0.]);
    // scatter into a 1-d array: updates shaped indices.shape + [1].
    let base = Array::zeros(&[5], Dtype::Float32).unwrap();
    let si = Array::from_slice(&[1i32, 3], &[2]).unwrap();
    let su = arr(&[7., 8.], &[2, 1]);
    close(&base.scatter(&[&si], &su, &[0]).unwrap(), &[0., 7., 0., 8., 0.]);
    let si2 = Array::from_slice(&[1i32, 1], &[2]).unwrap();
    close(&base.scatter_add(&[&si2], &su, &[0]).unwrap(), &[0., 15., 0., 0., 0.]);
    assert!(a.take_along_axis(&along, 5).is_err());
}

#[test]
fn sorting() {
    let a = arr(&[3., 1., 2., 5.], &[4]);
    close(&a.sort(0).unwrap(), &[1., 2., 3., 5.]);
    assert_eq!(a.argsort(0).unwrap().to_vec::<u32>().unwrap(), vec![1, 2, 0, 3]);
    let mut top = a.topk(2, 0).unwrap().to_vec::<f32>().unwrap();
    top.sort_by(|x, y| x.partial_cmp(y).unwrap());
    assert_eq!(top, vec![3., 5.]);
    let p = a.argpartition(1, 0).unwrap().to_vec::<u32>().unwrap();
    let mut first_two = vec![p[0], p[1]];
    first_two.sort();
    assert_eq!(first_two, vec![1, 2]);
    let part = a.partition(2, 0).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(part[2], 3.);
}

#[test]
fn random_is_seeded_and_shaped() {
    random::seed(7).unwrap();
    let a = random::uniform(0., 1., &[4], Dtype::Float32, None).unwrap().to_vec::<f32>().unwrap();
    random::seed(7).unwrap();
    let b = random::uniform(0., 1., &[4], Dtype::Float32, None).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(a, b);
    assert!(a.iter().all(|&x| (0.0..1.0).contains(&x)));
    // KeySequence hands out the keys MLX's seeded global sequence would.
    let mut ks = random::KeySequence::new(3).unwrap();
    random::seed(3).unwrap();
    for _ in 0..3 {
        let k = ks.next().unwrap();
        let with_key = random::normal(&[3], Dtype::Float32, 0., 1., Some(&k)).unwrap().to_vec::<f32>().unwrap();
        let global = random::normal(&[3], Dtype::Float32, 0., 1., None).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(with_key, global);
    }
    let key = random::key(1).unwrap();
    assert_eq!(random::split(&key, 3).unwrap().shape(), vec![3, 2]);
    // A categorical over one overwhelming logit always picks it.
    let logits = arr(&[-1e9, 0., -1e9], &[1, 3]);
    assert_eq!(random::categorical(&logits, -1, None).unwrap().to_vec::<u32>().unwrap(), vec![1]);
    assert_eq!(random::gumbel(&[2, 2], Dtype::Float32, None).unwrap().shape(), vec![2, 2]);
    let p = arr(&[1., 0.], &[2]);
    assert_eq!(random::bernoulli(&p, None).unwrap().to_vec::<bool>().unwrap(), vec![true, false]);
}

#[test]
fn fast_kernels() {
    let x = arr(&[3., 4.], &[1, 2]);
    let w = arr(&[1., 2.], &[2]);
    // rms = sqrt((9 + 16) / 2)
    let r = (12.5f32).sqrt();
    close(&fast::rms_norm(&x, Some(&w), 0.0).unwrap(), &[3. / r, 8. / r]);
    close(&fast::layer_norm(&x, None, None, 0.0).unwrap(), &[-1., 1.]);
    // rope at offset 0 is the identity; at position 1 it rotates pairs by theta = 1 (base^0).
    let q = arr(&[1., 0.], &[1, 1, 1, 2]);
    close(&fast::rope(&q, 2, false, Some(10000.), 1.0, fast::RopeOffset::At(0), None).unwrap(), &[1., 0.]);
    close(&fast::rope(&q, 2, false, Some(10000.), 1.0, fast::RopeOffset::At(1), None).unwrap(), &[1f32.cos(), 1f32.sin()]);
    // Attention over two equal keys averages the values.
    let q = arr(&[1., 0.], &[1, 1, 1, 2]);
    let k = arr(&[1., 0., 1., 0.], &[1, 1, 2, 2]);
    let v = arr(&[1., 2., 3., 4.], &[1, 1, 2, 2]);
    close(&fast::scaled_dot_product_attention(&q, &k, &v, 1.0, fast::AttentionMask::None).unwrap(), &[2., 3.]);
    let q2 = arr(&[1., 0., 1., 0.], &[1, 1, 2, 2]);
    close(&fast::scaled_dot_product_attention(&q2, &k, &v, 1.0, fast::AttentionMask::Causal).unwrap(), &[1., 2., 2., 3.]);
}

/// Affine quantization: (packed, scales, biases).
fn affine(w: &Array, group_size: i32, bits: i32) -> mlx::Result<(Array, Array, Array)> {
    let (q, s, b) = quant::quantize(w, group_size, bits, quant::Mode::Affine)?;
    Ok((q, s, b.expect("affine quantization has biases")))
}

#[test]
fn quantization_round_trip() {
    let w = Array::arange(0., 128., 1., Dtype::Float32).unwrap().divide_scalar(64.).unwrap().reshape(&[2, 64]).unwrap();
    let (q, s, b) = affine(&w, 64, 8).unwrap();
    let back = quant::dequantize(&q, &s, Some(&b), 64, 8, quant::Mode::Affine).unwrap();
    let err = back.subtract(&w).unwrap().abs().unwrap().max(&[], false).unwrap().item::<f32>().unwrap();
    assert!(err < 0.01, "8-bit round trip error {err}");
    let x = Array::ones(&[1, 64], Dtype::Float32).unwrap();
    let y = quant::quantized_matmul(&x, &q, &s, Some(&b), true, 64, 8, quant::Mode::Affine, quant::Precision::Exact).unwrap();
    let want = x.matmul(&back.t().unwrap()).unwrap().to_vec::<f32>().unwrap();
    close(&y, &want);
    assert!(affine(&Array::ones(&[2, 10], Dtype::Float32).unwrap(), 64, 4).is_err());
}

#[test]
fn convolutions_and_fft() {
    // [batch, length, channels] input, [out, kernel, in] weight.
    let x = arr(&[1., 2., 3., 4.], &[1, 4, 1]);
    let w = arr(&[1., 1.], &[1, 2, 1]);
    close(&signal::conv1d(&x, &w, 1, 0, 1, 1).unwrap(), &[3., 5., 7.]);
    let xt = arr(&[1., 2.], &[1, 2, 1]);
    close(&signal::conv_transpose1d(&xt, &w, 1, 0, 1, 0, 1).unwrap(), &[1., 3., 2.]);
    let x2 = Array::ones(&[1, 2, 2, 1], Dtype::Float32).unwrap();
    let w2 = Array::ones(&[1, 2, 2, 1], Dtype::Float32).unwrap();
    close(&signal::conv2d(&x2, &w2, (1, 1), (0, 0), (1, 1), 1).unwrap(), &[4.]);
    let s = arr(&[1., 0., 0., 0.], &[4]);
    let f = signal::rfft(&s, 4, 0).unwrap();
    assert_eq!(f.shape(), vec![3]);
    close(&signal::irfft(&f, 4, 0).unwrap(), &[1., 0., 0., 0.]);
}

#[test]
fn compile_and_eval() {
    let f = Compiled::new(|xs: &[Array]| Ok(vec![xs[0].multiply(&xs[1])?.add_scalar(1.0)?]), false).unwrap();
    let a = arr(&[1., 2.], &[2]);
    let b = arr(&[3., 4.], &[2]);
    close(&f.call(&[&a, &b]).unwrap()[0], &[4., 9.]);
    close(&f.call(&[&b, &b]).unwrap()[0], &[10., 17.]);
    // An error inside the traced function comes back as an Err.
    let bad = Compiled::new(|xs: &[Array]| Ok(vec![xs[0].matmul(&xs[1])?]), false).unwrap();
    let e = bad.call(&[&a, &Array::zeros(&[3, 3], Dtype::Float32).unwrap()]).unwrap_err();
    assert!(e.message.contains("compiled function failed"), "{}", e.message);
    let c = a.add(&b).unwrap();
    transforms::async_eval(&[&c]).unwrap();
    mlx::eval(&[&c]).unwrap();
    close(&c, &[4., 6.]);
}

#[test]
fn safetensors_round_trip_and_memory() {
    let dir = std::env::temp_dir().join(format!("mlx-io-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.safetensors");
    let a = arr(&[1., 2., 3.], &[3]);
    let b = Array::from_slice(&[5i32], &[1]).unwrap();
    io::save_safetensors(&path, &[("a", &a), ("b", &b)], &[("format", "mlx")]).unwrap();
    let (t, meta) = io::load_safetensors(&path).unwrap();
    close(&t["a"], &[1., 2., 3.]);
    assert_eq!(t["b"].to_vec::<i32>().unwrap(), vec![5]);
    assert_eq!(meta["format"], "mlx");
    let missing = io::load_safetensors(&dir.join("missing.safetensors")).unwrap_err();
    assert!(!missing.message.is_empty());
    std::fs::write(dir.join("junk.safetensors"), b"not a safetensors file").unwrap();
    assert!(io::load_safetensors(&dir.join("junk.safetensors")).is_err());
    std::fs::remove_dir_all(&dir).ok();

    memory::reset_peak().unwrap();
    let big = Array::zeros(&[1024, 1024], Dtype::Float32).unwrap();
    big.eval().unwrap();
    let s = memory::stats().unwrap();
    assert!(s.peak >= 4 * 1024 * 1024, "peak {} too small", s.peak);
    memory::clear_cache().unwrap();
}

#[test]
fn build_info() {
    assert_eq!(mlx::info::version(), "0.32.4");
    assert!(mlx::info::device().unwrap().starts_with("cpu") || cfg!(target_os = "macos"));
    if cfg!(target_os = "linux") && std::env::var("MLX_NODE_OPENBLAS").as_deref() != Ok("none") {
        assert_eq!(mlx::info::blas_name().unwrap(), "openblas", "{}", mlx::info::blas_library_path().unwrap());
    }
}

/// `write_rows`: row i of the rows lands in cache i at its position (values
/// checked by hand, a 16-bit pair of caches of different capacities), and
/// rows or caches that do not fit come back as errors, not as a crash.
#[test]
fn write_rows_writes_each_row_at_its_position_and_checks_its_inputs() {
    // Two rows of 2 heads x 2 values; caches of capacity 3 and 4.
    let rows = arr(&[1., 2., 3., 4., 5., 6., 7., 8.], &[2, 2, 1, 2]).astype(Dtype::Float16).unwrap();
    let caches = [Array::zeros(&[1, 2, 3, 2], Dtype::Float16).unwrap(), Array::zeros(&[1, 2, 4, 2], Dtype::Float16).unwrap()];
    let out = rows.write_rows(&[&caches[0], &caches[1]], &[2, 0]).unwrap();
    let f32s = |a: &Array| a.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(f32s(&out[0]), vec![0., 0., 0., 0., 1., 2., 0., 0., 0., 0., 3., 4.]);
    assert_eq!(f32s(&out[1]), vec![5., 6., 0., 0., 0., 0., 0., 0., 7., 8., 0., 0., 0., 0., 0., 0.]);
    // The caches given are still held here, so they were copied and keep their zeros.
    assert!(f32s(&caches[0]).iter().chain(&f32s(&caches[1])).all(|&v| v == 0.0));

    let bad = |r: &Array, cs: &[&Array], pos: &[i32]| r.write_rows(cs, pos).and_then(|o| o[0].eval().map(|_| ())).expect_err("must fail").to_string();
    let c = &caches[0];
    assert!(bad(&rows, &[c], &[0, 0]).contains("one position per cache"));
    assert!(bad(&rows, &[c, c], &[0, 3]).contains("position outside the cache"));
    assert!(bad(&rows, &[c, c], &[-1, 0]).contains("position outside the cache"));
    assert!(bad(&rows.astype(Dtype::Float32).unwrap(), &[c, c], &[0, 0]).contains("of the rows' dtype"));
    let wide = Array::zeros(&[1, 2, 3, 4], Dtype::Float16).unwrap();
    assert!(bad(&rows, &[c, &wide], &[0, 0]).contains("[1, heads, capacity, dim]"));
    assert!(bad(&rows.reshape(&[2, 1, 2, 2]).unwrap(), &[c, c], &[0, 0]).contains("rows must be [n, heads, 1, dim]"));
    assert!(bad(&rows.astype(Dtype::Int8).unwrap(), &[c, c], &[0, 0]).contains("16- or 32-bit"));
}
