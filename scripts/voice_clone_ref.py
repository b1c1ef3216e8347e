"""What mlx-audio's voice cloning makes of the fixture clips, end to end (called by
fixtures_voice.py once the clips, their front-end dumps and the S3 tokenizer exist).

For every clip, `Model.prepare_conditionals(samples, rate)` on the clip's samples as our reader
gives them (`mono` of its dump): `clone_<clip>.safetensors`, the eight tensors a
conds.safetensors holds. For the 16-bit clip, whose samples mlx-audio's own file reader gives
bit for bit, also `prepare_conditionals(path)` (the file route: read at 24 kHz first):
`clone_<clip>_file.safetensors`. Then one synthesis with that file as `ref_audio` (mlx-audio's
`generate(text, ref_audio=path)`, greedy, seeded): `clone_speech.safetensors` (speech tokens, wav)
and its options in `clone.json`.

The Chatterbox is the TTS fixture (loaded as __test__/ref/chatterbox_ref.py loads it), with the
fixture's S3 tokenizer in place of the Hub's.
"""
import json
import sys
from pathlib import Path

import numpy as np

import mlx.core as mx

ROOT = Path(__file__).resolve().parents[1]

FILE_CLIP = "pcm16_16k_mono"
SPEECH = dict(text="Hello there, this is a cloned voice.", temperature=0.0, cfg_weight=0.5, exaggeration=0.5,
              repetition_penalty=1.2, min_p=0.05, top_p=1.0, max_new_tokens=40, seed=3)


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
    from chatterbox_ref import load_fixture, recording

    model = load_fixture(tts_dir)
    model._s3_tokenizer = tokenizer
    meta = {"clips": {}, "speech": dict(SPEECH, ref_audio=f"{FILE_CLIP}.wav")}
    for name in clips:
        dump = mx.load(str(out / f"{name}.safetensors"))
        rate = json.loads((out / "meta.json").read_text())[name]["rate"]
        tensors = conds_tensors(model.prepare_conditionals(dump["mono"], rate, exaggeration=0.5))
        mx.save_safetensors(str(out / f"clone_{name}.safetensors"), tensors)
        meta["clips"][name] = {k: list(v.shape) for k, v in tensors.items()}
        if name == FILE_CLIP:
            tensors = conds_tensors(model.prepare_conditionals(str(out / f"{name}.wav"), rate, exaggeration=0.5))
            mx.save_safetensors(str(out / f"clone_{name}_file.safetensors"), tensors)
        print(f"[fixtures-voice] {name}: cloned, {tensors['gen.prompt_token'].shape[1]} S3Gen tokens, "
              f"{tensors['t3.cond_prompt_speech_tokens'].shape[1]} T3 tokens", file=sys.stderr)

    s = SPEECH
    with recording(model) as rec:
        mx.random.seed(s["seed"])
        result = next(model.generate(s["text"], ref_audio=str(out / f"{FILE_CLIP}.wav"), temperature=s["temperature"],
                                     cfg_weight=s["cfg_weight"], exaggeration=s["exaggeration"],
                                     repetition_penalty=s["repetition_penalty"], min_p=s["min_p"], top_p=s["top_p"],
                                     max_new_tokens=s["max_new_tokens"], verbose=False))
    wav = np.array(result.audio, dtype=np.float32)
    tokens = np.array(rec["speech_tokens_clean"]).astype(np.int32)
    assert np.isfinite(wav).all() and wav.size > 0, "the cloned voice gave no audio"
    assert len(set(tokens.tolist())) > tokens.size // 2, f"greedy speech tokens too repetitive: {tokens}"
    mx.save_safetensors(str(out / "clone_speech.safetensors"), {"wav": mx.array(wav), "speech_tokens": mx.array(tokens)})
    (out / "clone.json").write_text(json.dumps(meta, indent=1))
