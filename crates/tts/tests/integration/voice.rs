//! Voice cloning's front end against mlx-audio's `prepare_conditionals`, run live by
//! scripts/fixtures_voice.py on synthetic WAV clips (16, 24, 44.1 and 48 kHz; 8/16/24/32-bit
//! PCM and float32; mono and stereo; shorter and longer than 6 s and 10 s): the resampled
//! signals, the three mels, CAMPPlus's Kaldi filter bank and the voice encoder's embedding with the Chatterbox fixture's
//! `ve.*` weights. Then every way a clip is refused.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use mlx::Array;
use tts::voice::{encoder, mel, read_wav, resample, Clip, Flavor, ReferenceSignals, VoiceEncoder};
use tts::TtsError;

use crate::common;
use crate::common::{get, load_ref, max_abs_diff, require};

fn root() -> PathBuf {
    common::cache_dir()
}

fn vec_diff(a: &[f32], b: &Array) -> f32 {
    max_abs_diff(&Array::from_slice(a, &[a.len() as i32]).unwrap(), b)
}

fn ve_weights(torch_names: bool) -> lm::weights::Weights {
    let file = root().join("fixtures-tts/chatterbox/model.safetensors");
    require(&file);
    let (all, _) = mlx::io::load_safetensors(&file).unwrap();
    let mut ve: HashMap<String, Array> = all.into_iter().filter(|(k, _)| k.starts_with("ve.")).collect();
    if torch_names {
        // The names of Resemble's PyTorch checkpoint: the bias split in two (halves that sum back).
        for l in 0..3 {
            let wx = ve.remove(&format!("ve.lstm.layers.{l}.Wx")).unwrap();
            let wh = ve.remove(&format!("ve.lstm.layers.{l}.Wh")).unwrap();
            let b = ve.remove(&format!("ve.lstm.layers.{l}.bias")).unwrap();
            ve.insert(format!("ve.lstm.weight_ih_l{l}"), wx);
            ve.insert(format!("ve.lstm.weight_hh_l{l}"), wh);
            ve.insert(format!("ve.lstm.bias_ih_l{l}"), b.multiply_scalar(0.25).unwrap());
            ve.insert(format!("ve.lstm.bias_hh_l{l}"), b.multiply_scalar(0.75).unwrap());
        }
    }
    lm::weights::Weights::from_tensors(ve, &file, None, None)
}

fn load_encoder(torch_names: bool) -> VoiceEncoder {
    let mut w = ve_weights(torch_names);
    let ve = VoiceEncoder::load(&mut w, "ve.", Flavor::Chatterbox).unwrap();
    w.finish().unwrap();
    ve
}

