"""Write the Chatterbox (text-to-speech) test fixtures: shrunk models with seeded random weights.

Usage: fixtures_tts.py [--stop-at N] OUT_DIR
       fixtures_tts.py [--stop-at N] --full OUT_DIR   (benchmarks: one full-size folder, see write_full)

--stop-at N moves the speech position T3 stops at (default STOP_POSITION): the benchmarks
use it for an utterance as long as a real voice would make of their text.

Writes OUT_DIR/chatterbox (float32), OUT_DIR/chatterbox-f16 and -bf16 (the same weights cast
to float16, voice included, / bfloat16, voice float32) and OUT_DIR/chatterbox-q4, -q6 and -q8 (the same weights with the T3
backbone quantized to 4, 6 or 8 bits, group 64, by mlx-audio's own conversion helper, as
mlx-community publishes Chatterbox at those widths), and OUT_DIR/chatterbox-mtl and -mtl-v3
(Chatterbox Multilingual, v2 and v3 text preprocessing: see write_multilingual). Each folder holds
config.json, model.safetensors, conds.safetensors and tokenizer.json, laid out as the
mlx-community Chatterbox conversions are. Nothing here downloads anything.

The model is mlx-audio's own `Model` (mlx_audio.tts.models.chatterbox), shrunk through config
keys that mlx-audio itself does not read. `build_model` is the one place that maps them onto
mlx-audio's constructors (the Rust port reads the same keys; defaults are the real model's):

  t3_config.llama_config.<key>      -> LLAMA_CONFIGS[t3_config.llama_config_name][<key>], the dict
                                       T3.__init__ turns into the Llama ModelArgs of `t3.tfmr`
                                       (used here: num_hidden_layers 30 -> 2,
                                       intermediate_size 4096 -> 256)
  s3gen_config.encoder_num_blocks   -> UpsampleConformerEncoder(num_blocks=)      (6)
  s3gen_config.encoder_num_up_blocks-> UpsampleConformerEncoder(num_up_blocks=)   (4)
  s3gen_config.decoder_n_blocks     -> ConditionalDecoder(n_blocks=): transformer blocks in each
                                       down / mid / up block of the flow estimator (4)
  s3gen_config.decoder_num_mid_blocks -> ConditionalDecoder(num_mid_blocks=)      (12)
  s3gen_config.n_timesteps          -> CausalMaskedDiffWithXvec(n_timesteps=): Euler steps of the
                                       flow matching solver (10)
  s3gen_config.hift_base_channels   -> HiFTGenerator(base_channels=)              (512)

All other sizes are the real ones (T3 hidden 1024, 16 heads, speech vocab 8194, text vocab 704;
conformer 512-d; estimator channels [256]; 80 mels; F0 predictor 512 channels; CAMPPlus and
the voice encoder at full size).

model.safetensors tensor-name prefixes: `t3.` (T3: tfmr.model.*, cond_enc.*, text_emb,
speech_emb, text_pos_emb, speech_pos_emb, text_head, speech_head), `s3gen.` (flow.*, mel2wav.*,
speaker_encoder.*) and `ve.` (voice encoder). As in mlx-audio's convert.py, the buffers that
mlx-audio computes at construction are left out: s3gen.flow.decoder.rand_noise,
s3gen.flow.encoder.embed.pos_enc.pe, s3gen.flow.encoder.up_embed.pos_enc.pe,
s3gen.mel2wav.stft_window and s3gen.trim_fade. Like the real checkpoints (converted from
Resemble AI's T3, whose Llama has vocab_size 8), t3.tfmr.model.embed_tokens.weight is [8, 1024]
and unused; the float32 folder has no t3.tfmr.lm_head.weight (the original T3 has none), while
the quantized folders have one ([4000, 1024], float32, unused) because convert.py flattens a freshly built
T3 after quantizing it.

Weights: every parameter gets a seeded random value (numpy), scaled per role (see
random_weights) so that activations stay in a realistic range through T3, the flow matching
decoder and HiFT. Two rows are shaped on purpose: the stop-speech row of t3.speech_head points
along speech position embedding STOP_POSITION (made 3x longer), so that T3 ends by itself after about that many
tokens (exercising the stop path), and HiFT's F0 classifier has a bias that puts F0 in the voiced
range (so the sine source is exercised, not just noise). check_model() asserts the ranges.
"""

import contextlib
import json
import re
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import numpy as np

import mlx.core as mx
from mlx.utils import tree_flatten

