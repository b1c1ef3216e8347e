//! Resampling as mlx-audio's `resample_audio` does it (`mlx_audio/resample.py`): scipy's
//! `resample_poly(x, up, down, window=fir, padtype="edge")` with resampy's "kaiser_best" filter,
//! `firwin(2 * 64 * max_rate + 1, 0.9475937167399596 / max_rate, window=("kaiser",
//! 14.769656459379492))`. Computed in f64 as scipy does (its `upfirdn` promotes to the filter's
//! float64), then rounded to f32.
use std::f64::consts::PI;

const NUM_ZEROS: usize = 64;
const ROLLOFF: f64 = 0.9475937167399596;
const BETA: f64 = 14.769656459379492;

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The modified Bessel function I0, by its power series (all terms positive, so it converges
/// to f64 precision for the Kaiser window's arguments, at most `BETA`).
fn bessel_i0(x: f64) -> f64 {
    let q = x * x / 4.0;
    let (mut term, mut sum, mut k) = (1.0f64, 1.0f64, 1.0f64);
    while term > sum * 1e-18 {
        term *= q / (k * k);
        sum += term;
        k += 1.0;
    }
    sum
}

/// scipy's `firwin(numtaps, cutoff, window=("kaiser", BETA))`: low-pass, scaled to unit gain
/// at DC.
fn firwin_kaiser(numtaps: usize, cutoff: f64) -> Vec<f64> {
    let alpha = 0.5 * (numtaps - 1) as f64;
    let i0_beta = bessel_i0(BETA);
    let mut h: Vec<f64> = (0..numtaps)
        .map(|n| {
            let m = n as f64 - alpha;
            let x = cutoff * m;
            let sinc = if x == 0.0 { 1.0 } else { (PI * x).sin() / (PI * x) };
            let r = m / alpha;
            let window = bessel_i0(BETA * (1.0 - r * r).max(0.0).sqrt()) / i0_beta;
            cutoff * sinc * window
        })
        .collect();
    let sum: f64 = h.iter().sum();
    h.iter_mut().for_each(|v| *v /= sum);
    h
}

/// scipy's `_output_len` of `upfirdn`.
fn upfirdn_len(len_h: usize, in_len: usize, up: usize, down: usize) -> usize {
    let in_len = in_len + len_h.div_ceil(up) - 1;
    (in_len * up).div_ceil(down)
}

/// The reduced ratio `(up, down)` of `from` Hz to `to` Hz.
fn ratio(from: u32, to: u32) -> (usize, usize) {
    let g = gcd(from as u64, to as u64).max(1);
    ((to as u64 / g) as usize, (from as u64 / g) as usize)
}

/// The length of the filter `resample` designs for `from` to `to` Hz: 2 * 64 * max(up, down) + 1
/// taps, which grows with how badly the rates divide (56,449 for 44.1 kHz to 16 kHz; millions for
/// a rate such as 44,101 Hz).
pub fn filter_taps(from: u32, to: u32) -> usize {
    if from == to {
        return 0;
    }
    let (up, down) = ratio(from, to);
    2 * NUM_ZEROS * up.max(down) + 1
}

/// `x` at `from` Hz resampled to `to` Hz (the same samples when the rates are equal).
pub fn resample(x: &[f32], from: u32, to: u32) -> Vec<f32> {
    if from == to || x.is_empty() {
        return x.to_vec();
    }
    let (up, down) = ratio(from, to);
    let max_rate = up.max(down);
    let fir = firwin_kaiser(filter_taps(from, to), ROLLOFF / max_rate as f64);

    // resample_poly: gain `up`, zeros in front so output sample 0 sits at the filter's centre,
    // zeros behind until the full convolution covers the kept outputs.
    let n_in = x.len();
    let n_out = (n_in * up).div_ceil(down);
    let half_len = (fir.len() - 1) / 2;
    let n_pre_pad = down - half_len % down;
    let n_pre_remove = (half_len + n_pre_pad) / down;
    let mut n_post_pad = 0;
    while upfirdn_len(fir.len() + n_pre_pad + n_post_pad, n_in, up, down) < n_out + n_pre_remove {
        n_post_pad += 1;
    }
    let mut h = vec![0.0f64; n_pre_pad];
    h.extend(fir.iter().map(|v| v * up as f64));
    h.resize(h.len() + n_post_pad, 0.0);

    // upfirdn with mode "edge": y[m] = sum_j h[j] u[m*down - j], u the input upsampled by
    // zero-stuffing, with x[0] before the start and x[n-1] past the end. Only the taps of
    // phase (m*down) % up meet a nonzero u: output m is the dot product of that phase's taps
    // with x read backwards from (m*down) / up.
    let phases: Vec<Vec<f64>> = (0..up).map(|p| h.iter().skip(p).step_by(up).copied().collect()).collect();
    let left = phases.iter().map(Vec::len).max().unwrap_or(0);
    let last_base = ((n_pre_remove + n_out - 1) * down) / up;
    let right = (last_base + 1).saturating_sub(n_in);
    let mut xe = vec![f64::from(x[0]); left];
    xe.extend(x.iter().map(|&v| f64::from(v)));
    xe.resize(xe.len() + right, f64::from(x[n_in - 1]));

    (n_pre_remove..n_pre_remove + n_out)
        .map(|m| {
            let n0 = m * down;
            let taps = &phases[n0 % up];
            let end = n0 / up + left;
            let mut acc = 0.0f64;
            for (q, &tap) in taps.iter().enumerate() {
                acc += tap * xe[end - q];
            }
            acc as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_lengths_follow_resample_poly() {
        let x = vec![0.5f32; 1001];
        assert_eq!(resample(&x, 48000, 16000).len(), 334);
        assert_eq!(resample(&x, 16000, 24000).len(), 1502);
        assert_eq!(resample(&x, 44100, 16000).len(), 364);
        // A constant stays constant (unit DC gain, edge padding).
        for v in resample(&x, 44100, 24000) {
            assert!((v - 0.5).abs() < 1e-6, "{v}");
        }
    }
}
