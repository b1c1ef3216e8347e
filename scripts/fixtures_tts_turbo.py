"""Write the Chatterbox Turbo test fixture and its mlx-audio reference: a shrunk Turbo with
seeded random weights, saved as a checkpoint folder, then run through mlx-audio's own
ChatterboxTurboTTS.generate.

Usage: fixtures_tts_turbo.py OUT_DIR            (OUT_DIR/chatterbox-turbo, with ref/)
       fixtures_tts_turbo.py --full OUT_DIR     (benchmarks: one full-size folder, no ref/)

The model is mlx-audio's own (mlx_audio.tts.models.chatterbox_turbo), whose constructors
hard-code the real sizes; the fixture shrinks it through config.json keys that mlx-audio does
not read, mapped here onto its classes (the Rust port reads the same keys; defaults are the
real model's):

  t3_config.text_tokens_dict_size  -> T3Config(text_tokens_dict_size=) (50276: GPT-2's
                                      vocabulary; here the fixture tokenizer's)
  t3_config.gpt2_config.<key>      -> GPT2Config(<key>=) of T3's backbone, the dict
                                      create_gpt2_config returns (n_layer 24 -> 2,
                                      n_positions 8196 -> 1024, vocab_size 50276 -> 8: the
                                      backbone's own token table is never used)
  s3gen_config.*                   -> as fixtures_tts.py's S3GEN_SHRINK (encoder and
                                      estimator depths, HiFT width); the up-sampled conformer
                                      blocks, a fixed 4 in mlx-audio's Turbo encoder, are cut
                                      to encoder_num_up_blocks after construction

Everything else is the real Turbo: GPT-2 hidden 1024 with 16 heads, speech vocabulary 6563,
a 375-token reference clip in the voice, the meanflow flow estimator (time_embed_mixer), 2
Euler steps. The tokenizer is a small byte-level BPE (GPT-2's kind) learned from the English
fixtures' corpus. Weights: fixtures_tts.random_weights' roles; the stop row of the speech
head points along GPT-2 position STOP_POSITION, TURBO_STOP_GAIN long, with a stop bias of
TURBO_STOP_BIAS (after two random GPT-2 layers the position shows only weakly: the stop logit
peaks near that position, and the bias keeps it out of reach elsewhere, so the sampled case's
T3 ends by itself, on both sides, before its max_tokens), HiFT's
F0 is put in the voiced range.

ref/clone_<clip>.*: voice cloning (`clone_references`): for two clips written as
fixtures_voice.py writes its own (7 s at 24 kHz in 16 bits; 16 s at 44.1 kHz in float, past
S3Gen's 10 s and T3's 15 s), what ChatterboxTurboTTS.prepare_conditionals(samples, rate) makes
(`clone_<clip>.safetensors`: the tensors a Turbo conds.safetensors holds), then one seeded
generate with that voice (`clone_<clip>_speech.*`, as the sampled case below). `clip_<clip>`
holds the samples (`mono`, as our WAV reader gives them) and the clip at 24 kHz before loudness
normalisation (`wav24`); clone.json the clips, mlx_audio.dsp.integrated_loudness of each
`wav24`, and that of `wav24` times QUIET_GAIN (-inf: every block under the -70 LUFS gate, which
norm_loudness then leaves as it is). The S3 tokenizer is fixtures_voice.py's seeded one, saved
under ../hub as the Hugging Face cache holds it.

ref/sampled.{json,safetensors}: one ChatterboxTurboTTS.generate call after
mx.random.seed(SEED) (every draw in mlx-audio's order: T3's categorical draws, the meanflow
noise, HiFT's source), recording with wrappers on mlx-audio's own functions:
  text_tokens [L], speech_tokens [N] (what inference_turbo returned), mel [1, 80, F] (S3Gen's
  flow output), wav [S] (what generate yields).
"""

import contextlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import mlx.core as mx  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixtures_tts import (  # noqa: E402
    F0_BIAS,
    HIFT_LOG_MAG_BIAS,
    S3GEN_SHRINK,
    SEED,
    STOP_GAIN,
    STOP_POSITION_BOOST,
    TOKENIZER_CORPUS,
    _forced_kwargs,
    random_conds,
    random_weights,
)

import mlx_audio.tts.models.chatterbox_turbo.models.s3gen.s3gen as s3gen_module  # noqa: E402
import mlx_audio.tts.models.chatterbox_turbo.models.t3.t3 as t3_module  # noqa: E402
from mlx_audio.tts.models.chatterbox_turbo import (  # noqa: E402
    ChatterboxTurboTTS,
    T3Config,
)
from mlx_audio.tts.models.chatterbox_turbo.models.t3.gpt2 import GPT2Config  # noqa: E402

GPT2_SHRINK = {"n_layer": 2, "n_positions": 1024, "vocab_size": 8}
TEXT_VOCAB = 384
# Absolute GPT-2 position (speaker 1 + clip 375 + text + speech) at which T3 emits stop.
STOP_POSITION = 430
# The stop row's length (fixtures_tts.STOP_GAIN times 3) and the stop token's bias: with the
# sampled case's draws the stop logit reaches about 3 * 9.9 - 13 = 16.6 at speech token 49
# (the others' best: 12.4) and at most 7 before (module docstring).
TURBO_STOP_GAIN = 3 * STOP_GAIN
TURBO_STOP_BIAS = -13.0
PROMPT_TOKENS = 375
# Computed at construction by mlx-audio, never in a checkpoint (its from_local's list).
COMPUTED = {"s3gen.encoder.embed.pos_enc.pe", "s3gen.encoder.up_embed.pos_enc.pe", "s3gen.mel2wav.stft_window", "s3gen.trim_fade"}
CASES = [
    {
        "name": "sampled",
        "text": "Hello world, this is a test.",
        "seed": 7,
        "options": {"temperature": 0.8, "top_k": 1000, "top_p": 0.95, "repetition_penalty": 1.2, "max_tokens": 60},
    },
]


def fixture_config() -> dict:
    return {
        "model_type": "chatterbox_turbo",
        "t3_config": {"text_tokens_dict_size": TEXT_VOCAB, "gpt2_config": dict(GPT2_SHRINK)},
        "s3gen_config": {k: v for k, v in S3GEN_SHRINK.items() if k != "n_timesteps"},
    }


def full_config() -> dict:
    return {"model_type": "chatterbox_turbo"}


@contextlib.contextmanager
def _gpt2_overrides(overrides):
    original = t3_module.create_gpt2_config
    t3_module.create_gpt2_config = lambda: GPT2Config(**{**original().__dict__, **overrides})
    try:
        yield
    finally:
        t3_module.create_gpt2_config = original


def build_model(config: dict) -> ChatterboxTurboTTS:
    """mlx-audio's Turbo for a config.json dict (module docstring: the shrink keys)."""
    t3 = dict(config.get("t3_config") or {})
    gpt2 = t3.pop("gpt2_config", None) or {}
    s3gen = dict(config.get("s3gen_config") or {})
    up_blocks = s3gen.pop("encoder_num_up_blocks", None)
    by_class = {}
    args = {
        "encoder_num_blocks": ("UpsampleConformerEncoder", "num_blocks"),
        "decoder_n_blocks": ("ConditionalDecoder", "n_blocks"),
        "decoder_num_mid_blocks": ("ConditionalDecoder", "num_mid_blocks"),
        "hift_base_channels": ("HiFTGenerator", "base_channels"),
    }
    for key, value in s3gen.items():
        class_name, arg = args[key]
        by_class.setdefault(class_name, {})[arg] = value
    hp = T3Config.turbo()
    for key, value in t3.items():
        setattr(hp, key, value)
    turbo = T3Config.__dict__["turbo"]
    with contextlib.ExitStack() as stack:
        stack.enter_context(_gpt2_overrides(gpt2))
        for class_name, kwargs in by_class.items():
            stack.enter_context(_forced_kwargs(s3gen_module, class_name, **kwargs))
        # The constructor builds T3 from T3Config.turbo() (a T3 passed in would be taken
        # for a config dict: mlx modules are dicts).
        T3Config.turbo = classmethod(lambda cls: hp)
        stack.callback(setattr, T3Config, "turbo", turbo)
        model = ChatterboxTurboTTS(config)
    if up_blocks is not None:
        model.s3gen.encoder.up_encoders = model.s3gen.encoder.up_encoders[:up_blocks]
    return model


