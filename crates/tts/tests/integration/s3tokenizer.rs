//! The S3 speech tokenizer against mlx-audio's `S3TokenizerV2`, run by scripts/fixtures_voice.py
//! with seeded weights (a narrowed model: 128 wide, 2 heads, 2 blocks) saved as the Hugging Face
//! cache holds mlx-community/S3TokenizerV2: the tokens of each clip's S3Gen signal (10 s at most)
//! and T3's (6 s), through our WAV reader, resampling and mel. Then where the weights are found,
//! and every way they or a mel are refused.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use hub::{find_s3_tokenizer, HubError, S3_TOKENIZER};
use mlx::Array;
use tts::voice::{mel, read_wav, ReferenceSignals, S3TokenizerV2};

use crate::common;

fn fixtures() -> PathBuf {
    common::cache_dir().join("fixtures-voice")
}

fn references() -> serde_json::Value {
    let file = fixtures().join("s3tokenizer.json");
    common::require(&file);
    serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap()
}

fn config(vars: &[(&str, &Path)]) -> hub::Config {
    let map: HashMap<&str, String> = vars.iter().map(|(k, v)| (*k, v.display().to_string())).collect();
    hub::Config::from_vars(|k| map.get(k).cloned())
}

/// The fixture's weights file, found as mlx-audio finds it: `HF_HUB_CACHE` at its hub folder.
fn fixture_weights() -> PathBuf {
    find_s3_tokenizer(None, &config(&[("HF_HUB_CACHE", &fixtures().join("hub"))])).unwrap()
}

fn tokens_of(tok: &S3TokenizerV2, wav16: &[f32]) -> (i32, Vec<i32>) {
    let m = mel::s3_tokenizer_log_mel(wav16).unwrap();
    (m.dim(1), tok.tokens(&m).unwrap())
}

fn expected(clip: &serde_json::Value, which: &str) -> (i32, Vec<i32>) {
    let r = &clip[which];
    let tokens = r["tokens"].as_array().unwrap().iter().map(|t| t.as_i64().unwrap() as i32).collect();
    (r["mel_frames"].as_i64().unwrap() as i32, tokens)
}

