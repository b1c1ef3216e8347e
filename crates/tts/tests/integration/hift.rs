//! The HiFT vocoder against mlx-audio's `HiFTGenerator`, run live by the
//! fixture setup on the shrunk fixture model (`hift_base_channels` 64) with
//! `mx.random.seed(7)` before `inference`.
use std::path::{Path, PathBuf};

use mlx::random::KeySequence;
use mlx::Array;
use tts::hift::{fade_in, Hift, HiftConfig};

use crate::common;
use crate::common::{get, load_ref, max_abs_diff, require};

fn fixtures() -> PathBuf {
    common::cache_dir().join("fixtures-tts")
}

fn fixture_dir() -> PathBuf {
    fixtures().join("chatterbox")
}

fn load_hift(dir: &Path) -> Hift {
    let config_path = dir.join("config.json");
    require(&config_path);
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    let cfg = HiftConfig::from_config_json(&config).unwrap();
    let mut w = lm::weights::Weights::load(dir, None, None).unwrap();
    let hift = Hift::load(&mut w, &cfg).unwrap();
    // Only this part's tensors matter here.
    w.discard(|k| !k.starts_with("s3gen.mel2wav."));
    w.finish().unwrap();
    hift
}

/// Both fixtures (the 4-bit one quantizes T3 only; its HiFT has its own seeded weights
/// and its own greedy mel).
#[test]
fn waveform_matches_mlx_audio_with_seed_7() {
    // The reference ran on OpenBLAS (scripts/venv.js preloads it). Calling into the
    // BLAS query keeps OpenBLAS among this binary's libraries, as in the addon; on
    // another BLAS the F0 convs differ by ulps, which the source's phase sum
    // (float32 over every sample) magnifies to ~1e-3 in the waveform.
    println!("BLAS: {}", mlx::info::blas_name().unwrap());
    for name in ["chatterbox", "chatterbox-q4"] {
        println!("{name}:");
        check_fixture(&fixtures().join(name));
    }
}

fn check_fixture(dir: &Path) {
    let hift = load_hift(dir);
    let r = load_ref(&dir.join("ref/hift.safetensors"));
    let mel = get(&r, "mel");

    let d = max_abs_diff(&hift.f0(mel).unwrap(), get(&r, "f0"));
    println!("hift f0 max abs diff {d:e} Hz");
    assert!(d < 1e-2, "f0 max abs diff {d}");

    let mut keys = KeySequence::new(7).unwrap();
    let (wav, source) = hift.inference(mel, None, &mut keys).unwrap();
    let d = max_abs_diff(&source, get(&r, "source"));
    println!("hift source max abs diff {d:e}");
    assert!(d < 1e-3, "source max abs diff {d}");

    // The dump holds the batch row as [S].
    let d = max_abs_diff(&wav.squeeze(&[0]).unwrap(), get(&r, "wav_raw"));
    println!("hift wav_raw max abs diff {d:e} over {} samples", wav.dim(1));
    assert!(d < 1e-3, "wav max abs diff {d}");

    // Decoding alone, from mlx-audio's own excitation.
    let wav = hift.decode(mel, get(&r, "source")).unwrap();
    let d = max_abs_diff(&wav.squeeze(&[0]).unwrap(), get(&r, "wav_raw"));
    println!("hift decode(mel, reference source) max abs diff {d:e}");
    assert!(d < 1e-4, "decode max abs diff {d}");
}

#[test]
fn streaming_cache_keeps_the_cached_excitation() {
    let hift = load_hift(&fixture_dir());
    let r = load_ref(&fixture_dir().join("ref/hift.safetensors"));
    let mel = get(&r, "mel");
    let (_, first) = hift.inference(mel, None, &mut KeySequence::new(1).unwrap()).unwrap();
    let n = 3 * 480;
    let cache = first.slice_axis(2, 0, n).unwrap();
    let (_, second) = hift.inference(mel, Some(&cache), &mut KeySequence::new(2).unwrap()).unwrap();
    let (_, fresh) = hift.inference(mel, None, &mut KeySequence::new(2).unwrap()).unwrap();
    assert_eq!(second.shape(), first.shape());
    assert_eq!(max_abs_diff(&second.slice_axis(2, 0, n).unwrap(), &cache), 0.0);
    let t = fresh.dim(2);
    assert_eq!(max_abs_diff(&second.slice_axis(2, n, t).unwrap(), &fresh.slice_axis(2, n, t).unwrap()), 0.0);
}

#[test]
fn fade_in_matches_the_generated_waveform() {
    let r = load_ref(&fixture_dir().join("ref/greedy.safetensors"));
    let raw = get(&r, "wav_raw").expand_dims(&[0]).unwrap();
    let faded = fade_in(&raw).unwrap().squeeze(&[0]).unwrap();
    let d = max_abs_diff(&faded, get(&r, "wav"));
    println!("fade_in max abs diff {d:e}");
    assert!(d <= 1e-7, "fade_in max abs diff {d}");
    // Shorter than the fade: left as it is.
    let short = Array::ones(&[1, 100], mlx::Dtype::Float32).unwrap();
    assert_eq!(max_abs_diff(&fade_in(&short).unwrap(), &short), 0.0);
}

#[test]
fn bad_mel_shape_is_invalid_argument() {
    let hift = load_hift(&fixture_dir());
    let mel = Array::zeros(&[1, 3, 4], mlx::Dtype::Float32).unwrap();
    let err = hift.inference(&mel, None, &mut KeySequence::new(0).unwrap()).err().unwrap();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
}
