//! CAMPPlus, S3Gen's speaker encoder, against mlx-audio's `CAMPPlus.inference` run live by
//! scripts/fixtures_voice.py (`write_campplus`) on the voice fixture's clips, as `embed_ref`
//! runs it (the 16 kHz signal made from the 10 s at 24 kHz), with the Chatterbox fixture's
//! random `s3gen.speaker_encoder.*` weights: loaded from the model folder as a voice will load
//! them, and renamed to the PyTorch checkpoint's names and layout. Then bad weights and audio.
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use lm::weights::Weights;
use mlx::Array;
use tts::voice::{read_wav, CamPlus, Flavor, ReferenceSignals, SpeakerEncoders};
use tts::TtsError;

use crate::common;
use crate::common::{get, load_ref, max_abs_diff, require};

const PREFIX: &str = "s3gen.speaker_encoder.";

fn model_dir() -> PathBuf {
    common::cache_dir().join("fixtures-tts/chatterbox")
}

fn voice_dir() -> PathBuf {
    common::cache_dir().join("fixtures-voice")
}

/// The checkpoint's CAMPPlus tensors, as stored (mlx-audio's names and layout).
fn tensors() -> HashMap<String, Array> {
    let file = model_dir().join("model.safetensors");
    require(&file);
    let (all, _) = mlx::io::load_safetensors(&file).unwrap();
    all.into_iter().filter(|(k, _)| k.starts_with(PREFIX)).collect()
}

fn weights(t: HashMap<String, Array>) -> Weights {
    Weights::from_tensors(t, &model_dir().join("model.safetensors"), None, None)
}

/// The same tensors under the PyTorch checkpoint's names (the script's map, which it checked
/// mlx-audio's `sanitize` to undo), conv kernels in PyTorch's `[out, in, k...]`, plus the
/// `num_batches_tracked` counters PyTorch saves.
fn torch_tensors() -> HashMap<String, Array> {
    let names = voice_dir().join("campplus_torch_names.json");
    require(&names);
    let names: HashMap<String, String> = serde_json::from_str(&std::fs::read_to_string(&names).unwrap()).unwrap();
    let mut mlx_named = tensors();
    let mut out: HashMap<String, Array> = names
        .iter()
        .map(|(torch, mlx_name)| {
            let a = mlx_named.remove(&format!("{PREFIX}{mlx_name}")).unwrap_or_else(|| panic!("no {mlx_name}"));
            let a = match a.ndim() {
                4 => a.transpose(&[0, 3, 1, 2]).unwrap(),
                3 => a.swapaxes(1, 2).unwrap(),
                _ => a,
            };
            (format!("{PREFIX}{torch}"), a)
        })
        .collect();
    assert!(mlx_named.is_empty(), "names the map lacks: {:?}", mlx_named.keys().collect::<Vec<_>>());
    out.insert(format!("{PREFIX}head.bn1.num_batches_tracked"), Array::from_slice(&[0i32], &[1]).unwrap());
    out
}

fn load(t: HashMap<String, Array>) -> CamPlus {
    let mut w = weights(t);
    let model = CamPlus::load(&mut w, PREFIX, Flavor::Chatterbox).unwrap();
    w.finish().unwrap();
    model
}

#[test]
fn xvector_matches_mlx_audio() {
    let dir = voice_dir();
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("meta.json"))
            .unwrap_or_else(|e| panic!("{}/meta.json: {e}: run `node scripts/fixtures-voice.js`", dir.display())),
    )
    .unwrap();
    let want = load_ref(&dir.join("campplus.safetensors"));
    println!("BLAS: {}", mlx::info::blas_name().unwrap());
    // As a voice loads it: from the model folder, beside the voice encoder.
    let model = SpeakerEncoders::load(&model_dir(), Flavor::Chatterbox).unwrap().campplus;
    let torch = load(torch_tensors());
    let mut worst = 0f32;
    for (i, name) in meta.as_object().unwrap().keys().enumerate() {
        let clip = read_wav(&dir.join(format!("{name}.wav"))).unwrap();
        let s = ReferenceSignals::new(&clip);
        let t0 = Instant::now();
        let x = model.embed(&s.wav16_from_24).unwrap();
        x.eval().unwrap();
        let secs = t0.elapsed().as_secs_f64();
        assert_eq!(x.shape(), vec![1, 192], "{name}");
        let d = max_abs_diff(&x, get(&want, name));
        println!("{name}: {:.1} s at 16 kHz, x-vector off by {d:.1e} in {secs:.2} s", s.wav16_from_24.len() as f64 / 16000.0);
        assert!(d < 1e-3, "{name}: x-vector max abs diff {d}");
        worst = worst.max(d);
        if i == 0 {
            let dt = max_abs_diff(&torch.embed(&s.wav16_from_24).unwrap(), &x);
            println!("{name}: PyTorch names and layout off by {dt:.1e}");
            assert!(dt < 1e-5, "{name}: PyTorch-named weights give another x-vector ({dt})");
        }
    }
    println!("worst: {worst:.1e}");
}

