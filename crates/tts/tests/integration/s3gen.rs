//! S3Gen flow (speech tokens to mel) against mlx-audio, run live on the TTS
//! fixtures by `__test__/ref/chatterbox_ref.py` (written by `node scripts/fixtures-tts.js`).
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use lm::weights::Weights;
use mlx::random::KeySequence;
use mlx::Array;
use tts::s3gen::{GenConds, S3GenConfig, S3GenFlow};

/// Largest allowed |ours - mlx-audio| over a mel (log-mel units).
const TOLERANCE: f32 = 1e-3;

/// MLX work from one test at a time (the runner uses threads).
static SERIAL: Mutex<()> = Mutex::new(());

fn fixture(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/fixtures-tts").join(name);
    for file in ["config.json", "model.safetensors", "conds.safetensors", "ref/flow.safetensors"] {
        assert!(dir.join(file).is_file(), "missing TTS fixture {}: run `node scripts/fixtures-tts.js`", dir.join(file).display());
    }
    dir
}

fn load_flow(dir: &Path) -> S3GenFlow {
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let cfg = S3GenConfig::from_config(&config, "config.json").unwrap();
    let mut w = Weights::load(dir, None, config.get("quantization").cloned()).unwrap();
    let flow = S3GenFlow::load(&mut w, &cfg).unwrap();
    // Everything under s3gen.flow. must have been used; the rest is other parts'.
    w.discard(|k| !k.starts_with("s3gen.flow."));
    w.finish().unwrap();
    flow
}

fn reference(dir: &Path, case: &str) -> std::collections::HashMap<String, Array> {
    let path = dir.join("ref").join(format!("{case}.safetensors"));
    assert!(path.is_file(), "missing reference {}: run `node scripts/fixtures-tts.js`", path.display());
    mlx::io::load_safetensors(&path).unwrap().0
}

fn tokens(a: &Array) -> Vec<u32> {
    a.to_vec::<i32>().unwrap().into_iter().map(|t| u32::try_from(t).unwrap()).collect()
}

fn max_abs_diff(got: &Array, want: &Array) -> f32 {
    assert_eq!(got.shape(), want.shape(), "mel shape");
    got.subtract(want).unwrap().abs().unwrap().max(&[], false).unwrap().item::<f32>().unwrap()
}

fn check(flow: &S3GenFlow, conds: &GenConds, ids: &[u32], finalize: bool, want: &Array, label: &str) {
    let start = std::time::Instant::now();
    let mel = flow.mel(ids, conds, finalize).unwrap();
    let diff = max_abs_diff(&mel, want);
    println!("{label}: {} tokens -> mel {:?}, max |diff| {diff:e} ({:.2?})", ids.len(), mel.shape(), start.elapsed());
    assert!(diff < TOLERANCE, "{label}: mel differs from mlx-audio by {diff}");
    assert_eq!(mel.dim(2) as usize, S3GenFlow::frames_for(ids.len(), finalize));
}

#[test]
fn flow_matches_mlx_audio() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Naming the BLAS also keeps this binary linked to OpenBLAS, as the addon is
    // (the reference ran on it; the wheel's reference BLAS is ~15x slower here).
    println!("BLAS: {}", mlx::info::blas_name().unwrap());
    // Half-precision weights: mlx-audio's encoder runs in float32 all the same.
    for name in ["chatterbox", "chatterbox-q4", "chatterbox-f16", "chatterbox-bf16"] {
        let dir = fixture(name);
        let flow = load_flow(&dir);
        let conds = GenConds::load(&dir.join("conds.safetensors")).unwrap();
        let r = reference(&dir, "flow");
        let ids = tokens(&r["speech_tokens"]);
        check(&flow, &conds, &ids, true, &r["mel"], &format!("{name} flow"));
        check(&flow, &conds, &ids, false, &r["mel_not_final"], &format!("{name} flow, finalize=false"));
        check_after_prompt(&flow, &conds, &ids, &r, name);
        for case in ["greedy", "sampled", "nocfg"] {
            let r = reference(&dir, case);
            check(&flow, &conds, &tokens(&r["speech_tokens_clean"]), true, &r["mel"], &format!("{name} {case}"));
        }
    }
}

