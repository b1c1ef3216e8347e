"""Reference dumps of mlx-audio's Chatterbox pipeline, run live on the TTS fixtures.

Usage: chatterbox_ref.py FIXTURE_DIR [FIXTURE_DIR ...]

For each fixture folder (written by scripts/fixtures_tts.py) this loads the model the way
mlx-audio's loader does (mlx_audio.utils.base_load_model + Model.post_load_hook, with the model
built by fixtures_tts.build_model because of the shrink keys), then writes FIXTURE_DIR/ref/:

  <case>.safetensors, <case>.json   for the generation cases in CASES, each from ONE
      Model.generate call after mx.random.seed(seed), so every random draw (T3 sampling, then
      HiFT's source) happens in mlx-audio's order. Intermediates are recorded by wrapping
      mlx-audio's own functions on the instance, never by redoing the math:
        text_tokens [L] int32         punc_norm + tokenizer, with [START]/[STOP] (CFG row 0)
        prefill_embeds [B, P, 1024]   T3 prompt embeddings [cond | text | BOS | BOS]
        cond_emb [1, C, 1024]         T3 conditioning (speaker, perceiver, emotion)
        step0_logits [1, 8194]        first step's speech logits after CFG, before processors
        step0_processed_logits [1, 8194]  the same after the repetition penalty
        speech_tokens [N] int32       everything T3 returned: leading start token, stop if hit
        speech_tokens_clean [M] int32 after drop_invalid_tokens and the < 6561 filter
        mel [1, 80, 2M]               S3Gen flow output (finalize=True)
        wav_raw [S]                   HiFT output before the fade-in
        wav [S]                       the waveform Model.generate yields
  hift.*   S3Token2Wav.hift_inference(mel of greedy) after mx.random.seed(HIFT_SEED):
           mel, f0 (the F0 predictor's output, deterministic), source, wav_raw (no fade)
  flow.*   S3Token2Wav.flow_inference(speech_tokens_clean of greedy, finalize=True): mel, the
           solver's inputs (z, mu, spks, cond, full-length output feat) and mel_not_final
           (finalize=False), and mel_prefix: the same call with the voice prompt's tokens and
           frames as if the prompt were alone (at every encoder layer its positions hold what
           the prompt alone gives them, and the estimator's attention mask,
           `add_optional_chunk_mask`, is cut so that prompt frames attend to prompt frames
           only), which is what mlx-node's streamed chunks compute from a prompt cache
  punc_norm.json   mlx-audio's punc_norm on tricky inputs
  meta.json        versions
"""

import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from fixtures_tts import build_model  # noqa: E402

import mlx_audio.tts.models.chatterbox.s3gen.decoder as decoder_module  # noqa: E402
import mlx_audio.tts.models.chatterbox.t3.t3 as t3_module  # noqa: E402
from mlx_audio.tts.models.chatterbox.chatterbox import (  # noqa: E402
    SPEECH_VOCAB_SIZE,
    Model,
    drop_invalid_tokens,
    punc_norm,
)
from mlx_audio.utils import apply_quantization, load_weights  # noqa: E402

CASES = [
    dict(
        name="greedy",
        text="Hello world, this is a test.",
        temperature=0.0,
        cfg_weight=0.5,
        exaggeration=0.5,
        repetition_penalty=1.2,
        min_p=0.05,
        top_p=1.0,
        max_new_tokens=48,
        seed=0,
    ),
    dict(
        name="sampled",
        text="The quick brown fox jumps over the lazy dog!",
        temperature=0.8,
        cfg_weight=0.5,
        exaggeration=0.7,
        repetition_penalty=1.2,
        min_p=0.05,
        top_p=0.9,
        max_new_tokens=48,
        seed=42,
    ),
    dict(
        name="nocfg",
        text="hi there",
        temperature=0.8,
        cfg_weight=0.0,
        exaggeration=0.3,
        repetition_penalty=1.2,
        min_p=0.05,
        top_p=1.0,
        max_new_tokens=32,
        seed=7,
    ),
]
HIFT_SEED = 7