#[test]
fn tokens_match_mlx_audio() {
    let refs = references();
    let t0 = Instant::now();
    let tok = S3TokenizerV2::load(&fixture_weights()).unwrap();
    println!("load: {:.2} s", t0.elapsed().as_secs_f64());
    let clips = refs["clips"].as_object().unwrap();
    assert_eq!(clips.len(), 5);
    for (name, clip) in clips {
        let signals = ReferenceSignals::new(&read_wav(&fixtures().join(format!("{name}.wav"))).unwrap());
        let t0 = Instant::now();
        let s3gen = tokens_of(&tok, &signals.wav16_from_24);
        let t3 = tokens_of(&tok, signals.wav16());
        println!("{name}: {} + {} tokens in {:.2} s", s3gen.1.len(), t3.1.len(), t0.elapsed().as_secs_f64());
        assert_eq!(s3gen, expected(clip, "s3gen"), "{name}: S3Gen's tokens (mel frames, tokens)");
        assert_eq!(t3, expected(clip, "t3"), "{name}: T3's tokens (mel frames, tokens)");
    }
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mlx-node-s3tok-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn fixture_tensors() -> HashMap<String, Array> {
    mlx::io::load_safetensors(&fixture_weights()).unwrap().0
}

fn save(name: &str, tensors: &HashMap<String, Array>) -> PathBuf {
    let path = tmp(name);
    let list: Vec<(&str, &Array)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    mlx::io::save_safetensors(&path, &list, &[]).unwrap();
    path
}

/// The names and conv layout of a PyTorch checkpoint converted from the ONNX model (what
/// mlx-audio's `sanitize` maps from), plus tensors it drops or the model ignores.
#[test]
fn pytorch_layout_loads_to_the_same_tokens() {
    let mut torch = HashMap::new();
    for (k, v) in fixture_tensors() {
        let is_conv = k.starts_with("encoder.conv") || k.contains("fsmn_block");
        let v = if is_conv && k.ends_with(".weight") { v.swapaxes(1, 2).unwrap() } else { v };
        let k = k.replace(".mlp.layers.", ".mlp.").replace("quantizer.fsq_codebook.", "quantizer._codebook.");
        torch.insert(k, v);
    }
    let extra = Array::zeros(&[3, 4], mlx::Dtype::Float32).unwrap();
    for k in ["encoder.positional_embedding", "onnx::Conv_1519", "encoder.freqs_cis", "quantizer._codebook.embed"] {
        torch.insert(k.to_string(), extra.clone());
    }
    assert!(torch.contains_key("encoder.blocks.1.mlp.2.weight") && torch.contains_key("quantizer._codebook.project_down.bias"));
    let path = save("torch.safetensors", &torch);
    let tok = S3TokenizerV2::load(&path).unwrap();
    let refs = references();
    let name = "pcm8_48k_mono";
    let signals = ReferenceSignals::new(&read_wav(&fixtures().join(format!("{name}.wav"))).unwrap());
    assert_eq!(tokens_of(&tok, signals.wav16()), expected(&refs["clips"][name], "t3"));
}

#[test]
fn found_in_the_hugging_face_cache() {
    let hub_dir = fixtures().join("hub");
    let commit = references()["commit"].as_str().unwrap().to_string();
    let file = hub_dir.join("models--mlx-community--S3TokenizerV2/snapshots").join(&commit).join("model.safetensors");
    assert_eq!(find_s3_tokenizer(None, &config(&[("HF_HUB_CACHE", &hub_dir)])).unwrap(), file);
    // HF_HOME's hub folder, and HF_HUB_CACHE before it.
    assert_eq!(find_s3_tokenizer(None, &config(&[("HF_HOME", &fixtures())])).unwrap(), file);
    let empty = tmp("empty-cache");
    std::fs::create_dir_all(&empty).unwrap();
    assert_eq!(find_s3_tokenizer(None, &config(&[("HF_HOME", &empty), ("HF_HUB_CACHE", &hub_dir)])).unwrap(), file);
    // ~/.cache/huggingface/hub.
    let home = tmp("home");
    let default_hub = home.join(".cache/huggingface");
    std::fs::create_dir_all(&default_hub).unwrap();
    let _ = std::fs::remove_file(default_hub.join("hub"));
    std::os::unix::fs::symlink(&hub_dir, default_hub.join("hub")).unwrap();
    let found = find_s3_tokenizer(None, &config(&[("HOME", &home)])).unwrap();
    assert_eq!(std::fs::canonicalize(found).unwrap(), std::fs::canonicalize(&file).unwrap());
    // Given explicitly: the file, or its folder.
    assert_eq!(find_s3_tokenizer(Some(&file), &config(&[])).unwrap(), file);
    assert_eq!(find_s3_tokenizer(Some(file.parent().unwrap()), &config(&[])).unwrap(), file);
}

/// The lookup's errors (`HubError`) and the loader's (`TtsError`) share the code.
fn not_found(code: &str, message: &str, needles: &[&str]) {
    assert_eq!(code, "MODEL_NOT_FOUND", "{message}");
    for n in needles {
        assert!(message.contains(n), "{n:?} not in {message}");
    }
}

fn lookup_not_found(explicit: Option<&Path>, config: &hub::Config, needles: &[&str]) {
    let err: HubError = find_s3_tokenizer(explicit, config).unwrap_err();
    not_found(err.code(), err.message(), needles);
}

#[test]
fn missing_weights_are_model_not_found() {
    let empty = tmp("no-tokenizer-cache");
    std::fs::create_dir_all(&empty).unwrap();
    let (file, repo, option) = ("model.safetensors", S3_TOKENIZER.repo, S3_TOKENIZER.option);
    lookup_not_found(None, &config(&[("HF_HUB_CACHE", &empty)]), &[file, repo, option, &empty.display().to_string()]);
    // No cache folder at all (no HOME either).
    lookup_not_found(None, &config(&[]), &[file, repo, option, "HF_HUB_CACHE"]);
    // A folder given without the file, and a path that does not exist.
    lookup_not_found(Some(&empty), &config(&[]), &[&empty.join("model.safetensors").display().to_string(), S3_TOKENIZER.option]);
    let nowhere = empty.join("nowhere.safetensors");
    lookup_not_found(Some(&nowhere), &config(&[]), &[&nowhere.display().to_string()]);
    let err = S3TokenizerV2::load(&nowhere).err().unwrap();
    not_found(err.code(), err.message(), &["nowhere.safetensors"]);
}

fn invalid_weights(tensors: &HashMap<String, Array>, file: &str, needles: &[&str]) {
    let err = S3TokenizerV2::load(&save(file, tensors)).err().unwrap();
    assert_eq!(err.code(), "INVALID_WEIGHTS", "{err}");
    for n in needles {
        assert!(err.message().contains(n), "{n:?} not in {err}");
    }
}

#[test]
fn bad_weights_are_invalid_weights() {
    let good = fixture_tensors();
    let mut t = good.clone();
    t.insert("encoder.blocks.1.attn.query.weight".into(), Array::zeros(&[128, 64], mlx::Dtype::Float32).unwrap());
    invalid_weights(&t, "misshaped.safetensors", &["\"encoder.blocks.1.attn.query.weight\"", "[128, 64]", "expected [128, 128]"]);
    let mut t = good.clone();
    t.remove("encoder.blocks.1.mlp.layers.2.bias");
    invalid_weights(&t, "missing.safetensors", &["\"encoder.blocks.1.mlp.layers.2.bias\"", "missing"]);
    let mut t = good.clone();
    t.insert("encoder.conv1.weight".into(), Array::zeros(&[100, 3, 128], mlx::Dtype::Float32).unwrap());
    invalid_weights(&t, "width.safetensors", &["\"encoder.conv1.weight\"", "[100, 3, 128]", "multiple of the head size 64"]);
    let mut t = good.clone();
    t.insert("encoder.conv2.weight".into(), Array::zeros(&[128, 5, 128], mlx::Dtype::Float32).unwrap());
    invalid_weights(&t, "conv2.safetensors", &["\"encoder.conv2.weight\"", "expected [128, 3, 128]"]);
    let mut t = good.clone();
    t.remove("encoder.conv1.weight");
    invalid_weights(&t, "noconv1.safetensors", &["\"encoder.conv1.weight\"", "missing"]);
    let t: HashMap<String, Array> = good.into_iter().filter(|(k, _)| !k.starts_with("encoder.blocks.")).collect();
    invalid_weights(&t, "noblocks.safetensors", &["encoder.blocks"]);
    let path = tmp("garbage.safetensors");
    std::fs::write(&path, b"not a safetensors file").unwrap();
    let err = S3TokenizerV2::load(&path).err().unwrap();
    assert_eq!(err.code(), "INVALID_WEIGHTS", "{err}");
    assert!(err.message().contains("garbage.safetensors"), "{err}");
}

#[test]
fn bad_mels_are_invalid_argument() {
    let tok = S3TokenizerV2::load(&fixture_weights()).unwrap();
    let cases: [(&[i32], &str); 4] =
        [(&[80, 100], "[80, 100]"), (&[128, 0], "[128, 0]"), (&[1, 128, 100], "[1, 128, 100]"), (&[128, 3001], "at most 3000 mel frames")];
    for (shape, needle) in cases {
        let err = tok.tokens(&Array::zeros(shape, mlx::Dtype::Float32).unwrap()).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
        assert!(err.message().contains(needle), "{needle:?} not in {err}");
    }
    // The longest it takes, 30 s: 750 tokens.
    assert_eq!(tok.tokens(&Array::zeros(&[128, 3000], mlx::Dtype::Float32).unwrap()).unwrap().len(), 750);
}