/// `mel_after_prompt`'s keys: Chatterbox's guided flow draws nothing from them.
fn keys() -> KeySequence {
    KeySequence::new(0).unwrap()
}

/// Streamed chunks continue a recorded voice prompt (`prompt_cache`,
/// `mel_after_prompt`): that must equal mlx-audio's flow with the estimator's
/// attention cut so that prompt frames see only prompt frames (`mel_prefix`);
/// and making the cache stops between solver steps when asked to.
fn check_after_prompt(flow: &S3GenFlow, conds: &GenConds, ids: &[u32], r: &std::collections::HashMap<String, Array>, name: &str) {
    let cache = flow.prompt_cache(conds, &|| true).unwrap().expect("the fixture voice has two mel frames per prompt token");
    let mel = flow.mel_after_prompt(ids, conds, true, &cache, &mut keys()).unwrap();
    let diff = max_abs_diff(&mel, &r["mel_prefix"]);
    println!("{name}: prompt cache {} B, max |diff| {diff:e}", cache.bytes());
    assert!(diff < TOLERANCE, "{name}: mel after the prompt cache differs from mlx-audio's by {diff}");
    // The mask matters: the whole render (prompt frames see every frame) differs.
    assert!(max_abs_diff(&r["mel"], &r["mel_prefix"]) > 10.0 * TOLERANCE, "{name}: the two references are alike");

    // The fixtures have 2 solver steps: asked after the first, stopped after the second.
    let asked = std::cell::Cell::new(0);
    let stop_at_second = || {
        asked.set(asked.get() + 1);
        asked.get() < 2
    };
    let err = flow.prompt_cache(conds, &stop_at_second).err().expect("a stop must end the recording");
    assert_eq!(err.code(), "ABORTED", "{err}");
    assert_eq!(asked.get(), 2, "asked after each step until the stop");
}

#[test]
fn too_few_tokens_is_an_argument_error() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = fixture("chatterbox");
    let flow = load_flow(&dir);
    let conds = GenConds::load(&dir.join("conds.safetensors")).unwrap();
    // Without finalize the last 3 tokens are lookahead only: 3 tokens give no frames.
    let err = flow.mel(&[1, 2, 3], &conds, false).expect_err("no frames must be an error");
    assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
    // Ids past the vocabulary are clipped to its last entry, as mlx-audio does.
    let clipped = flow.mel(&[6560, 7, 9000], &conds, true).unwrap();
    let same = flow.mel(&[6560, 7, 6560], &conds, true).unwrap();
    assert_eq!(max_abs_diff(&clipped, &same), 0.0);
}