PUNC_NORM_INPUTS = [
    "",
    "hello world",
    "Hello    world,   how  are\tyou?",
    "Wait... what",
    "Wait...",
    "One; two;",
    "Wait\u2026 what?",
    "Note: this matters",
    "This - that - other",
    "First; second; third",
    "An em\u2014dash and an en\u2013dash",
    "Space before , comma.",
    "\u201cCurly double\u201d and \u2018curly single\u2019",
    "No final punctuation",
    "Ends with a dot.",
    "Ends with a bang!",
    "Ends with a question?",
    "Ends with a dash-",
    "Ends with a comma,",
    "\u4f60\u597d\u3002",
    "\u4f60\u597d\uff1f",
    "\u4f60\u597d\uff01",
    "\u4f60\u597d\uff0c",
    "\u4f60\u597d\u3001",
    "Trailing spaces.   ",
    "   leading spaces",
    "\u00e9l\u00e8ve caf\u00e9 na\u00efve",
    "x",
    "Mixed ... and \u2026 and : and ; end",
]


def load_fixture(fixture_dir: Path) -> Model:
    """mlx_audio.utils.base_load_model's steps with build_model in place of Model(config)."""
    config = json.loads((fixture_dir / "config.json").read_text())
    model = build_model(config)
    weights = load_weights(fixture_dir)
    weights = model.sanitize(weights)
    apply_quantization(model, config, weights, getattr(model, "model_quant_predicate", None))
    model.load_weights(list(weights.items()), strict=True)
    mx.eval(model.parameters())
    model.eval()
    # post_load_hook also fetches the S3 speech tokenizer (only needed for voice cloning) from
    # the Hub; point it at an empty folder so that it skips it and loads the rest.
    import huggingface_hub

    real_download = huggingface_hub.snapshot_download
    with tempfile.TemporaryDirectory() as empty:
        huggingface_hub.snapshot_download = lambda *a, **k: empty
        try:
            with contextlib.redirect_stdout(sys.stderr):
                model = Model.post_load_hook(model, fixture_dir)
        finally:
            huggingface_hub.snapshot_download = real_download
    if (model.tokenizer is None and model.mtl_tokenizer is None) or model._conds is None:
        raise RuntimeError(f"{fixture_dir}: tokenizer or conds did not load")
    return model


@contextlib.contextmanager
def recording(model: Model):
    """Records intermediates of one Model.generate call (module docstring) by wrapping mlx-audio's
    functions on this model instance and in the T3 module; everything is restored afterwards."""
    rec = {}
    t3 = model.t3
    originals = dict(
        make_logits_processors=t3_module.make_logits_processors,
        make_sampler=t3_module.make_sampler,
    )

    def make_logits_processors(*args, **kwargs):
        def first(tokens, logits):
            # A copy: mlx-audio's repetition penalty then updates `logits` in place.
            rec.setdefault("step0_logits", mx.array(logits))
            return logits

        return [first] + originals["make_logits_processors"](*args, **kwargs)

    def make_sampler(*args, **kwargs):
        sampler = originals["make_sampler"](*args, **kwargs)

        def sample(logits):
            rec.setdefault("step0_processed_logits", logits)
            return sampler(logits)

        return sample

    def wrap(owner, name, record):
        method = getattr(owner, name)

        def wrapper(*args, **kwargs):
            out = method(*args, **kwargs)
            record(args, kwargs, out)
            return out

        setattr(owner, name, wrapper)
        return owner, name

    def on_context(args, kwargs, out):
        rec["text_tokens"] = kwargs["text_tokens"][0]
        rec["prefill_embeds"] = out

    def on_conditioning(args, kwargs, out):
        rec.setdefault("cond_emb", out[0:1])

    def on_inference(args, kwargs, out):
        rec["speech_tokens"] = out[0]

    def on_flow(args, kwargs, out):
        rec["speech_tokens_clean"] = kwargs["token"][0]
        rec["mel"] = out[0]

    def on_hift(args, kwargs, out):
        rec["wav_raw"] = out[0][0]

    wrapped = [
        wrap(t3, "_prepare_inference_context", on_context),
        wrap(t3, "prepare_conditioning", on_conditioning),
        wrap(t3, "inference", on_inference),
        wrap(model.s3gen.flow, "inference", on_flow),
        wrap(model.s3gen.mel2wav, "inference", on_hift),
    ]
    t3_module.make_logits_processors = make_logits_processors
    t3_module.make_sampler = make_sampler
    try:
        yield rec
    finally:
        for name, fn in originals.items():
            setattr(t3_module, name, fn)
        for owner, name in wrapped:
            delattr(owner, name)