def turbo_weights(model: ChatterboxTurboTTS, seed: int, stop_shaped: bool = True) -> dict:
    """Seeded values by fixtures_tts.random_weights' roles, then the stop row and HiFT's F0.
    `stop_shaped` false (the full-size benchmark model): the stop row STOP_GAIN long and no stop
    bias, as that model has always had them."""
    params = {k: v for k, v in tree_flatten(model.parameters()) if k not in COMPUTED}
    weights = random_weights(params, seed, steer=False)
    # Only the shaped tensors go through numpy (the full-size model is ~3 GB).
    shaped = ["t3.tfmr.wpe.weight", "t3.speech_head.weight", "t3.speech_head.bias", "s3gen.mel2wav.f0_predictor.classifier.bias"]
    shaped += ["s3gen.mel2wav.conv_post.conv.bias", "s3gen.mel2wav.conv_post.conv.weight"]
    out = {k: np.array(weights[k]) for k in shaped}
    stop = T3Config.turbo().stop_speech_token
    wpe = out["t3.tfmr.wpe.weight"]
    wpe[STOP_POSITION] *= STOP_POSITION_BOOST
    gain = TURBO_STOP_GAIN if stop_shaped else STOP_GAIN
    out["t3.speech_head.weight"][stop] = wpe[STOP_POSITION] / np.linalg.norm(wpe[STOP_POSITION]) * np.float32(gain)
    if stop_shaped:
        out["t3.speech_head.bias"][stop] = TURBO_STOP_BIAS
    out["s3gen.mel2wav.f0_predictor.classifier.bias"][:] = F0_BIAS
    post = out["s3gen.mel2wav.conv_post.conv.bias"]
    post[: post.shape[0] // 2] += HIFT_LOG_MAG_BIAS
    out["s3gen.mel2wav.conv_post.conv.weight"] *= np.float32(0.5)
    weights.update({k: mx.array(v) for k, v in out.items()})
    return weights


def tokenizer_files(out: Path):
    """A byte-level BPE tokenizer.json (GPT-2's layout: ByteLevel pre-tokenizer, decoder and
    post-processor, <|endoftext|> special) of TEXT_VOCAB ids, and the tokenizer_config.json
    that lets transformers' AutoTokenizer read it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=TEXT_VOCAB, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator([line for line in TOKENIZER_CORPUS.splitlines() if line.strip()], trainer)
    assert tok.get_vocab_size() <= TEXT_VOCAB, tok.get_vocab_size()
    tok.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "model_max_length": 1024}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def turbo_conds(seed: int, prompt_tokens: int) -> dict:
    """The built-in voice as Turbo's conds.safetensors holds it (no emotion_adv), with a
    PROMPT_TOKENS-token reference clip for T3 (Turbo's speech_cond_prompt_len)."""
    conds = random_conds(seed, prompt_tokens)
    del conds["t3.emotion_adv"]
    rng = np.random.default_rng(seed + 100)
    conds["t3.cond_prompt_speech_tokens"] = mx.array(rng.integers(0, 6561, (1, PROMPT_TOKENS)).astype(np.int32))
    return conds


def write_folder(out: Path, config: dict, prompt_tokens: int = 20, stop_shaped: bool = True) -> ChatterboxTurboTTS:
    out.mkdir(parents=True)
    mx.random.seed(SEED)
    model = build_model(config)
    weights = turbo_weights(model, SEED, stop_shaped)
    model.load_weights(list(weights.items()))
    mx.eval(model.parameters())
    model.eval()
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    mx.save_safetensors(str(out / "conds.safetensors"), turbo_conds(SEED + 1, prompt_tokens))
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tokenizer_files(out)
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"  {out.name}: {len(weights)} tensors, {size / 2**20:.1f} MiB", file=sys.stderr)
    return model


def load_reference(folder: Path, model: ChatterboxTurboTTS) -> ChatterboxTurboTTS:
    """The tokenizer and built-in voice as mlx-audio's post_load_hook reads them."""
    return ChatterboxTurboTTS.post_load_hook(model, folder)


def load_folder(folder: Path) -> ChatterboxTurboTTS:
    """A Turbo folder as mlx-audio's loader reads it (the model built by build_model for the
    shrink keys, its load_weights, post_load_hook): for the benchmarks."""
    model = build_model(json.loads((folder / "config.json").read_text()))
    model.load_weights(list(mx.load(str(folder / "model.safetensors")).items()))
    model.eval()
    return load_reference(folder, model)


def run_case(model: ChatterboxTurboTTS, case: dict, ref: Path):
    seen = {}
    inference = model.t3.inference_turbo
    tokenizer = model.tokenizer

    def recording_inference(*args, **kwargs):
        seen["text_tokens"] = np.array(kwargs["text_tokens"]).reshape(-1)
        out = inference(*args, **kwargs)
        seen["speech_tokens"] = np.array(out).reshape(-1)
        return out

    s3_call = type(model.s3gen).__call__

    def recording_s3(self, *args, **kwargs):
        out = s3_call(self, *args, **kwargs)
        seen["mel"] = np.array(out)
        return out

    model.t3.inference_turbo = recording_inference
    type(model.s3gen).__call__ = recording_s3
    try:
        mx.random.seed(case["seed"])
        results = list(model.generate(case["text"], **case["options"]))
    finally:
        del model.t3.inference_turbo
        type(model.s3gen).__call__ = s3_call
    assert len(results) == 1, "one piece of text"
    wav = np.array(results[0].audio).reshape(-1)
    tokens = seen["speech_tokens"]
    assert np.isfinite(wav).all() and np.abs(wav).max() < 5, "wav out of range"
    assert len(set(tokens.tolist())) > len(tokens) // 2, f"speech tokens too repetitive: {tokens}"
    print(f"  {case['name']}: {len(seen['text_tokens'])} text tokens, {len(tokens)} speech tokens, {wav.size} samples, peak {np.abs(wav).max():.3f}", file=sys.stderr)
    arrays = {
        "text_tokens": mx.array(seen["text_tokens"].astype(np.int32)),
        "speech_tokens": mx.array(tokens.astype(np.int32)),
        "mel": mx.array(seen["mel"]),
        "wav": mx.array(wav),
    }
    mx.save_safetensors(str(ref / f"{case['name']}.safetensors"), arrays)
    meta = {k: v for k, v in case.items()}
    meta["speech_tokens"] = tokens.tolist()
    meta["text_tokens"] = seen["text_tokens"].tolist()
    meta["samples"] = int(wav.size)
    (ref / f"{case['name']}.json").write_text(json.dumps(meta, indent=1) + "\n")
    del tokenizer


def main(out_dir: str):
    t0 = time.time()
    folder = Path(out_dir) / "chatterbox-turbo"
    model = write_folder(folder, fixture_config())
    model = load_reference(folder, model)
    ref = folder / "ref"
    ref.mkdir()
    for case in CASES:
        run_case(model, case, ref)
    clone_references(model, folder.parent / "hub", ref)
    from importlib.metadata import version

    (ref / "meta.json").write_text(json.dumps({"mlx": version("mlx"), "mlx-audio": version("mlx-audio")}) + "\n")
    print(f"  turbo fixture written in {time.time() - t0:.1f} s", file=sys.stderr)


# name, rate, seconds, channels, format, bits (fixtures_voice.CLIPS' layout)
CLONE_CLIPS = [("pcm16_24k_mono", 24000, 7.0, 1, "int", 16), ("float32_44k_mono", 44100, 16.0, 1, "float", 32)]
CLONE_TEXT = "Hello there, this is a cloned voice."
CLONE_OPTIONS = dict(CASES[0]["options"], max_tokens=30)
QUIET_GAIN = 1e-5


def clone_references(model: ChatterboxTurboTTS, hub: Path, ref: Path):
    """The voice-cloning references (module docstring)."""
    from fixtures_voice import S3TOK_COMMIT, quantize, synth, wav_bytes, write_s3_tokenizer

    from mlx_audio.dsp import integrated_loudness
    from mlx_audio.utils import resample_audio

    model._s3tokenizer = write_s3_tokenizer(hub)
    meta = {"tokenizer_commit": S3TOK_COMMIT, "quiet_gain": QUIET_GAIN, "clips": {}}
    for i, (name, rate, seconds, channels, fmt, bits) in enumerate(CLONE_CLIPS):
        stored, mono = quantize(synth(rate, seconds, channels, 200 + i), fmt, bits)
        (ref / f"{name}.wav").write_bytes(wav_bytes(stored, rate, fmt, bits))
        # prepare_conditionals' first steps, to check the loudness measure on its own.
        wav24 = np.asarray(resample_audio(mono, rate, 24000), dtype=np.float32) if rate != 24000 else mono
        loudness = integrated_loudness(wav24, 24000)
        quiet = wav24 * np.float32(QUIET_GAIN)
        assert integrated_loudness(quiet, 24000) == -np.inf, "the quiet clip passes the -70 LUFS gate"
        assert model.norm_loudness(quiet, 24000) is quiet, "norm_loudness changed a clip of -inf loudness"
        mx.save_safetensors(str(ref / f"clip_{name}.safetensors"), {"mono": mx.array(mono), "wav24": mx.array(wav24)})

        model.prepare_conditionals(mono, sample_rate=rate)
        t3 = model._conds.t3
        assert t3.emotion_adv is None, "Turbo's T3 takes no emotion input"
        tensors = {"t3.speaker_emb": t3.speaker_emb, "t3.cond_prompt_speech_tokens": t3.cond_prompt_speech_tokens}
        tensors.update({f"gen.{k}": v for k, v in model._conds.gen.items()})
        mx.save_safetensors(str(ref / f"clone_{name}.safetensors"), tensors)
        meta["clips"][name] = {"rate": rate, "seconds": seconds, "samples": int(mono.size), "loudness": loudness,
                               "shapes": {k: list(v.shape) for k, v in tensors.items()},
                               "dtypes": {k: str(v.dtype) for k, v in tensors.items()}}
        print(f"  clone {name}: {loudness:.2f} LUFS, {tensors['gen.prompt_token'].shape[1]} S3Gen tokens, "
              f"{tensors['t3.cond_prompt_speech_tokens'].shape[1]} T3 tokens", file=sys.stderr)
        # generate(ref_audio=...) would make the same conditionals again: generate with them.
        run_case(model, {"name": f"clone_{name}_speech", "text": CLONE_TEXT, "seed": 11 + i, "options": CLONE_OPTIONS}, ref)
    (ref / "clone.json").write_text(json.dumps(meta, indent=1) + "\n")


def write_full(out_dir: str):
    """A full-size Turbo (the real architecture, float32) with seeded random weights, for
    benchmarks; its voice has S3Gen's real 10 s reference (250 tokens). The tokenizer is the
    fixture's, with the real 50276-row text table (ids past it are simply never used)."""
    t0 = time.time()
    folder = Path(out_dir)
    write_folder(folder, full_config(), prompt_tokens=250, stop_shaped=False)
    print(f"  {folder.name} written in {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--full"] and len(args) == 2:
        write_full(args[1])
    elif len(args) == 1 and not args[0].startswith("--"):
        main(args[0])
    else:
        sys.exit("usage: fixtures_tts_turbo.py [--full] OUT_DIR")
