//! Turbo's streamed chunks are its whole render's computation over their own window
//! (docs/speech.md, Streaming): the first chunk of a `ChunkVocoder` is the meanflow mel of
//! its tokens, unfinalized, vocoded and faded in with the same keys, less the samples held
//! back for the cross-fade (the overlap's 8 frames less the 60 samples Turbo's vocoder gives
//! short); the chunks join to a whole render's length. With the prompt cache and without.
//! On the Turbo fixture (`ensureTurboFixture` in scripts/fixtures-tts.js: `npm test`'s setup).
use std::path::PathBuf;

use lm::weights::Weights;
use mlx::random::KeySequence;
use tts::config::ChatterboxConfig;
use tts::hift::{fade_in, Hift, HiftConfig};
use tts::s3gen::{turbo_names, GenConds, PromptCache, S3GenConfig, S3GenFlow};
use tts::streaming::{ChunkVocoder, StreamSchedule};

const SILENCE: [u32; 3] = [4299; 3];

fn fixture() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/fixtures-tts-turbo/chatterbox-turbo");
    for file in ["config.json", "model.safetensors", "conds.safetensors", "ref/sampled.json"] {
        assert!(
            dir.join(file).is_file(),
            "missing Turbo fixture {}: npm test's setup writes it (scripts/fixtures-tts.js ensureTurboFixture)",
            dir.join(file).display()
        );
    }
    dir
}

/// The fixture's flow, vocoder, voice and the first `n` speech tokens of its sampled case.
fn load(n: usize) -> (S3GenFlow, Hift, GenConds, Vec<u32>) {
    let dir = fixture();
    let config = ChatterboxConfig::from_dir(&dir).unwrap();
    let flow_cfg = S3GenConfig::turbo_from_config(&config.raw, "config.json").unwrap();
    let hift_cfg = HiftConfig { turbo: true, ..HiftConfig::from_config_json(&config.raw).unwrap() };
    let mut w = Weights::load(&dir, None, config.quantization()).unwrap();
    turbo_names::rename(&mut w).unwrap();
    let flow = S3GenFlow::load(&mut w, &flow_cfg).unwrap();
    let hift = Hift::load(&mut w, &hift_cfg).unwrap();
    let conds = GenConds::load(&dir.join("conds.safetensors")).unwrap();
    let meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("ref/sampled.json")).unwrap()).unwrap();
    let tokens: Vec<u32> =
        meta["speech_tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).filter(|&t| t < 6561).take(n).collect();
    assert_eq!(tokens.len(), n, "the fixture's sampled case has {n} speech tokens");
    (flow, hift, conds, tokens)
}

fn check(flow: &S3GenFlow, hift: &Hift, conds: &GenConds, tokens: &[u32], cache: Option<&PromptCache>) {
    let label = if cache.is_some() { "with the prompt cache" } else { "without" };
    let schedule = StreamSchedule { first_chunk: 10, chunk: 50, context: 50 };
    let mut vocoder = ChunkVocoder::new(flow, hift, conds, cache, schedule, KeySequence::new(5).unwrap());
    assert!(vocoder.ready(13) && !vocoder.ready(12));
    let first = vocoder.chunk(&tokens[..13], false).unwrap();

    // The same window rendered whole, with the same keys: 20 frames of mel.
    let mut keys = KeySequence::new(5).unwrap();
    let mel = match cache {
        Some(c) => flow.mel_after_prompt(&tokens[..13], conds, false, c, &mut keys).unwrap(),
        None => flow.mel_meanflow(&tokens[..13], conds, false, &mut keys).unwrap(),
    };
    assert_eq!(mel.dim(2), 20, "{label}: mel frames");
    let (audio, _) = hift.inference(&mel, None, &mut keys).unwrap();
    let audio = fade_in(&audio).unwrap().flatten().unwrap().to_vec::<f32>().unwrap();
    assert_eq!(audio.len(), 20 * 480 - 60, "{label}: Turbo's vocoder gives 60 samples short of 480 a frame");
    assert_eq!(first.len(), 12 * 480, "{label}: the first chunk holds back 8 frames' samples less those 60");
    assert_eq!(first[..], audio[..first.len()], "{label}: the first chunk is its window's render");

    let rest = vocoder.chunk(&[tokens, &SILENCE].concat(), true).unwrap();
    let whole = 2 * (tokens.len() + SILENCE.len()) * 480 - 60;
    assert_eq!(first.len() + rest.len(), whole, "{label}: the chunks join to a whole render's length");
    assert!(rest.iter().all(|x| x.is_finite()));
}

#[test]
fn turbo_chunks_are_their_windows_render() {
    let (flow, hift, conds, tokens) = load(16);
    check(&flow, &hift, &conds, &tokens, None);
    let cache = flow.prompt_cache(&conds, &|| true).unwrap().expect("the fixture voice has two mel frames per prompt token");
    check(&flow, &hift, &conds, &tokens, Some(&cache));
}