from mlx_audio.tts.models.chatterbox import config as cb_config
from mlx_audio.tts.models.chatterbox.chatterbox import Model
from mlx_audio.tts.models.chatterbox.config import ModelConfig, T3Config
from mlx_audio.tts.models.chatterbox.s3gen import s3gen as s3gen_module
from mlx_audio.tts.models.chatterbox.scripts.convert import (
    S3GEN_GENERATED_BUFFERS,
    quantize_t3_backbone,
)

SEED = 20240611
Q_BITS = (4, 6, 8)
Q_GROUP_SIZE = 64

LLAMA_SHRINK = {"num_hidden_layers": 2, "intermediate_size": 256}
S3GEN_SHRINK = {
    "encoder_num_blocks": 1,
    "encoder_num_up_blocks": 1,
    "decoder_n_blocks": 1,
    "decoder_num_mid_blocks": 1,
    "n_timesteps": 2,
    "hift_base_channels": 64,
}
S3GEN_DEFAULTS = {
    "encoder_num_blocks": 6,
    "encoder_num_up_blocks": 4,
    "decoder_n_blocks": 4,
    "decoder_num_mid_blocks": 12,
    "n_timesteps": 10,
    "hift_base_channels": 512,
}
# s3gen_config key -> (class name looked up by S3Token2Mel/S3Token2Wav, constructor argument)
S3GEN_KEY_TO_ARG = {
    "encoder_num_blocks": ("UpsampleConformerEncoder", "num_blocks"),
    "encoder_num_up_blocks": ("UpsampleConformerEncoder", "num_up_blocks"),
    "decoder_n_blocks": ("ConditionalDecoder", "n_blocks"),
    "decoder_num_mid_blocks": ("ConditionalDecoder", "num_mid_blocks"),
    "n_timesteps": ("CausalMaskedDiffWithXvec", "n_timesteps"),
    "hift_base_channels": ("HiFTGenerator", "base_channels"),
}

# Resemble AI's T3 Llama has vocab_size 8: its (unused) embed_tokens is [8, hidden].
REAL_EMBED_TOKENS_ROWS = 8
LM_HEAD = "t3.tfmr.lm_head.weight"
EMBED_TOKENS = "t3.tfmr.model.embed_tokens.weight"
COMPUTED_BUFFERS = tuple(f"s3gen.{k}" for k in S3GEN_GENERATED_BUFFERS)

# T3 step whose input carries this speech position embedding is pushed to emit the stop token
# (the tests' fixtures; --stop-at gives others).
STOP_POSITION = 40
STOP_GAIN = 3.0
STOP_POSITION_BOOST = 3.0  # that position's embedding is made longer so the push dominates
SPEECH_HEAD_GAIN = 3.0
# HiFT F0 (Hz) = |classifier(h)|: centred in the voiced range, varying from frame to frame.
F0_BIAS = 70.0
F0_GAIN = 150.0
# conv_post's first n_fft/2+1 channels are log-magnitudes: keep exp() of them small.
HIFT_LOG_MAG_BIAS = -2.5
HIFT_POST_GAIN = 0.5

TP = 20  # prompt speech tokens of the built-in voice (prompt_feat has 2 * TP mel frames)
# write_full's voice: S3Gen's reference in a real voice is 10 s (mlx-audio's DEC_COND_LEN) at
# 25 speech tokens/s.
FULL_PROMPT_TOKENS = 250
SPEECH_VOCAB = 6561

TOKENIZER_SPECIALS = ["[STOP]", "[UNK]", "[SPACE]", "[PAD]", "[SEP]", "[CLS]", "[MASK]"]
START_TEXT = ("[START]", 255)
TEXT_VOCAB = 704
BASE_CHARS = sorted(
    set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    | set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
)
# Merges are learned from this text (deterministically, see learn_merges).
TOKENIZER_CORPUS = """
Hello world, this is a test. The quick brown fox jumps over the lazy dog! Hi there, how are you
today? I am fine, thank you. What a beautiful morning it is. She sells sea shells by the sea
shore. Peter Piper picked a peck of pickled peppers. Speech synthesis turns written text into
spoken words, and a good voice sounds natural, warm and clear. Please read the following
sentence slowly and carefully. We will meet again tomorrow afternoon at the station near the
river. Every morning the children walk to school together, talking about their friends, their
games and the weather. The weather was cold and rainy, but everyone was happy to be outside.
Would you like a cup of coffee or a glass of water? Thanks, that would be wonderful. Music,
laughter and conversation filled the little house on the hill. Remember to turn off the lights
before you leave the room. The number seven is bigger than three but smaller than ten. They
walked through the forest, listening to birds singing in the trees. Our team finished the
project early because everybody worked hard and helped each other. Could you please tell me
where the nearest library is? It is just around the corner, next to the old bakery. Learning
a new language takes time, patience and practice. The movie started late, so we bought some
popcorn and waited quietly. My grandmother tells wonderful stories about her travels across
the country. Yesterday I visited the museum and saw paintings, sculptures and ancient maps.
Sometimes the simplest answer is the right one. Water boils at one hundred degrees. Good night
and sweet dreams. This sentence should sound friendly, confident and calm. Important people
understand small things matter. Because questions create knowledge, curious students always
improve. Another example shows something different: numbers, letters, symbols and voices.
Autumn leaves drifted gently across quiet gardens while neighbours prepared dinner. Engineers
measure everything twice, then build bridges, machines and computers. Jackets, umbrellas and
boots waited by the kitchen door. Zebras, giraffes and elephants gathered beside the watering
hole. Fresh vegetables, bread and cheese make an excellent lunch.
"""


