"""Voice-cloning front-end references: synthetic reference clips written as real WAV files, and
for each what mlx-audio 0.6.2's `Model.prepare_conditionals` computes from it before the speech
tokenizer and CAMPPlus: the 24 kHz and 16 kHz signals (its resampling and 10 s / 6 s
truncations), the three log-mel front ends, CAMPPlus's Kaldi filter bank and the voice encoder's
speaker embedding. Then, separately (`write_campplus`), CAMPPlus's x-vector of each clip.

Usage: fixtures_voice.py OUT_DIR TTS_FIXTURE_DIR

The voice encoder's weights are the `ve.*` tensors of the Chatterbox fixture (TTS_FIXTURE_DIR,
written by fixtures_tts.py), loaded through mlx-audio's own `VoiceEncoder` (and its `sanitize`).

Each clip is a seeded mix of tones and noise under a loudness envelope with quiet lead-in and
tail (so the voice encoder's silence trim cuts something), quantized to its WAV sample format.
mlx-audio reads files through miniaudio, which decodes every format to 16-bit integers; we read
at the file's own precision, so the float samples given to mlx-audio here are the file's samples
scaled as our reader scales them (integers / 2**(bits-1), channels averaged), dumped as `mono`.

Then the speech tokenizer (`s3_tokenizer_references`): a small seeded S3TokenizerV2 saved as a
Hugging Face cache under `hub/`, and its tokens for each clip's two 16 kHz signals in
`s3tokenizer.json`.
"""
import json
import re
import struct
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np

from mlx_audio.tts.models.chatterbox.s3gen.mel import mel_spectrogram
from mlx_audio.tts.models.chatterbox.s3gen.xvector import CAMPPlus, kaldi_fbank
from mlx_audio.tts.models.chatterbox.s3tokenizer import log_mel_spectrogram
from mlx_audio.tts.models.chatterbox.voice_encoder import VoiceEncoder
from mlx_audio.tts.models.chatterbox.voice_encoder.melspec import melspectrogram
from mlx_audio.utils import resample_audio, trim_silence

S3_SR, S3GEN_SR = 16000, 24000
ENC_COND_LEN, DEC_COND_LEN = 6 * S3_SR, 10 * S3GEN_SR

# name, rate, seconds, channels, format ("int" bits or "float" 32)
CLIPS = [
    ("pcm16_16k_mono", 16000, 4.5, 1, "int", 16),
    ("pcm24_24k_stereo", 24000, 7.3, 2, "int", 24),
    ("float32_44k_mono", 44100, 11.2, 1, "float", 32),
    ("pcm32_48k_stereo", 48000, 10.6, 2, "int", 32),
    ("pcm8_48k_mono", 48000, 2.5, 1, "int", 8),
]


def synth(rate, seconds, channels, seed):
    """Tones with vibrato + noise under a syllable-like envelope; quiet (-50 dB) head and tail."""
    rng = np.random.default_rng(seed)
    n = int(round(rate * seconds))
    t = np.arange(n) / rate
    out = np.zeros((n, channels))
    for c in range(channels):
        x = np.zeros(n)
        for _ in range(4):
            f0 = rng.uniform(90, 1800)
            vib = rng.uniform(2, 6)
            x += rng.uniform(0.05, 0.2) * np.sin(2 * np.pi * f0 * t + 3 * np.sin(2 * np.pi * vib * t) + rng.uniform(0, 6))
        x += 0.03 * rng.standard_normal(n)
        out[:, c] = x
    syllables = 0.5 + 0.5 * np.sin(2 * np.pi * 3.1 * t) ** 2
    edge = np.clip(np.minimum(t - 0.6, seconds - 0.5 - t) / 0.1, 0, 1)
    env = syllables * edge
    out *= env[:, None]
    out += 0.003 * rng.standard_normal(out.shape)
    return np.clip(out, -0.99, 0.99)


def quantize(x, fmt, bits):
    """The integers (or floats) stored in the file, and the mono float32 our reader makes of them."""
    if fmt == "float":
        stored = x.astype(np.float32)
        scaled = stored.astype(np.float64)
    else:
        scale = 2.0 ** (bits - 1)
        stored = np.clip(np.round(x * scale), -scale, scale - 1).astype(np.int64)
        scaled = stored / scale
    mono = scaled.mean(axis=1).astype(np.float32)
    return stored, mono