#[test]
fn conds_errors_name_file_and_key() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = fixture("chatterbox");
    let missing = dir.join("no-such-voice.safetensors");
    let err = GenConds::load(&missing).err().expect("missing file");
    assert_eq!(err.code(), "MODEL_NOT_FOUND");
    assert!(err.message().contains("no-such-voice.safetensors"), "{err}");

    let (all, _) = mlx::io::load_safetensors(&dir.join("conds.safetensors")).unwrap();
    let tmp = std::env::temp_dir().join(format!("s3gen-conds-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for (drop, reshape) in [("gen.embedding", false), ("gen.prompt_feat", true)] {
        let path = tmp.join("conds.safetensors");
        let bad_feat = all["gen.prompt_feat"].reshape(&[1, -1, 40]).unwrap();
        let kept: Vec<(&str, &Array)> = all
            .iter()
            .filter(|(k, _)| reshape || k.as_str() != drop)
            .map(|(k, v)| (k.as_str(), if reshape && k.as_str() == drop { &bad_feat } else { v }))
            .collect();
        mlx::io::save_safetensors(&path, &kept, &[]).unwrap();
        let err = GenConds::load(&path).err().expect("bad conds must fail");
        assert_eq!(err.code(), "INVALID_WEIGHTS", "{err}");
        assert!(err.message().contains(drop) && err.message().contains("conds.safetensors"), "{err}");
    }
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn config_reads_shrink_keys() {
    let v: serde_json::Value = serde_json::json!({ "s3gen_config": { "decoder_num_mid_blocks": 2, "n_timesteps": 3 } });
    let cfg = S3GenConfig::from_config(&v, "config.json").unwrap();
    assert_eq!(cfg, S3GenConfig { decoder_num_mid_blocks: 2, n_timesteps: 3, ..S3GenConfig::default() });
    assert_eq!(S3GenConfig::from_config(&serde_json::json!({}), "c").unwrap(), S3GenConfig::default());
    let err = S3GenConfig::from_config(&serde_json::json!({ "s3gen_config": { "n_timesteps": 0 } }), "config.json").err().unwrap();
    assert_eq!(err.code(), "INVALID_WEIGHTS");
    assert!(err.message().contains("s3gen_config.n_timesteps"), "{err}");
}

/// A prompt cache needs two prompt tokens (the encoder's convolutions read two
/// back); with fewer there is none and streaming runs the flow over the prompt.
/// After a cache, too few new tokens are an argument error as without one.
#[test]
fn prompt_cache_needs_two_prompt_tokens() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = fixture("chatterbox");
    let flow = load_flow(&dir);
    let conds = GenConds::load(&dir.join("conds.safetensors")).unwrap();
    let first = |n: usize| GenConds {
        prompt_tokens: conds.prompt_tokens[..n].to_vec(),
        prompt_feat: conds.prompt_feat.slice_axis(1, 0, 2 * n as i32).unwrap(),
        embedding: conds.embedding.clone(),
    };
    assert!(flow.prompt_cache(&first(1), &|| true).unwrap().is_none());
    let two = first(2);
    let cache = flow.prompt_cache(&two, &|| true).unwrap().expect("two prompt tokens make a cache");
    let mel = flow.mel_after_prompt(&[5, 7, 9, 11], &two, false, &cache, &mut keys()).unwrap();
    assert_eq!(mel.dim(2) as usize, S3GenFlow::frames_for(4, false));
    let err = flow.mel_after_prompt(&[5, 7, 9], &two, false, &cache, &mut keys()).expect_err("no frames must be an error");
    assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
}

/// A cloned voice's prompt mel may hold one frame more than two per prompt token (what
/// mlx-audio's `embed_ref` leaves for an odd mel): its cache is the cache of its tokens'
/// frames, so it streams from a cache, with the same mel as the voice without that frame.
#[test]
fn an_odd_prompt_mel_caches_its_tokens_frames() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = fixture("chatterbox");
    let flow = load_flow(&dir);
    let conds = GenConds::load(&dir.join("conds.safetensors")).unwrap();
    let n = conds.prompt_tokens.len() - 1;
    let with_frames = |frames: i32| GenConds {
        prompt_tokens: conds.prompt_tokens[..n].to_vec(),
        prompt_feat: conds.prompt_feat.slice_axis(1, 0, frames).unwrap(),
        embedding: conds.embedding.clone(),
    };
    let even = with_frames(2 * n as i32);
    let odd = with_frames(2 * n as i32 + 1);
    let even_cache = flow.prompt_cache(&even, &|| true).unwrap().expect("an even voice makes a cache");
    let odd_cache = flow.prompt_cache(&odd, &|| true).unwrap().expect("an odd voice makes a cache");
    let ids = [5, 7, 9, 11, 13, 15];
    let want = flow.mel_after_prompt(&ids, &even, true, &even_cache, &mut keys()).unwrap();
    let got = flow.mel_after_prompt(&ids, &odd, true, &odd_cache, &mut keys()).unwrap();
    assert_eq!(got.shape(), want.shape());
    assert_eq!(max_abs_diff(&got, &want), 0.0);
    // Fewer frames than the tokens': no cache.
    assert!(flow.prompt_cache(&with_frames(2 * n as i32 - 1), &|| true).unwrap().is_none());
}