@contextlib.contextmanager
def _forced_kwargs(module, class_name, **overrides):
    """Within the block, module.<class_name>(...) is built with `overrides` winning over the
    arguments the caller passes (S3Token2Mel passes num_blocks=6 and friends explicitly)."""
    original = getattr(module, class_name)

    def construct(*args, **kwargs):
        return original(*args, **{**kwargs, **overrides})

    setattr(module, class_name, construct)
    try:
        yield
    finally:
        setattr(module, class_name, original)


@contextlib.contextmanager
def _llama_overrides(name, overrides):
    original = cb_config.LLAMA_CONFIGS[name]
    cb_config.LLAMA_CONFIGS[name] = {**original, **overrides}
    try:
        yield
    finally:
        cb_config.LLAMA_CONFIGS[name] = original


def build_model(config: dict) -> Model:
    """mlx-audio's Chatterbox `Model` for a config.json dict, honouring the shrink keys
    `t3_config.llama_config` and `s3gen_config` (module docstring: which constructor argument
    each one sets). With neither key present this is exactly mlx-audio's model."""
    config = json.loads(json.dumps(config))
    t3 = config.get("t3_config") or {}
    llama = t3.pop("llama_config", None) or {}
    s3gen = config.get("s3gen_config") or {}
    unknown = set(s3gen) - set(S3GEN_KEY_TO_ARG)
    if unknown:
        raise ValueError(f"unknown s3gen_config keys: {sorted(unknown)}")
    model_config = ModelConfig.from_dict(config)
    by_class = {}
    for key, value in s3gen.items():
        class_name, arg = S3GEN_KEY_TO_ARG[key]
        by_class.setdefault(class_name, {})[arg] = value
    with contextlib.ExitStack() as stack:
        stack.enter_context(_llama_overrides(model_config.t3_config.llama_config_name, llama))
        for class_name, kwargs in by_class.items():
            stack.enter_context(_forced_kwargs(s3gen_module, class_name, **kwargs))
        model = Model(model_config)
    return model


def fixture_config(bits: Optional[int]) -> dict:
    """config.json; `bits`: the T3 backbone's quantization width, or None for float32."""
    config = {
        "model_type": "chatterbox",
        "version": "1.0",
        "t3_model": "english",
        "multilingual": False,
        "vocab_size": TEXT_VOCAB,
        "text_preprocessing": "legacy",
        "t3_config": {**asdict(T3Config.english_only()), "llama_config": dict(LLAMA_SHRINK)},
        "s3gen_config": dict(S3GEN_SHRINK),
    }
    if bits is not None:
        config["quantization"] = {
            "bits": bits,
            "group_size": Q_GROUP_SIZE,
            "quantized_components": ["t3.tfmr.model.layers"],
        }
    return config


def _gain(name):
    """Scale (relative to 1/sqrt(fan_in)) of a weight matrix / kernel."""
    if name == "t3.speech_head.weight":
        return SPEECH_HEAD_GAIN
    if name == "s3gen.mel2wav.f0_predictor.classifier.weight":
        return F0_GAIN
    if name == "s3gen.mel2wav.conv_post.weight":
        return HIFT_POST_GAIN
    if re.search(r"self_attn\.(q|k)_proj\.weight$", name):
        return 2.0
    return 1.0