def wav_bytes(stored, rate, fmt, bits):
    n, channels = stored.shape
    width = bits // 8
    if fmt == "float":
        data = stored.astype("<f4").tobytes()
        tag = 3
    elif bits == 8:
        data = (stored + 128).astype(np.uint8).tobytes()
        tag = 1
    else:
        flat = stored.reshape(-1)
        b = (flat & ((1 << bits) - 1)).astype("<u4").view(np.uint8).reshape(-1, 4)[:, :width]
        data = b.tobytes()
        tag = 1
    fmt_chunk = struct.pack("<HHIIHH", tag, channels, rate, rate * channels * width, channels * width, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt_chunk)) + fmt_chunk + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def resample(x, src, dst):
    return np.asarray(resample_audio(x, src, dst), dtype=np.float32) if src != dst else x


def main():
    out, tts_dir = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)

    ve = VoiceEncoder()
    weights = {k[3:]: v for k, v in mx.load(str(tts_dir / "model.safetensors")).items() if k.startswith("ve.")}
    ve.load_weights(list(ve.sanitize(weights).items()))
    mx.eval(ve.parameters())

    meta = {}
    campplus_inputs = {}
    for i, (name, rate, seconds, channels, fmt, bits) in enumerate(CLIPS):
        stored, mono = quantize(synth(rate, seconds, channels, 100 + i), fmt, bits)
        (out / f"{name}.wav").write_bytes(wav_bytes(stored, rate, fmt, bits))

        # prepare_conditionals with (ref_wav, ref_sr), step by step.
        wav24 = resample(mono, rate, S3GEN_SR)[:DEC_COND_LEN]
        wav16_from_24 = resample(wav24, S3GEN_SR, S3_SR)
        wav16_full = resample(mono, rate, S3_SR)
        wav16 = wav16_full[:ENC_COND_LEN]

        mel128_s3gen = log_mel_spectrogram(mx.array(wav16_from_24))
        mel128_t3 = log_mel_spectrogram(mx.array(wav16))
        mel80 = mel_spectrogram(mx.array(wav24)[None])[0]
        # CAMPPlus (s3gen.embed_ref) sees the 16 kHz signal made from the 24 kHz one.
        fbank = kaldi_fbank(mx.array(wav16_from_24), num_mel_bins=80)
        xvector_features = fbank - mx.mean(fbank, axis=0, keepdims=True)
        trimmed = np.asarray(trim_silence(wav16_full), dtype=np.float32)
        mel40 = melspectrogram(mx.array(trimmed), ve.hp)
        embed = ve.embeds_from_wavs([mx.array(wav16_full)], sample_rate=S3_SR)
        embed = mx.mean(embed, axis=0, keepdims=True)
        assert not np.isnan(np.array(embed)).any(), f"{name}: NaN speaker embedding"

        dump = {
            "mono": mx.array(mono),
            "wav24": mx.array(wav24),
            "wav16_from_24": mx.array(wav16_from_24),
            "wav16_full": mx.array(wav16_full),
            "trimmed": mx.array(trimmed),
            "mel128_s3gen": mel128_s3gen,
            "mel128_t3": mel128_t3,
            "mel80": mel80,
            "mel40": mel40,
            "fbank": fbank,
            "xvector_features": xvector_features,
            "ve_embed": embed,
        }
        mx.save_safetensors(str(out / f"{name}.safetensors"), dump)
        campplus_inputs[name] = wav16_from_24
        meta[name] = {"rate": rate, "channels": channels, "format": fmt, "bits": bits, "frames": int(stored.shape[0]),
                      "trimmed": int(trimmed.shape[0]), "wav16_full": int(wav16_full.shape[0])}
        print(f"[fixtures-voice] {name}: {seconds} s, trimmed to {trimmed.shape[0] / S3_SR:.2f} s", file=sys.stderr)
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    write_campplus(out, tts_dir, campplus_inputs)
    tokenizer = s3_tokenizer_references(out, list(meta))
    # Last: the whole of mlx-audio's cloning with that tokenizer (scripts/voice_clone_ref.py).
    from voice_clone_ref import clone_references

    clone_references(out, tts_dir, tokenizer, list(meta))