#[test]
fn front_end_matches_mlx_audio() {
    let dir = root().join("fixtures-voice");
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("meta.json"))
            .unwrap_or_else(|e| panic!("{}/meta.json: {e}: run `node scripts/fixtures-voice.js`", dir.display())),
    )
    .unwrap();
    // OpenBLAS serves the LSTM's matrix products in the addon; calling into the BLAS query keeps
    // it among this binary's libraries too (the wheel's reference BLAS is ten times slower).
    println!("BLAS: {}", mlx::info::blas_name().unwrap());
    let ve = load_encoder(false);
    let ve_torch = load_encoder(true);
    let mut worst = [0f32; 4];
    for (name, m) in meta.as_object().unwrap() {
        let r = load_ref(&dir.join(format!("{name}.safetensors")));
        let clip = read_wav(&dir.join(format!("{name}.wav"))).unwrap();
        assert_eq!(clip.sample_rate as u64, m["rate"].as_u64().unwrap(), "{name}");
        assert!(!clip.truncated);
        // The reader gives the file's samples, scaled and averaged as the script did.
        assert_eq!(vec_diff(&clip.samples, get(&r, "mono")), 0.0, "{name}: samples read");

        let t0 = Instant::now();
        let s = ReferenceSignals::new(&clip);
        let resample_s = t0.elapsed().as_secs_f64();
        let d = [
            vec_diff(&s.wav24, get(&r, "wav24")),
            vec_diff(&s.wav16_from_24, get(&r, "wav16_from_24")),
            vec_diff(&s.wav16_full, get(&r, "wav16_full")),
        ];
        let trimmed = encoder::trim_silence(&s.wav16_full);
        assert_eq!(trimmed.len(), get(&r, "trimmed").dim(0) as usize, "{name}: silence trim");

        let mels = [
            max_abs_diff(&mel::s3_tokenizer_log_mel(&s.wav16_from_24).unwrap(), get(&r, "mel128_s3gen")),
            max_abs_diff(&mel::s3_tokenizer_log_mel(s.wav16()).unwrap(), get(&r, "mel128_t3")),
            max_abs_diff(&mel::s3gen_mel(&s.wav24).unwrap(), get(&r, "mel80")),
            max_abs_diff(&mel::voice_encoder_mel(trimmed).unwrap().transpose(&[1, 0]).unwrap(), get(&r, "mel40")),
            max_abs_diff(&mel::kaldi_fbank(&s.wav16_from_24, Flavor::Chatterbox).unwrap(), get(&r, "fbank")),
            max_abs_diff(&mel::campplus_features(&s.wav16_from_24, Flavor::Chatterbox).unwrap(), get(&r, "xvector_features")),
        ];
        let embed = ve.embed(&s.wav16_full).unwrap();
        let e = max_abs_diff(&embed, get(&r, "ve_embed"));
        let e_torch = max_abs_diff(&ve_torch.embed(&s.wav16_full).unwrap(), &embed);
        println!(
            "{name}: resampled (24k, 16k from 24k, 16k) {:.1e} {:.1e} {:.1e} in {resample_s:.2} s; mels (s3 tokens 10 s, 6 s, s3gen, ve, fbank, x-vector input) {:.1e} {:.1e} {:.1e} {:.1e} {:.1e} {:.1e}; ve embedding {e:.1e} (PyTorch names {e_torch:.1e})",
            d[0], d[1], d[2], mels[0], mels[1], mels[2], mels[3], mels[4], mels[5]
        );
        for v in d {
            assert!(v < 1e-4, "{name}: resampled signal max abs diff {v}");
        }
        for v in mels {
            assert!(v < 1e-4, "{name}: mel max abs diff {v}");
        }
        assert!(e < 1e-3, "{name}: speaker embedding max abs diff {e}");
        assert!(e_torch < 1e-5, "{name}: PyTorch-named weights give another embedding ({e_torch})");
        worst[0] = worst[0].max(d.iter().cloned().fold(0.0, f32::max));
        worst[1] = worst[1].max(mels.iter().cloned().fold(0.0, f32::max));
        worst[2] = worst[2].max(e);
        worst[3] = worst[3].max(resample_s as f32);
    }
    println!("worst: resampled {:.1e}, mels {:.1e}, embedding {:.1e}; slowest resampling {:.2} s", worst[0], worst[1], worst[2], worst[3]);
}

#[test]
fn resampling_ten_seconds_of_48k_is_fast() {
    let x: Vec<f32> = (0..480_000).map(|i| (i as f32 * 0.01).sin() * 0.5).collect();
    let t0 = Instant::now();
    let a = resample::resample(&x, 48_000, 24_000);
    let b = resample::resample(&x, 48_000, 16_000);
    let c = resample::resample(&x, 44_100, 16_000);
    let s = t0.elapsed().as_secs_f64();
    println!("10 s: 48k to 24k and to 16k, 44.1k to 16k in {s:.2} s");
    assert_eq!((a.len(), b.len(), c.len()), (240_000, 160_000, 174_150));
    assert!(s < 1.5, "resampling took {s} s");
}