def random_weights(params: dict, seed: int, stop_position: int = STOP_POSITION, steer: bool = True) -> dict:
    """Seeded values for every parameter, by role:
    - 1-d `weight` (LayerNorm / RMSNorm / BatchNorm gains): 1 + 0.1 N(0, 1)
    - biases and BatchNorm running means: 0.05 N(0, 1); running variances: U(0.5, 1.5)
    - Snake alphas: U(0.5, 1.5); learned position / relative-position biases: small normals
    - embedding tables: 0.5 N(0, 1) (position tables 0.3)
    - every other matrix or kernel: N(0, 1) * gain / sqrt(fan_in) (fan_in = all dims but the
      first, the MLX layout of Linear, Conv1d and ConvTranspose1d), gain 1 unless _gain says
      otherwise.
    Names are visited in sorted order so that the values depend on nothing but the seed.
    `steer`: shape the stop row and HiFT's F0 as the module docstring says (Chatterbox's names;
    fixtures_tts_turbo.py does its own)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in sorted(params):
        shape = tuple(params[name].shape)
        if name == EMBED_TOKENS:
            shape = (REAL_EMBED_TOKENS_ROWS, shape[1])
        leaf = name.rsplit(".", 1)[-1]
        normal = lambda scale: rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
        if leaf == "running_var":
            value = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        elif leaf == "running_mean":
            value = normal(0.05)
        elif leaf == "alpha":
            value = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        elif leaf in ("pos_bias_u", "pos_bias_v"):
            value = normal(0.1)
        elif name == "ve.similarity_weight":
            value = np.full(shape, 10.0, np.float32) + normal(0.1)
        elif name == "ve.similarity_bias":
            value = np.full(shape, -5.0, np.float32) + normal(0.1)
        elif leaf == "bias" or (leaf != "weight" and len(shape) == 1):
            value = normal(0.05)
        elif leaf == "weight" and len(shape) == 1:
            value = 1.0 + normal(0.1)
        elif "pos_emb" in name:
            value = normal(0.3)
        elif name.endswith("_emb.weight") or name in (EMBED_TOKENS, "s3gen.flow.input_embedding.weight"):
            value = normal(0.5)
        elif leaf == "pre_attention_query":
            value = normal(0.5)
        else:
            fan_in = int(np.prod(shape[1:]))
            value = normal(_gain(name) / np.sqrt(fan_in))
        out[name] = value
    if not steer:
        return {k: mx.array(v) for k, v in out.items()}

    # Stop row of the speech head along one position embedding (see module docstring).
    stop = T3Config().stop_speech_token
    out["t3.speech_pos_emb.emb.weight"][stop_position] *= STOP_POSITION_BOOST
    direction = out["t3.speech_pos_emb.emb.weight"][stop_position]
    head = out["t3.speech_head.weight"]
    head[stop] = direction / np.linalg.norm(direction) * np.float32(STOP_GAIN)
    # F0 in Hz, mostly voiced; log-magnitude channels of HiFT's conv_post kept small.
    out["s3gen.mel2wav.f0_predictor.classifier.bias"][:] = F0_BIAS
    n_mag = out["s3gen.mel2wav.conv_post.bias"].shape[0] // 2
    out["s3gen.mel2wav.conv_post.bias"][:n_mag] += HIFT_LOG_MAG_BIAS
    return {k: mx.array(v) for k, v in out.items()}


def checkpoint_weights(model: Model, quantized: bool) -> dict:
    """What the mlx-community conversion would write for this model (module docstring)."""
    weights = dict(tree_flatten(model.parameters()))
    for name in COMPUTED_BUFFERS:
        weights.pop(name)
    if not quantized:
        weights.pop(LM_HEAD)
    return weights


def random_conds(seed: int, prompt_tokens: int = TP) -> dict:
    """The built-in voice, keyed as mlx-audio's Model.post_load_hook reads conds.safetensors.
    prompt_tokens: S3Gen's reference speech tokens (prompt_feat has twice as many frames)."""
    rng = np.random.default_rng(seed)
    speaker = np.abs(rng.standard_normal((1, 256))).astype(np.float32)
    speaker /= np.linalg.norm(speaker)
    frames = 2 * prompt_tokens
    # Mel-like prompt: log-mel values around -6..0, smooth along time.
    base = rng.uniform(-5.5, -1.5, (1, 1, 80))
    wobble = np.cumsum(rng.standard_normal((1, frames, 80)) * 0.25, axis=1)
    prompt_feat = np.clip(base + wobble, -7.0, 0.5).astype(np.float32)
    return {
        "t3.speaker_emb": mx.array(speaker),
        "t3.cond_prompt_speech_tokens": mx.array(rng.integers(0, SPEECH_VOCAB, (1, 150)).astype(np.int32)),
        "t3.emotion_adv": mx.full((1, 1, 1), 0.5, dtype=mx.float32),
        "gen.prompt_token": mx.array(rng.integers(0, SPEECH_VOCAB, (1, prompt_tokens)).astype(np.int32)),
        "gen.prompt_token_len": mx.array([prompt_tokens], dtype=mx.int32),
        "gen.prompt_feat": mx.array(prompt_feat),
        "gen.embedding": mx.array(rng.standard_normal((1, 192)).astype(np.float32)),
    }