def as_np(x):
    # Half-precision models record half-precision arrays: float32 holds them exactly.
    if isinstance(x, mx.array) and x.dtype in (mx.float16, mx.bfloat16):
        x = x.astype(mx.float32)
    return np.array(x)


def run_case(model: Model, case: dict):
    opts = {k: v for k, v in case.items() if k not in ("name", "text", "seed")}
    with recording(model) as rec:
        mx.random.seed(case["seed"])
        result = next(model.generate(case["text"], verbose=False, **opts))
    wav = as_np(result.audio)
    arrays = {k: as_np(v) for k, v in rec.items()}
    arrays["wav"] = wav
    for k in ("text_tokens", "speech_tokens", "speech_tokens_clean"):
        arrays[k] = arrays[k].astype(np.int32)

    # The recorded pieces are consistent with each other and with the generate call.
    tokens = arrays["speech_tokens"]
    clean = as_np(drop_invalid_tokens(mx.array(tokens)))
    clean = clean[clean < SPEECH_VOCAB_SIZE]
    assert np.array_equal(clean, arrays["speech_tokens_clean"]), "flow input != cleaned T3 output"
    cfg = case["cfg_weight"] > 0
    text_rows = mx.array(np.stack([arrays["text_tokens"]] * (2 if cfg else 1)))
    mx.random.seed(case["seed"])
    again = as_np(
        model.t3.inference(
            t3_cond=model._conds.t3,
            text_tokens=text_rows,
            max_new_tokens=case["max_new_tokens"],
            temperature=case["temperature"],
            cfg_weight=case["cfg_weight"],
            repetition_penalty=case["repetition_penalty"],
            min_p=case["min_p"],
            top_p=case["top_p"],
        )
    )[0]
    assert np.array_equal(again, tokens), "T3 alone does not reproduce the generate call's tokens"
    fade = as_np(model.s3gen.trim_fade)
    raw = arrays["wav_raw"]
    assert raw.shape == wav.shape and np.array_equal(wav[len(fade):], raw[len(fade):])
    assert np.allclose(wav[: len(fade)], raw[: len(fade)] * fade, atol=1e-7)

    check_ranges(case["name"], arrays)
    meta = {
        "name": case["name"],
        "text": case["text"],
        "normalized_text": punc_norm(case["text"]),
        "seed": case["seed"],
        "options": opts,
        "sample_rate": model.sample_rate,
        "text_tokens": arrays["text_tokens"].tolist(),
        "speech_tokens": tokens.tolist(),
        "speech_tokens_clean": arrays["speech_tokens_clean"].tolist(),
        "stopped": bool(tokens[-1] == model.t3.hp.stop_speech_token),
    }
    return arrays, meta


def check_ranges(name, arrays):
    logits = arrays.get("step0_logits")
    if logits is not None:
        logits = logits.astype(np.float32)  # half-precision models' logits are half too
        assert 1.0 < logits.std() < 10.0, f"{name}: step-0 logits std {logits.std()}"
    mel = arrays["mel"]
    assert np.isfinite(mel).all() and np.abs(mel).max() < 20, f"{name}: mel out of range"
    for key in ("wav", "wav_raw"):
        if key in arrays:
            wav = arrays[key]
            assert np.isfinite(wav).all() and np.abs(wav).max() < 5, f"{name}: {key} out of range"


def run_hift(model: Model, mel: np.ndarray):
    mel = mx.array(mel)
    mx.random.seed(HIFT_SEED)
    wav, source = model.s3gen.hift_inference(mel)
    f0 = model.s3gen.mel2wav.f0_predictor(mel)
    arrays = {"mel": as_np(mel), "f0": as_np(f0), "source": as_np(source), "wav_raw": as_np(wav)[0]}
    check_ranges("hift", arrays)
    meta = {"name": "hift", "seed": HIFT_SEED, "input": "mel of case greedy", "sample_rate": model.sample_rate}
    return arrays, meta


