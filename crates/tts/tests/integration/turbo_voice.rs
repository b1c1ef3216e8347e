//! Chatterbox Turbo's voice cloning against mlx-audio's Turbo `prepare_conditionals`, on the Turbo
//! fixture's two clips (scripts/fixtures_tts_turbo.py `clone_references`, written by `npm test`'s
//! setup): the loudness measure against `mlx_audio.dsp.integrated_loudness`, a clip under the
//! -70 LUFS gate left as it is (mlx-audio skips its normalisation), every conditioning tensor
//! within 1e-3 with token ids equal for the 16 s clip (past every cut; __test__/tts-turbo.test.js
//! checks the 7 s one's through `Voice.save()`), and a clip of 5 s refused.
use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::common::{get, load_ref, max_abs_diff};
use mlx::{Array, Dtype};
use tts::config::ChatterboxConfig;
use tts::t3::T3Config;
use tts::voice::clone::{ClipSource, VoiceCloner};
use tts::voice::{loudness, Clip, ReferenceSignals};
use tts::TtsError;

const TOLERANCE: f32 = 1e-3;
/// How far our loudness may be from mlx-audio's, in LU (measured: docs/speech.md).
const LOUDNESS_TOLERANCE: f64 = 1e-6;

fn fixture() -> PathBuf {
    let dir = common::cache_dir().join("fixtures-tts-turbo/chatterbox-turbo");
    common::require(&dir.join("ref/clone.json"));
    dir
}

fn meta(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("ref/clone.json")).unwrap()).unwrap()
}

fn to_f32(a: &Array) -> Vec<f32> {
    a.astype(Dtype::Float32).unwrap().to_vec::<f32>().unwrap()
}

#[test]
fn loudness_as_mlx_audio_measures_it() {
    let dir = fixture();
    let meta = meta(&dir);
    let quiet_gain = meta["quiet_gain"].as_f64().unwrap() as f32;
    for (name, clip) in meta["clips"].as_object().unwrap() {
        let wav24 = to_f32(get(&load_ref(&dir.join(format!("ref/clip_{name}.safetensors"))), "wav24"));
        let ours = loudness::integrated(&wav24, 24_000);
        let theirs = clip["loudness"].as_f64().unwrap();
        println!("{name}: {ours:.9} LUFS, mlx-audio {theirs:.9}, off by {:.1e}", (ours - theirs).abs());
        assert!((ours - theirs).abs() < LOUDNESS_TOLERANCE, "{name}: loudness {ours} for mlx-audio's {theirs}");

        // mlx-audio measures -inf for the clip scaled under the gate and leaves it as it is.
        let quiet: Vec<f32> = wav24.iter().map(|v| v * quiet_gain).collect();
        assert_eq!(loudness::integrated(&quiet, 24_000), f64::NEG_INFINITY, "{name}: quiet");
        let mut normalised = quiet.clone();
        loudness::normalize(&mut normalised, 24_000, -27.0);
        assert_eq!(normalised, quiet, "{name}: a clip of -inf loudness is left as it is");
    }
}

#[test]
fn turbo_conditionals_as_mlx_audio_prepares_them() {
    println!("BLAS: {}", mlx::info::blas_name().unwrap());
    let dir = fixture();
    let meta = meta(&dir);
    let config = ChatterboxConfig::from_dir(&dir).unwrap();
    let prompt_len = T3Config::turbo_from_json(config.section("t3_config")).unwrap().speech_cond_prompt_len;
    let commit = meta["tokenizer_commit"].as_str().unwrap();
    let tokenizer = dir.join(format!("../hub/models--mlx-community--S3TokenizerV2/snapshots/{commit}/model.safetensors"));
    let cloner = VoiceCloner::load(&dir, &tokenizer, prompt_len, tts::voice::Flavor::Turbo).unwrap();
    for (name, clip) in meta["clips"].as_object().unwrap().iter().filter(|(_, c)| c["seconds"].as_f64().unwrap() > 15.0) {
        let samples = to_f32(get(&load_ref(&dir.join(format!("ref/clip_{name}.safetensors"))), "mono"));
        let clip = Clip::from_samples(samples, clip["rate"].as_u64().unwrap() as u32).unwrap();
        let t0 = std::time::Instant::now();
        let ours = cloner.conditionals(&clip, ClipSource::Samples, 0.5, &|| true).unwrap();
        let secs = t0.elapsed().as_secs_f64();
        let theirs: HashMap<String, Array> = load_ref(&dir.join(format!("ref/clone_{name}.safetensors")));
        let mut names: Vec<&String> = ours.keys().collect();
        names.sort();
        let mut want: Vec<&String> = theirs.keys().collect();
        want.sort();
        assert_eq!(names, want, "{name}: tensor names");
        let mut report = Vec::new();
        for key in names {
            let (o, t) = (&ours[key], &theirs[key]);
            assert_eq!(o.shape(), t.shape(), "{name}: {key} shape");
            if t.dtype().is_float() {
                let d = max_abs_diff(&o.astype(Dtype::Float32).unwrap(), &t.astype(Dtype::Float32).unwrap());
                report.push(format!("{key} {d:.1e}"));
                assert!(d <= TOLERANCE, "{name}: {key} differs by {d}");
            } else {
                assert_eq!(
                    o.astype(Dtype::Int32).unwrap().to_vec::<i32>().unwrap(),
                    t.astype(Dtype::Int32).unwrap().to_vec::<i32>().unwrap(),
                    "{name}: {key}"
                );
            }
        }
        println!("{name}: cloned in {secs:.2} s; {}", report.join(", "));
    }
}

#[test]
fn turbo_wants_a_clip_longer_than_5_s() {
    let samples: Vec<f32> = (0..5 * 24_000).map(|i| (i as f32 / 10.0).sin() * 0.3).collect();
    match ReferenceSignals::turbo(&Clip::from_samples(samples, 24_000).unwrap()) {
        Err(TtsError::InvalidAudio(m)) => assert!(m.contains("5.00 s") && m.contains("longer than 5 s"), "{m}"),
        Err(e) => panic!("expected INVALID_AUDIO, got {e:?}"),
        Ok(_) => panic!("a 5 s clip was accepted"),
    }
}