# --- S3TokenizerV2 (the speech tokenizer) -----------------------------------------------------
# A small S3TokenizerV2 (mlx-audio's class, its ModelConfig narrowed: 128 wide, 2 heads of 64 as
# its rotary table fixes, 2 blocks) with seeded weights, saved as the Hugging Face cache holds
# mlx-community/S3TokenizerV2, and the tokens mlx-audio's prepare_conditionals gets from each
# clip's two 16 kHz signals (S3Gen's, from the 10 s at 24 kHz, and T3's first 6 s), computed by
# the model loaded back from that file the way mlx-audio's post_load_hook loads it.
S3TOK_REPO_FOLDER = "models--mlx-community--S3TokenizerV2"
S3TOK_COMMIT = "5f0c0e6b3a1d2c4e8f9a7b6c5d4e3f2a1b0c9d8e"
# project_down's weights times this: its outputs then spread past tanh's +-0.5 rounding points,
# so the tokens vary (at mlx-audio's initialization most digits would be 1).
S3TOK_PROJECT_SCALE = 4.0


def write_s3_tokenizer(hub):
    """The seeded S3TokenizerV2 saved under `hub` as the Hugging Face cache holds
    mlx-community/S3TokenizerV2, and loaded back from that file as mlx-audio's post_load_hook
    loads it (also the Turbo fixture's, scripts/fixtures_tts_turbo.py)."""
    from mlx.utils import tree_flatten
    from mlx_audio.tts.models.chatterbox.s3tokenizer import ModelConfig, S3TokenizerV2

    def build():
        return S3TokenizerV2("speech_tokenizer_v2_25hz",
                             ModelConfig(n_mels=128, n_audio_state=128, n_audio_head=2, n_audio_layer=2))

    mx.random.seed(31)
    model = build()
    pd = model.quantizer.fsq_codebook.project_down
    pd.weight = pd.weight * S3TOK_PROJECT_SCALE
    weights = dict(tree_flatten(model.parameters()))
    repo = hub / S3TOK_REPO_FOLDER
    snapshot = repo / "snapshots" / S3TOK_COMMIT
    snapshot.mkdir(parents=True)
    mx.save_safetensors(str(snapshot / "model.safetensors"), weights, metadata={"format": "mlx"})
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(S3TOK_COMMIT)

    tok = build()
    loaded = mx.load(str(snapshot / "model.safetensors"))
    tok.load_weights(list(tok.sanitize(loaded).items()), strict=False)
    mx.eval(tok.parameters())
    return tok