def learn_merges(corpus: str, count: int):
    """Plain BPE over the words (\\w+ runs, as the Whitespace pre-tokenizer splits them) of
    `corpus`; ties go to the lexicographically smallest pair, so the result is fixed."""
    words = Counter(tuple(w) for w in re.findall(r"\w+", corpus))
    merges = []
    while len(merges) < count:
        pairs = Counter()
        for word, freq in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += freq
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        merged = Counter()
        for word, freq in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += freq
        words = merged
    return merges


def bpe_tokenizer_text(vocab: dict, merges: list, specials: list) -> str:
    """tokenizer.json text of a BPE model over `vocab`/`merges` with a Whitespace pre-tokenizer and
    `specials` as special added tokens, in the layout of Resemble AI's (older) file: only its
    fields, so that tokenizers readers from 0.13 on, the Rust crate included, accept it; merges in
    the "a b" string form."""
    from tokenizers import AddedToken, Tokenizer
    from tokenizers.models import BPE
    from tokenizers.pre_tokenizers import Whitespace

    tok = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token="[UNK]", fuse_unk=False))
    tok.pre_tokenizer = Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in sorted(specials, key=lambda t: vocab[t])])
    spec = json.loads(tok.to_str())
    model = spec["model"]
    out = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": spec["added_tokens"],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": "[UNK]",
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "vocab": model["vocab"],
            "merges": [" ".join(m) if isinstance(m, list) else m for m in model["merges"]],
        },
    }
    return json.dumps(out, ensure_ascii=False, indent=2)


def tokenizer_json() -> str:
    """A synthetic English tokenizer in the format of Resemble AI's Chatterbox tokenizer.json:
    a BPE model with a Whitespace pre-tokenizer, 704 ids, [STOP]=0, [UNK]=1, [SPACE]=2,
    [PAD]/[SEP]/[CLS]/[MASK]=3..6, [START]=255, the printable ASCII characters as base tokens
    and merges learned from TOKENIZER_CORPUS. Characters outside the base set map to [UNK]."""
    n_merges = TEXT_VOCAB - len(TOKENIZER_SPECIALS) - 1 - len(BASE_CHARS)
    merges = learn_merges(TOKENIZER_CORPUS, n_merges)
    if len(merges) != n_merges:
        raise RuntimeError(f"tokenizer corpus gives {len(merges)} merges, need {n_merges}")
    tokens = list(TOKENIZER_SPECIALS) + BASE_CHARS + [a + b for a, b in merges]
    start, start_id = START_TEXT
    tokens.insert(start_id, start)
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != TEXT_VOCAB:
        raise RuntimeError(f"tokenizer has {len(vocab)} distinct tokens, need {TEXT_VOCAB}")

    text = bpe_tokenizer_text(vocab, merges, TOKENIZER_SPECIALS + [start])
    check_tokenizer(text, vocab)
    return text


def check_tokenizer(text: str, vocab: dict):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(text)
    assert tok.get_vocab_size() == TEXT_VOCAB, tok.get_vocab_size()
    for special, expected in [("[STOP]", 0), ("[UNK]", 1), ("[SPACE]", 2), ("[START]", 255)]:
        assert tok.token_to_id(special) == expected, special
    ids = tok.encode("Hello[SPACE]world,[SPACE]this[SPACE]is[SPACE]a[SPACE]test.").ids
    assert len(ids) < len("Hello world, this is a test.") - 4, f"merges not applied: {ids}"
    assert 2 in ids and max(ids) < TEXT_VOCAB
    assert tok.encode("caf\u00e9").ids[-1] == vocab["[UNK]"], "unknown characters must be [UNK]"