def encoder_after_prompt(encoder, xs: mx.array, n: int) -> mx.array:
    """mlx-audio's encoder over the embedded tokens `xs` (1, T, D), the first `n` the
    voice prompt's, as a streamed chunk after a prompt cache sees them: at every layer
    the prompt's positions hold what the prompt alone gives them (its last tokens look
    ahead into zeros, its positions attend to each other only), and later positions
    read those. Built from the encoder's own modules, layer by layer: one pass over the
    prompt alone, one over everything whose prompt rows are replaced after each layer."""
    module = sys.modules[type(encoder).__module__]

    def prep(embed, x):
        masks = mx.ones((1, 1, x.shape[1]), dtype=mx.bool_)
        x, pos, masks = embed(x, masks)
        chunk = module.add_optional_chunk_mask(
            x, masks, encoder.use_dynamic_chunk, encoder.use_dynamic_left_chunk, 0, 0, -1
        )
        return x, (chunk, pos, masks)

    def splice(alone, full):
        return mx.concatenate([alone, full[:, alone.shape[1]:]], axis=1)

    def layers(blocks, alone, full, args_alone, args_full):
        for layer in blocks:
            next_alone = layer(alone, *args_alone)[0]
            full = splice(next_alone, layer(full, *args_full)[0])
            alone = next_alone
        return alone, full

    def up(x):
        y, _ = encoder.up_layer(mx.transpose(x, [0, 2, 1]), mx.array([x.shape[1]]))
        return mx.transpose(y, [0, 2, 1])

    alone, args_alone = prep(encoder.embed, xs[:, :n])
    full, args_full = prep(encoder.embed, xs)
    full = splice(alone, full)
    next_alone = encoder.pre_lookahead_layer(alone)
    full = splice(next_alone, encoder.pre_lookahead_layer(full))
    alone, full = layers(encoder.encoders, next_alone, full, args_alone, args_full)
    alone = up(alone)
    full = splice(alone, up(full))
    alone, args_alone = prep(encoder.up_embed, alone)
    full, args_full = prep(encoder.up_embed, full)
    full = splice(alone, full)
    alone, full = layers(encoder.up_encoders, alone, full, args_alone, args_full)
    return splice(encoder.after_norm(alone), encoder.after_norm(full))


def flow_with_prompt_prefix_mask(model: Model, speech: mx.array) -> mx.array:
    """flow_inference(finalize=True) as a stream chunk after a prompt cache sees it: the
    prompt's tokens and frames computed as if the prompt were alone (`encoder_after_prompt`;
    every estimator attention mask, `add_optional_chunk_mask`, cut so that the first P
    frames see only each other), later tokens and frames seeing all."""
    flow = model.s3gen.flow
    prompt_tokens = model._conds.gen["prompt_token"]
    prompt_frames = model._conds.gen["prompt_feat"].shape[1]
    full_mask = decoder_module.add_optional_chunk_mask
    encoder = flow.encoder

    def prefix_mask(xs, masks, *args):
        full = full_mask(xs, masks, *args)
        i = mx.arange(xs.shape[1])
        allowed = (i[None, :] < prompt_frames) | (i[:, None] >= prompt_frames)
        return full & allowed[None]

    def prompt_encoded_alone(token, token_len, streaming=False):
        assert not streaming
        _, lengths = encoder(token, token_len, streaming=streaming)
        return encoder_after_prompt(encoder, token, prompt_tokens.shape[1]), lengths

    decoder_module.add_optional_chunk_mask = prefix_mask
    flow.encoder = prompt_encoded_alone
    try:
        return model.s3gen.flow_inference(speech, ref_dict=model._conds.gen, finalize=True)
    finally:
        decoder_module.add_optional_chunk_mask = full_mask
        flow.encoder = encoder