def s3_tokenizer_references(out, names):
    tok = write_s3_tokenizer(out / "hub")
    refs, every = {}, []
    for name in names:
        dump = mx.load(str(out / f"{name}.safetensors"))
        signals = {"s3gen": dump["wav16_from_24"], "t3": dump["wav16_full"][:ENC_COND_LEN]}
        refs[name] = {}
        for which, wav in signals.items():
            mel = log_mel_spectrogram(wav)[None]
            tokens, lens = tok(mel, mx.array([mel.shape[2]]))
            tokens = np.array(tokens)[0].tolist()
            assert int(lens[0]) == len(tokens), f"{name} {which}: {int(lens[0])} tokens said, {len(tokens)} given"
            # Varied codes, or the comparison would prove little (see also the digits below).
            assert len(set(tokens)) >= 20, f"{name} {which}: {len(set(tokens))} distinct tokens of {len(tokens)}"
            every.extend(tokens)
            refs[name][which] = {"mel_frames": int(mel.shape[2]), "tokens": tokens}
        print(f"[fixtures-voice] {name}: S3 tokens {len(refs[name]['s3gen']['tokens'])} (S3Gen), {len(refs[name]['t3']['tokens'])} (T3)",
              file=sys.stderr)
    digits = np.array([[t // 3**i % 3 for i in range(8)] for t in every])
    assert all(len(set(digits[:, i])) == 3 for i in range(8)), "an FSQ digit never takes one of its three values"
    (out / "s3tokenizer.json").write_text(json.dumps({"repo": "mlx-community/S3TokenizerV2", "commit": S3TOK_COMMIT,
                                                      "clips": refs}))
    return tok


# --- CAMPPlus (S3Gen's speaker encoder) -----------------------------------------------------

CAMPPLUS_PREFIX = "s3gen.speaker_encoder."


def campplus_torch_name(name):
    """The PyTorch (3D-Speaker) checkpoint's name of an mlx-audio CAMPPlus parameter: what
    CAMPPlus.sanitize renames back (checked in write_campplus)."""
    name = re.sub(r"^blocks\.(\d+)\.", lambda m: f"xvector.block{int(m.group(1)) + 1}.", name)
    name = re.sub(r"^transits\.(\d+)\.", lambda m: f"xvector.transit{int(m.group(1)) + 1}.", name)
    name = re.sub(r"^(tdnn|dense|out_nonlinear)\.", r"xvector.\1.", name)
    name = re.sub(r"\.layers\.(\d+)\.", lambda m: f".tdnnd{int(m.group(1)) + 1}.", name)
    return re.sub(r"(nonlinear\d?)\.0\.", r"\1.batchnorm.", name)


def write_campplus(out, tts_dir, wavs16):
    """campplus.safetensors: for each clip, CAMPPlus.inference (as S3Gen.embed_ref runs it) of
    the 16 kHz signal made from the 10 s at 24 kHz, with the Chatterbox fixture's
    s3gen.speaker_encoder.* weights loaded through CAMPPlus.sanitize (as S3Gen.sanitize routes
    them) in eval mode (as Model loading leaves it). campplus_torch_names.json: the PyTorch
    checkpoint's name of every tensor, mapped to mlx-audio's, which sanitize is checked to undo
    (with the conv kernels in PyTorch's layout)."""
    weights = {k[len(CAMPPLUS_PREFIX):]: v for k, v in mx.load(str(tts_dir / "model.safetensors")).items()
               if k.startswith(CAMPPLUS_PREFIX)}
    model = CAMPPlus()
    model.load_weights(list(model.sanitize(weights).items()), strict=True)
    model.eval()
    mx.eval(model.parameters())
    # Non-degenerate on random weights: every batch norm's running variance near 1.
    for k, v in weights.items():
        if k.endswith("running_var"):
            assert 0.4 < float(v.min()) and float(v.max()) < 2.0, f"{k}: running variance out of range"

    torch_names = {campplus_torch_name(k): k for k in weights}
    torch_weights = {t: (weights[k].transpose(0, 3, 1, 2) if weights[k].ndim == 4
                         else weights[k].swapaxes(1, 2) if weights[k].ndim == 3 else weights[k])
                     for t, k in torch_names.items()}
    torch_weights["head.bn1.num_batches_tracked"] = mx.array(0)
    back = model.sanitize(torch_weights)
    assert sorted(back) == sorted(weights), "sanitize does not map the PyTorch names back"
    assert all(mx.array_equal(back[k], weights[k]).item() for k in weights), "sanitize changes a tensor"
    (out / "campplus_torch_names.json").write_text(json.dumps(torch_names, indent=0, sort_keys=True))

    dump = {}
    for name, wav16 in wavs16.items():
        xvector = model.inference(mx.array(wav16)[None])
        mx.eval(xvector)
        v = np.array(xvector)
        assert v.shape == (1, 192) and np.isfinite(v).all(), f"{name}: x-vector {v.shape}"
        dump[name] = xvector
    # The random network shrinks activations through its dense blocks, so most of each x-vector
    # is the last batch norm's offset, the same for every clip: what depends on the clip must
    # still be far above the tests' tolerance (1e-3).
    vs = np.concatenate([np.array(v) for v in dump.values()])
    varying = np.abs(vs - vs.mean(axis=0)).max(axis=1)
    assert (varying > 0.05).all(), f"x-vectors hardly depend on the clip: {varying}"
    mx.save_safetensors(str(out / "campplus.safetensors"), dump)
    print(f"[fixtures-voice] CAMPPlus: x-vector std {vs.std():.3f}, off the clips' mean by "
          f"{varying.min():.3f} to {varying.max():.3f}", file=sys.stderr)


if __name__ == "__main__":
    main()