def check_model(model: Model, conds: dict, tokenizer_path: Path):
    """Runs mlx-audio's pipeline once and asserts the activation ranges the fixtures promise."""
    import mlx_audio.tts.models.chatterbox.t3.t3 as t3_module
    from mlx_audio.tts.models.chatterbox.chatterbox import Conditionals
    from mlx_audio.tts.models.chatterbox.t3.cond_enc import T3Cond
    from mlx_audio.tts.models.chatterbox.tokenizer import EnTokenizer

    model.tokenizer = EnTokenizer(tokenizer_path)
    model._conds = Conditionals(
        T3Cond(
            speaker_emb=conds["t3.speaker_emb"],
            cond_prompt_speech_tokens=conds["t3.cond_prompt_speech_tokens"],
            emotion_adv=conds["t3.emotion_adv"],
        ),
        {
            **{k[4:]: v for k, v in conds.items() if k.startswith("gen.")},
            "prompt_feat_len": mx.array([conds["gen.prompt_feat"].shape[1]]),
        },
    )
    seen = {}
    make_processors = t3_module.make_logits_processors

    def recording_processors(*args, **kwargs):
        def first(tokens, logits):
            seen.setdefault("logits", logits)
            return logits

        return [first] + make_processors(*args, **kwargs)

    flow_inference = model.s3gen.flow.inference

    def recording_flow(*args, **kwargs):
        out = flow_inference(*args, **kwargs)
        seen["tokens"] = kwargs["token"]
        seen["mel"] = out[0]
        return out

    t3_module.make_logits_processors = recording_processors
    model.s3gen.flow.inference = recording_flow
    try:
        mx.random.seed(0)
        result = next(model.generate("Hello world, this is a test.", temperature=0.0, max_new_tokens=48, verbose=False))
    finally:
        t3_module.make_logits_processors = make_processors
        del model.s3gen.flow.inference
    logits = np.array(seen["logits"])
    mel = np.array(seen["mel"])
    wav = np.array(result.audio)
    tokens = np.array(seen["tokens"]).reshape(-1)
    print(
        f"  check: step-0 logits std {logits.std():.2f}, {tokens.size} speech tokens "
        f"({len(set(tokens.tolist()))} distinct), mel [{mel.min():.2f}, {mel.max():.2f}], "
        f"wav peak {np.abs(wav).max():.3f} rms {np.sqrt((wav ** 2).mean()):.3f}",
        file=sys.stderr,
    )
    assert 1.0 < logits.std() < 10.0, f"step-0 logits std {logits.std()}"
    assert len(set(tokens.tolist())) > tokens.size // 2, f"greedy speech tokens too repetitive: {tokens}"
    assert np.isfinite(mel).all() and np.abs(mel).max() < 20, "mel out of range"
    assert np.isfinite(wav).all() and np.abs(wav).max() < 5, "wav out of range"
    assert (np.abs(wav) >= 0.99).mean() < 0.05, "more than 5% of the waveform is clipped"
    model.tokenizer = None
    model._conds = None


def write_folder(out: Path, model: Model, bits: Optional[int], conds: dict, tokenizer: str, dtype=None, config=None):
    """One model folder; `dtype`: the float weights cast to it (the voice stays float32);
    `config`: config.json (default: fixture_config(bits))."""
    out.mkdir(parents=True)
    weights = checkpoint_weights(model, bits is not None)
    if dtype is not None:
        weights = {k: v.astype(dtype) if mx.issubdtype(v.dtype, mx.floating) else v for k, v in weights.items()}
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    mx.save_safetensors(str(out / "conds.safetensors"), conds)
    (out / "config.json").write_text(json.dumps(config or fixture_config(bits), indent=2) + "\n")
    (out / "tokenizer.json").write_text(tokenizer)
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"  {out.name}: {len(weights)} tensors, {size / 2**20:.1f} MiB", file=sys.stderr)


def main(out_dir: str, stop_position: int = STOP_POSITION):
    t0 = time.time()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    mx.random.seed(SEED)
    model = build_model(fixture_config(None))
    params = dict(tree_flatten(model.parameters()))
    weights = random_weights({k: v for k, v in params.items() if k not in COMPUTED_BUFFERS}, SEED, stop_position)
    model.load_weights(list(weights.items()))
    mx.eval(model.parameters())
    model.eval()
    conds = random_conds(SEED + 1)
    tokenizer = tokenizer_json()
    (out / "tokenizer.json").write_text(tokenizer)
    check_model(model, conds, out / "tokenizer.json")
    (out / "tokenizer.json").unlink()

    write_folder(out / "chatterbox", model, None, conds, tokenizer)
    # Half-precision conversions exist too: mlx-audio then computes in float16 / bfloat16
    # wherever no float32 input (voice, noise) promotes an op. The float16 one casts the
    # voice as well, as conversions that store every float tensor in float16 do.
    half_conds = {k: v.astype(mx.float16) if mx.issubdtype(v.dtype, mx.floating) else v for k, v in conds.items()}
    write_folder(out / "chatterbox-f16", model, None, half_conds, tokenizer, mx.float16)
    write_folder(out / "chatterbox-bf16", model, None, conds, tokenizer, mx.bfloat16)
    for bits in Q_BITS:
        # Quantizing replaces the layers in place: each width starts from the float weights.
        if bits != Q_BITS[0]:
            model = build_model(fixture_config(None))
            model.load_weights(list(weights.items()))
        quantize_t3_backbone(model, bits=bits, group_size=Q_GROUP_SIZE)
        mx.eval(model.parameters())
        write_folder(out / f"chatterbox-q{bits}", model, bits, conds, tokenizer)
    write_multilingual(out, weights, conds)
    print(f"  models written in {time.time() - t0:.1f} s", file=sys.stderr)