// Bad clips, each written here.

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mlx-node-voice-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn write_wav(path: &Path, spec: hound::WavSpec, frames: usize, sample: impl Fn(usize) -> f32) {
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for i in 0..frames * spec.channels as usize {
        match spec.sample_format {
            hound::SampleFormat::Float => w.write_sample(sample(i)).unwrap(),
            hound::SampleFormat::Int => w.write_sample((sample(i) * 32767.0) as i16).unwrap(),
        }
    }
    w.finalize().unwrap();
}

fn pcm16(rate: u32) -> hound::WavSpec {
    hound::WavSpec { channels: 1, sample_rate: rate, bits_per_sample: 16, sample_format: hound::SampleFormat::Int }
}

fn tone(i: usize) -> f32 {
    (i as f32 * 0.05).sin() * 0.3
}

fn invalid_audio(path: &Path, expect: &str) {
    match read_wav(path) {
        Err(TtsError::InvalidAudio(m)) => {
            assert_eq!(TtsError::InvalidAudio(m.clone()).code(), "INVALID_AUDIO");
            assert!(m.contains(expect), "{}: message {m:?} lacks {expect:?}", path.display());
        }
        other => panic!("{}: expected INVALID_AUDIO, got {other:?}", path.display()),
    }
}

#[test]
fn bad_clips_are_invalid_audio() {
    let text = tmp("notes.wav");
    std::fs::write(&text, "these are not audio samples at all, only words in a file").unwrap();
    invalid_audio(&text, "not a WAV file (no RIFF tag found); WAV (PCM or float32) is the audio format read");

    let good = tmp("good.wav");
    write_wav(&good, pcm16(16_000), 32_000, tone);
    let bytes = std::fs::read(&good).unwrap();

    let truncated = tmp("truncated.wav");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    invalid_audio(&truncated, "the file ends after 15989 of the 32000 frames");

    // A header that claims ten minutes over two seconds of data.
    let lying = tmp("lying.wav");
    let mut b = bytes.clone();
    let data = b.windows(4).position(|w| w == b"data").unwrap();
    b[data + 4..data + 8].copy_from_slice(&(600u32 * 16_000 * 2).to_le_bytes());
    std::fs::write(&lying, &b).unwrap();
    invalid_audio(&lying, "the file ends after 32000 of the 9600000 frames");

    let zero_channels = tmp("zero-channels.wav");
    let mut b = bytes.clone();
    let fmt = b.windows(4).position(|w| w == b"fmt ").unwrap();
    b[fmt + 10..fmt + 12].copy_from_slice(&0u16.to_le_bytes());
    std::fs::write(&zero_channels, &b).unwrap();
    invalid_audio(&zero_channels, "a malformed or unsupported WAV header (file contains zero channels)");
    let zero_rate = tmp("zero-rate.wav");
    let mut b = bytes.clone();
    // The rate and the byte rate, which hound checks against each other.
    b[fmt + 12..fmt + 20].copy_from_slice(&[0; 8]);
    std::fs::write(&zero_rate, &b).unwrap();
    invalid_audio(&zero_rate, "a sample rate of 0 Hz is not supported; rates from 4000 to 384000 Hz are");
    // A rate that resamples only through a filter of millions of taps, and an absurd one.
    let odd_rate = tmp("odd-rate.wav");
    write_wav(&odd_rate, pcm16(44_101), 44_101, tone);
    invalid_audio(&odd_rate, "a sample rate of 44101 Hz does not divide well with 16 and 24 kHz (resampling would need a 5644929-tap filter)");
    let huge_rate = tmp("huge-rate.wav");
    let mut b = bytes.clone();
    b[fmt + 12..fmt + 20].copy_from_slice(&[2_000_000_000u32.to_le_bytes(), 4_000_000_000u32.to_le_bytes()].concat());
    std::fs::write(&huge_rate, &b).unwrap();
    invalid_audio(&huge_rate, "a sample rate of 2000000000 Hz is not supported");

    let float = hound::WavSpec { channels: 2, sample_rate: 24_000, bits_per_sample: 32, sample_format: hound::SampleFormat::Float };
    let nan = tmp("nan.wav");
    write_wav(&nan, float, 48_000, |i| if i == 70_001 { f32::NAN } else { tone(i) });
    invalid_audio(&nan, "sample 35000 is NaN");
    let inf = tmp("inf.wav");
    write_wav(&inf, float, 48_000, |i| if i == 10 { f32::INFINITY } else { tone(i) });
    invalid_audio(&inf, "sample 5 is inf");

    let short = tmp("short.wav");
    write_wav(&short, pcm16(44_100), 30_000, tone);
    invalid_audio(&short, "the clip is 0.68 s long; a voice needs at least 1 s");

    let silent = tmp("silent.wav");
    write_wav(&silent, pcm16(16_000), 48_000, |_| 0.0);
    invalid_audio(&silent, "silent");

    // 64-bit float WAV: hound reads no such samples.
    let f64_wav = tmp("f64.wav");
    let mut b = Vec::new();
    let data: Vec<u8> = (0..16_000).flat_map(|i| (tone(i) as f64).to_le_bytes()).collect();
    let fmt_chunk = [3u16.to_le_bytes(), 1u16.to_le_bytes()].concat();
    let fmt_chunk = [
        fmt_chunk,
        16_000u32.to_le_bytes().to_vec(),
        (16_000u32 * 8).to_le_bytes().to_vec(),
        8u16.to_le_bytes().to_vec(),
        64u16.to_le_bytes().to_vec(),
    ]
    .concat();
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&((4 + 8 + fmt_chunk.len() + 8 + data.len()) as u32).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    b.extend_from_slice(&(fmt_chunk.len() as u32).to_le_bytes());
    b.extend_from_slice(&fmt_chunk);
    b.extend_from_slice(b"data");
    b.extend_from_slice(&(data.len() as u32).to_le_bytes());
    b.extend_from_slice(&data);
    std::fs::write(&f64_wav, &b).unwrap();
    invalid_audio(&f64_wav, "a malformed or unsupported WAV header (bits per sample is not 32)");

    match read_wav(&tmp("missing.wav")) {
        Err(TtsError::InvalidArgument(m)) => assert!(m.contains("no such file"), "{m}"),
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }

    // Samples in memory go through the same checks.
    assert!(matches!(Clip::from_samples(vec![0.1; 100], 16_000), Err(TtsError::InvalidAudio(_))));
    assert!(matches!(Clip::from_samples(vec![0.1; 16_000], 0), Err(TtsError::InvalidAudio(_))));
    assert!(matches!(Clip::from_samples(vec![0.1; 500_000], 499_999), Err(TtsError::InvalidAudio(_))));
    assert!(Clip::from_samples(vec![0.1; 11_025], 11_025).is_ok());
    assert!(matches!(Clip::from_samples(vec![f32::NAN; 16_000], 16_000), Err(TtsError::InvalidAudio(_))));
    std::fs::remove_dir_all(text.parent().unwrap()).unwrap();
}

/// A ten-minute clip is read up to `MAX_SECONDS` (and no further), and says so.
#[test]
fn long_clips_are_cut_at_the_limit() {
    let long = tmp("ten-minutes.wav");
    write_wav(&long, pcm16(16_000), 600 * 16_000, tone);
    let t0 = Instant::now();
    let clip = read_wav(&long).unwrap();
    println!("read 60 s of a 10-minute clip in {:.2} s", t0.elapsed().as_secs_f64());
    assert!(clip.truncated);
    assert_eq!(clip.samples.len(), (tts::voice::wav::MAX_SECONDS * 16_000.0) as usize);
    assert_eq!(clip.samples[1000], (tone(1000) * 32767.0) as i16 as f32 / 32768.0);
    let cut = Clip::from_samples(vec![0.25; 61 * 8_000], 8_000).unwrap();
    assert!(cut.truncated && cut.duration() == 60.0);
    std::fs::remove_file(&long).unwrap();
}