def run_flow(model: Model, tokens: np.ndarray, expected_mel: np.ndarray):
    solver = model.s3gen.flow.decoder
    rec = {}
    solve_euler = solver.solve_euler

    def recording_solver(x, t_span, mu, mask, spks, cond):
        out = solve_euler(x, t_span=t_span, mu=mu, mask=mask, spks=spks, cond=cond)
        rec.update(z=x, mu=mu, spks=spks, cond=cond, feat=out)
        return out

    solver.solve_euler = recording_solver
    try:
        speech = mx.array(tokens)[None]
        mel = model.s3gen.flow_inference(speech, ref_dict=model._conds.gen, finalize=True)
        flow_rec = {k: as_np(v) for k, v in rec.items()}
        mel_not_final = model.s3gen.flow_inference(speech, ref_dict=model._conds.gen, finalize=False)
    finally:
        del solver.solve_euler
    mel_prefix = flow_with_prompt_prefix_mask(model, speech)
    arrays = {
        "speech_tokens": tokens.astype(np.int32),
        "mel": as_np(mel),
        "mel_not_final": as_np(mel_not_final),
        "mel_prefix": as_np(mel_prefix),
        **flow_rec,
    }
    assert np.array_equal(arrays["mel"], expected_mel), "flow_inference differs from the generate call's mel"
    check_ranges("flow", arrays)
    meta = {
        "name": "flow",
        "input": "speech_tokens_clean of case greedy",
        "finalize": True,
        "n_timesteps": model.s3gen.flow.n_timesteps,
        "speech_tokens": tokens.tolist(),
    }
    return arrays, meta


def save(out: Path, name: str, arrays: dict, meta: dict):
    meta = dict(meta, shapes={k: list(v.shape) for k, v in arrays.items()},
                dtypes={k: str(v.dtype) for k, v in arrays.items()})
    mx.save_safetensors(str(out / f"{name}.safetensors"), {k: mx.array(v) for k, v in arrays.items()})
    (out / f"{name}.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")


def write_refs(fixture_dir: Path):
    t0 = time.time()
    model = load_fixture(fixture_dir)
    out = fixture_dir / "ref"
    out.mkdir(exist_ok=True)
    results = {}
    for case in CASES:
        arrays, meta = run_case(model, case)
        save(out, case["name"], arrays, meta)
        results[case["name"]] = arrays
        print(
            f"  {fixture_dir.name}/{case['name']}: {len(meta['speech_tokens'])} speech tokens "
            f"({len(set(meta['speech_tokens_clean']))} distinct clean, stopped={meta['stopped']}), "
            f"step-0 logits std {arrays['step0_logits'].astype(np.float32).std():.2f}, "
            f"mel [{arrays['mel'].min():.2f}, {arrays['mel'].max():.2f}], "
            f"wav peak {np.abs(arrays['wav']).max():.3f}",
            file=sys.stderr,
        )
    greedy = results["greedy"]
    assert len(set(greedy["speech_tokens_clean"].tolist())) > 1, "greedy speech tokens are all the same"
    save(out, "hift", *run_hift(model, greedy["mel"]))
    save(out, "flow", *run_flow(model, greedy["speech_tokens_clean"], greedy["mel"]))
    punc = [{"input": s, "output": punc_norm(s)} for s in PUNC_NORM_INPUTS]
    (out / "punc_norm.json").write_text(json.dumps(punc, indent=2, ensure_ascii=False) + "\n")
    meta = {
        "mlx": mx.__version__,
        "mlx-audio": version("mlx-audio"),
        "numpy": np.__version__,
        "tokenizers": version("tokenizers"),
        "python": sys.version.split()[0],
        "fixture": fixture_dir.name,
        "cases": [c["name"] for c in CASES] + ["hift", "flow"],
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"  {fixture_dir.name}: references written in {time.time() - t0:.1f} s", file=sys.stderr)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: chatterbox_ref.py FIXTURE_DIR [FIXTURE_DIR ...]")
    dirs = [Path(arg) for arg in sys.argv[1:]]
    # One fixture at a time keeps MLX on about one core, so the fixtures are dealt over
    # processes (as scripts/fixtures.py deals its own); every case seeds its own draws, so a
    # fixture's references do not depend on which process writes them or after what.
    processes = int(os.environ.get("MLX_NODE_FIXTURE_PROCESSES") or min(2, os.cpu_count() or 1))
    if processes < 2 or len(dirs) < 2:
        for d in dirs:
            write_refs(d)
        return
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=processes, mp_context=ctx) as pool:
        for _ in pool.map(write_refs, dirs):
            pass


if __name__ == "__main__":
    main()