# Chatterbox Multilingual (mlx-audio: ModelConfig.multilingual, T3Config.multilingual()).
MTL_TEXT_VOCAB = 2454
MTL_LANGUAGES = sorted(
    "ar da de el en es fi fr he hi it ja ko ms nl no pl pt ru sv sw tr zh".split()
)
# Base characters of the synthetic multilingual tokenizer: what lowercase + NFKD text in the
# test languages is made of (Latin, combining accents, Cyrillic, Hebrew, kana, conjoining
# Korean jamo), plus capitals for the case-preserving v3 preprocessing. Anything else is [UNK].
MTL_BASE_CHARS = sorted(
    set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    | set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
    | {chr(c) for c in range(0x0300, 0x0310)}  # combining grave .. inverted breve
    | {"\u0327", "\u0328"}  # combining cedilla, ogonek
    | {chr(c) for c in range(0x0430, 0x0450)}  # Cyrillic а..я
    | {chr(c) for c in range(0x0410, 0x0430)}  # Cyrillic А..Я
    | {chr(c) for c in range(0x05D0, 0x05EB)}  # Hebrew א..ת
    | set("あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんっ")
    | {"\u3099", "\u309A", "\u3001", "\u3002", "\uFF0C"}  # kana voicing marks, CJK punctuation
    | {chr(c) for c in range(0x1100, 0x1113)}  # jamo initials
    | {chr(c) for c in range(0x1161, 0x1176)}  # jamo medials
    | {chr(c) for c in range(0x11A8, 0x11C3)}  # jamo finals
)
MTL_CANGJIE_LETTERS = list("abcdefghijklmnopqrstuvwxyz") + ["."]
# Cangjie5_TC.json's format ("glyph\tcode" strings). 日 and 曰 share a code (曰 becomes
# "a1"); 〇 (category Nl, not Lo) is mapped but left alone by mlx-audio's converter.
MTL_CANGJIE = ["你\tonf", "好\tvnd", "我\thqi", "是\tamyo", "中\tl", "文\tyk", "日\ta", "曰\ta", "〇\tx"]
MTL_CORPUS = """
bonjour le monde, ceci est un test. hallo welt, das ist ein test. hola mundo, esto es una
prueba. ciao mondo, questo e un test. hello world, this is a test. привет мир, это тест.
"""
MTL_MERGES = 64


def mtl_config(v3: bool = False) -> dict:
    """config.json of a multilingual fixture as mlx-audio's ModelConfig.from_dict reads it:
    v2 says multilingual / vocab_size / t3_model / text_preprocessing; v3 only t3_model "v3"
    (multilingual and its "NFKD,fullcase" preprocessing follow from it)."""
    config = {
        "model_type": "chatterbox",
        "version": "1.0",
        "t3_config": {**asdict(T3Config.multilingual()), "llama_config": dict(LLAMA_SHRINK)},
        "s3gen_config": dict(S3GEN_SHRINK),
    }
    if v3:
        return {**config, "t3_model": "v3"}
    return {**config, "t3_model": "v2", "multilingual": True, "vocab_size": MTL_TEXT_VOCAB, "text_preprocessing": "legacy"}


def mtl_tokenizer_json() -> str:
    """A synthetic multilingual tokenizer.json: the English one's layout (BPE, Whitespace
    pre-tokenizer, [STOP]=0 [UNK]=1 [SPACE]=2 ... [START]=255) with the language tags [xx]
    and the Cangjie letters [cj_x] as added tokens, MTL_BASE_CHARS and merges learned from
    MTL_CORPUS; ids stay below T3's 2454."""
    from tokenizers import Tokenizer

    tags = [f"[{code}]" for code in MTL_LANGUAGES] + [f"[cj_{c}]" for c in MTL_CANGJIE_LETTERS]
    merges = learn_merges(MTL_CORPUS, MTL_MERGES)
    tokens = list(TOKENIZER_SPECIALS) + tags + MTL_BASE_CHARS + [a + b for a, b in merges]
    start, start_id = START_TEXT
    tokens.insert(start_id, start)
    vocab = {}
    for t in tokens:
        vocab.setdefault(t, len(vocab))
    assert vocab[start] == start_id and len(vocab) < MTL_TEXT_VOCAB, len(vocab)
    text = bpe_tokenizer_text(vocab, merges, TOKENIZER_SPECIALS + [start] + tags)
    check = Tokenizer.from_str(text)
    ids = check.encode("[fr]bonjour[SPACE]le[SPACE]monde[cj_o][cj_.]").ids
    assert ids[0] == vocab["[fr]"] and vocab["[SPACE]"] in ids and vocab["[cj_.]"] == ids[-1], ids
    assert len(ids) < 14, f"merges not applied: {ids}"
    return text