fn invalid_weights(t: HashMap<String, Array>, expect: &[&str]) {
    match CamPlus::load(&mut weights(t), PREFIX, Flavor::Chatterbox) {
        Err(e @ TtsError::InvalidWeights(_)) => {
            assert_eq!(e.code(), "INVALID_WEIGHTS");
            for part in expect {
                assert!(e.message().contains(part), "message {:?} lacks {part:?}", e.message());
            }
        }
        Err(other) => panic!("expected INVALID_WEIGHTS, got {other:?}"),
        Ok(_) => panic!("expected INVALID_WEIGHTS, got a model"),
    }
}

#[test]
fn bad_weights_are_invalid_weights() {
    let name = |n: &str| format!("{PREFIX}{n}");
    // A missing tensor, in each naming.
    let mut t = tensors();
    t.remove(&name("blocks.1.layers.3.cam_layer.linear2.bias"));
    invalid_weights(t, &[&name("blocks.1.layers.3.cam_layer.linear2.bias"), "missing"]);
    let mut t = torch_tensors();
    t.remove(&name("xvector.dense.nonlinear.batchnorm.running_var"));
    invalid_weights(t, &[&name("xvector.dense.nonlinear.batchnorm.running_var"), "missing"]);
    let mut t = torch_tensors();
    t.remove(&name("xvector.tdnn.linear.weight"));
    invalid_weights(t, &[&name("xvector.tdnn.linear.weight"), "missing"]);
    // A kernel in neither layout: both shapes named.
    let mut t = tensors();
    t.insert(name("head.conv1.weight"), Array::zeros(&[32, 3, 3, 2], mlx::Dtype::Float32).unwrap());
    invalid_weights(t, &[&name("head.conv1.weight"), "[32, 3, 3, 1]", "[32, 1, 3, 3]"]);
    let mut t = tensors();
    t.insert(name("transits.2.linear.weight"), Array::zeros(&[512, 1, 1000], mlx::Dtype::Float32).unwrap());
    invalid_weights(t, &[&name("transits.2.linear.weight"), "[512, 1, 1024]"]);
    // A mis-shaped batch norm.
    let mut t = tensors();
    t.insert(name("out_nonlinear.0.running_mean"), Array::zeros(&[256], mlx::Dtype::Float32).unwrap());
    invalid_weights(t, &[&name("out_nonlinear.0.running_mean"), "[512]"]);
}

#[test]
fn too_short_audio_is_invalid_audio() {
    let model = load(tensors());
    // Fewer samples than one 25 ms frame at 16 kHz.
    match model.embed(&[0.1; 399]) {
        Err(e @ TtsError::InvalidAudio(_)) => assert_eq!(e.code(), "INVALID_AUDIO"),
        other => panic!("expected INVALID_AUDIO, got {:?}", other.map(|a| a.shape())),
    }
    // One frame is enough.
    assert_eq!(model.embed(&[0.1; 400]).unwrap().shape(), vec![1, 192]);
}

/// Every fixture folder's layout (float16, bfloat16, the T3 backbone quantized) gives its speaker
/// encoders, the rest of its tensors left unread.
#[test]
fn speaker_encoders_load_from_every_fixture_folder() {
    for folder in ["chatterbox-f16", "chatterbox-bf16", "chatterbox-q4"] {
        let dir = common::cache_dir().join("fixtures-tts").join(folder);
        require(&dir);
        SpeakerEncoders::load(&dir, Flavor::Chatterbox).unwrap_or_else(|e| panic!("{folder}: {e:?}"));
    }
    match SpeakerEncoders::load(&common::cache_dir().join("fixtures-tts/no-such-model"), Flavor::Chatterbox) {
        Err(e) => assert_eq!(e.code(), "MODEL_NOT_FOUND", "{e:?}"),
        Ok(_) => panic!("a missing folder loaded"),
    }
}
