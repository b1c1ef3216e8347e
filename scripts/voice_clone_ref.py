"""What mlx-audio's voice cloning makes of the fixture clips, end to end (called by
fixtures_voice.py once the clips, their front-end dumps and the S3 tokenizer exist).

For every clip, `Model.prepare_conditionals(samples, rate)` on the clip's samples as our reader
gives them (`mono` of its dump): `clone_<clip>.safetensors`, the eight tensors a
conds.safetensors holds. For the 16-bit clip also the file route, `clone_<clip>_file.safetensors`:
given a path, prepare_conditionals reads the file at 24 kHz (`load_audio`: miniaudio's 16-bit
decode, then mlx-audio's `resample_audio` in chunks, which mlx-audio documents as equal to one
whole-buffer call) and treats that as a 24 kHz clip. miniaudio is not in the reference venv, so
the file is given as that: the 16-bit samples (which miniaudio gives bit for bit) resampled to
24 kHz by `resample_audio`, at 24 kHz. Then one synthesis from the same 24 kHz signal as
`ref_audio` (mlx-audio's `generate(text, ref_audio=...)`, greedy, seeded):
`clone_speech.safetensors` (speech tokens, wav) and its options in `clone.json`; the same
from the Multilingual fixture in French (`generate(..., lang_code="fr")`, the voice cloned by
that model's own encoders): `clone_speech_mtl.safetensors`, its options under `speech_mtl`.

The Chatterbox models are the TTS fixtures (loaded as __test__/ref/chatterbox_ref.py loads
them), with the fixture's S3 tokenizer in place of the Hub's.
"""
import json
import sys
from pathlib import Path

import numpy as np

import mlx.core as mx

S3GEN_SR = 24000

ROOT = Path(__file__).resolve().parents[1]

FILE_CLIP = "pcm16_16k_mono"
SPEECH = dict(text="Hello there, this is a cloned voice.", temperature=0.0, cfg_weight=0.5, exaggeration=0.5,
              repetition_penalty=1.2, min_p=0.05, top_p=1.0, max_new_tokens=40, seed=3)
# The same in French, from the Multilingual fixture (next to the Chatterbox one).
SPEECH_MTL = dict(SPEECH, text="Bonjour, ceci est une voix clonée.", lang_code="fr")
MTL_FIXTURE = "chatterbox-mtl"


def file_route(mono, rate):
    """A WAV file as prepare_conditionals(path) reads it: at 24 kHz (see the module docs)."""
    from mlx_audio.utils import resample_audio

    return mx.array(resample_audio(mono, rate, S3GEN_SR)) if rate != S3GEN_SR else mono


def meta_rate(out: Path, name: str) -> int:
    return json.loads((out / "meta.json").read_text())[name]["rate"]


def conds_tensors(conds) -> dict:
    t3 = conds.t3
    out = {
        "t3.speaker_emb": t3.speaker_emb,
        "t3.cond_prompt_speech_tokens": t3.cond_prompt_speech_tokens,
        "t3.emotion_adv": t3.emotion_adv,
    }
    out.update({f"gen.{k}": v for k, v in conds.gen.items()})
    return out


def clone_references(out: Path, tts_dir: Path, tokenizer, clips: list):
    sys.path.insert(0, str(ROOT / "__test__" / "ref"))
    from chatterbox_ref import load_fixture

    model = load_fixture(tts_dir)
    model._s3_tokenizer = tokenizer
    meta = {"clips": {}, "speech": dict(SPEECH, ref_audio=f"{FILE_CLIP}.wav")}
    for name in clips:
        dump = mx.load(str(out / f"{name}.safetensors"))
        rate = meta_rate(out, name)
        tensors = conds_tensors(model.prepare_conditionals(dump["mono"], rate, exaggeration=0.5))
        mx.save_safetensors(str(out / f"clone_{name}.safetensors"), tensors)
        meta["clips"][name] = {k: list(v.shape) for k, v in tensors.items()}
        if name == FILE_CLIP:
            tensors = conds_tensors(model.prepare_conditionals(file_route(dump["mono"], rate), S3GEN_SR, exaggeration=0.5))
            mx.save_safetensors(str(out / f"clone_{name}_file.safetensors"), tensors)
        print(f"[fixtures-voice] {name}: cloned, {tensors['gen.prompt_token'].shape[1]} S3Gen tokens, "
              f"{tensors['t3.cond_prompt_speech_tokens'].shape[1]} T3 tokens", file=sys.stderr)

    at24 = file_route(mx.load(str(out / f"{FILE_CLIP}.safetensors"))["mono"], meta_rate(out, FILE_CLIP))
    speak(model, SPEECH, at24, out / "clone_speech.safetensors")
    mtl = load_fixture(tts_dir.parent / MTL_FIXTURE)
    mtl._s3_tokenizer = tokenizer
    speak(mtl, SPEECH_MTL, at24, out / "clone_speech_mtl.safetensors")
    meta["speech_mtl"] = dict(SPEECH_MTL, ref_audio=f"{FILE_CLIP}.wav", fixture=MTL_FIXTURE)
    (out / "clone.json").write_text(json.dumps(meta, indent=1))


def speak(model, s: dict, at24, path: Path):
    """One seeded generate(ref_audio=...) with the options `s`: its speech tokens and wav."""
    from chatterbox_ref import recording

    with recording(model) as rec:
        mx.random.seed(s["seed"])
        result = next(model.generate(s["text"], ref_audio=at24, temperature=s["temperature"],
                                     cfg_weight=s["cfg_weight"], exaggeration=s["exaggeration"],
                                     repetition_penalty=s["repetition_penalty"], min_p=s["min_p"], top_p=s["top_p"],
                                     max_new_tokens=s["max_new_tokens"], lang_code=s.get("lang_code", "en"), verbose=False))
    wav = np.array(result.audio, dtype=np.float32)
    tokens = np.array(rec["speech_tokens_clean"]).astype(np.int32)
    assert np.isfinite(wav).all() and wav.size > 0, f"{path.name}: the cloned voice gave no audio"
    assert len(set(tokens.tolist())) > tokens.size // 2, f"{path.name}: greedy speech tokens too repetitive: {tokens}"
    mx.save_safetensors(str(path), {"wav": mx.array(wav), "speech_tokens": mx.array(tokens)})