def write_multilingual(out: Path, weights: dict, conds: dict):
    """OUT/chatterbox-mtl (v2, float32): the English fixture's weights with T3's text
    embedding and head grown to the multilingual 2454 rows (seeded, same roles), the synthetic
    multilingual tokenizer and a small Cangjie5_TC.json; OUT/chatterbox-mtl-v3: the same
    files (symbolic links) under a v3 config.json (case-preserving NFKD preprocessing)."""
    rng = np.random.default_rng(SEED + 2)
    hidden = weights["t3.text_emb.weight"].shape[1]
    grown = dict(weights)
    grown["t3.text_emb.weight"] = mx.array(rng.standard_normal((MTL_TEXT_VOCAB, hidden), dtype=np.float32) * np.float32(0.5))
    grown["t3.text_head.weight"] = mx.array(rng.standard_normal((MTL_TEXT_VOCAB, hidden), dtype=np.float32) / np.float32(np.sqrt(hidden)))
    config = mtl_config()
    model = build_model(config)
    assert model.config.multilingual and build_model(mtl_config(v3=True)).config.text_preprocessing == "NFKD,fullcase"
    model.load_weights(list(grown.items()))
    mx.eval(model.parameters())
    assert np.array_equal(np.array(model.t3.text_emb.weight), np.array(grown["t3.text_emb.weight"]))
    model.eval()
    folder = out / "chatterbox-mtl"
    write_folder(folder, model, None, conds, mtl_tokenizer_json(), config=config)
    (folder / "Cangjie5_TC.json").write_text(json.dumps(MTL_CANGJIE, ensure_ascii=False, indent=1) + "\n")
    v3 = out / "chatterbox-mtl-v3"
    v3.mkdir()
    for f in folder.iterdir():
        if f.name != "config.json":
            (v3 / f.name).symlink_to(Path("..") / folder.name / f.name)
    (v3 / "config.json").write_text(json.dumps(mtl_config(v3=True), indent=2) + "\n")


def full_config() -> dict:
    """config.json of the real English Chatterbox: the fixtures' config without shrink keys."""
    config = fixture_config(None)
    del config["t3_config"]["llama_config"]
    del config["s3gen_config"]
    return config


def write_full(out_dir: str, stop_position: int = STOP_POSITION):
    """A full-size Chatterbox (the real architecture, float32) with the fixtures' seeded random
    weights, for benchmarks: the speech is noise, the work per token is the real model's.
    Its voice has real-length references: S3Gen's 10 s (FULL_PROMPT_TOKENS tokens)."""
    t0 = time.time()
    out = Path(out_dir)
    out.mkdir(parents=True)
    mx.random.seed(SEED)
    config = full_config()
    model = build_model(config)
    params = dict(tree_flatten(model.parameters()))
    weights = random_weights({k: v for k, v in params.items() if k not in COMPUTED_BUFFERS}, SEED, stop_position)
    del params
    model.load_weights(list(weights.items()))
    del weights
    mx.eval(model.parameters())
    weights = checkpoint_weights(model, False)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    mx.save_safetensors(str(out / "conds.safetensors"), random_conds(SEED + 1, FULL_PROMPT_TOKENS))
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "tokenizer.json").write_text(tokenizer_json())
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"  {out.name}: {len(weights)} tensors, {size / 2**20:.1f} MiB, in {time.time() - t0:.1f} s", file=sys.stderr)


def parse_args(argv: list):
    """(write_full or main, OUT_DIR, stop position); exits with the usage on anything else."""
    usage = "usage: fixtures_tts.py [--stop-at N] [--full] OUT_DIR"
    args = list(argv)
    stop = STOP_POSITION
    if args[:1] == ["--stop-at"]:
        if len(args) < 2 or not args[1].isdigit() or not 1 <= int(args[1]) < T3Config().max_speech_tokens:
            sys.exit(f"--stop-at takes a speech position in 1..{T3Config().max_speech_tokens - 1}\n{usage}")
        stop = int(args[1])
        args = args[2:]
    write = main
    if args[:1] == ["--full"]:
        write = write_full
        args = args[1:]
    if len(args) != 1 or args[0].startswith("--"):
        sys.exit(usage)
    return write, args[0], stop


if __name__ == "__main__":
    write, out_dir, stop_position = parse_args(sys.argv[1:])
    write(out_dir, stop_position)
