"""Reference dumps of mlx-audio's Chatterbox Multilingual, run live on the multilingual fixtures.

Usage: chatterbox_mtl_ref.py MTL_DIR MTL_V3_DIR

Loads each folder (written by scripts/fixtures_tts.py) as chatterbox_ref.load_fixture does and
writes DIR/ref/:
  text_tokens.json   [{text, language, tokens}]: Model._tokenize_text(text, language), the ids
                     T3 reads between [START] and [STOP] (punc_norm, the multilingual
                     tokenizer's preprocessing, the [xx] language tag, [SPACE]), for PAIRS
                     (MTL_DIR) or V3_PAIRS (MTL_V3_DIR). Our venv lacks pykakasi, dicta_onnx,
                     russian_text_stresser and spacy_pkuseg: mlx-audio then skips the Japanese,
                     Hebrew and Russian transforms and Chinese word segmentation (with a warning),
                     and so do these references.
  greedy_fr.safetensors, greedy_fr.json (MTL_DIR only)   one greedy Model.generate call in
                     French, recorded as chatterbox_ref.run_case records the English cases.
  meta.json          versions
"""

import contextlib
import json
import sys
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chatterbox_ref import CASES, load_fixture, run_case, save  # noqa: E402

PAIRS = [
    ("Hello world, this is a test.", "en"),
    ("Bonjour, ça va? Élève à l'école.", "fr"),
    ("Grüße aus München: schön!", "de"),
    ("Salut tout le monde", "FR"),
    ("안녕하세요 세계", "ko"),
    ("你好，我是中文日曰〇他。", "zh"),
    ("がっこう、こんにちは世界", "ja"),
    ("Привет, мир! Ёлка", "ru"),
    ("שלום עולם", "he"),
    ("Hola mundo... ¿qué tal?", "es"),
]
V3_PAIRS = [
    ("Bonjour, Élève!", "fr"),
    ("Hello World", "en"),
    ("你好，中文。", "zh"),
    ("안녕 세계", "ko"),
    ("がっこう", "ja"),
    ("Привет, Мир", "ru"),
]
# The English greedy case's options, in French.
GREEDY = dict(CASES[0], name="greedy_fr", text="Bonjour le monde, ceci est un test.", lang_code="fr")


def write_refs(fixture_dir: Path, pairs, greedy: bool):
    t0 = time.time()
    model = load_fixture(fixture_dir)
    assert model.mtl_tokenizer is not None, f"{fixture_dir}: not loaded as multilingual"
    out = fixture_dir / "ref"
    out.mkdir(exist_ok=True)
    tokens = []
    with contextlib.redirect_stdout(sys.stderr):
        for text, language in pairs:
            ids = np.array(model._tokenize_text(text, language)).reshape(-1).tolist()
            tokens.append({"text": text, "language": language, "tokens": ids})
    unk = model.mtl_tokenizer.tokenizer.token_to_id("[UNK]")
    for t in tokens:
        # The fixture tokenizer covers these texts: only the characters meant to be unknown are.
        print(f"  {fixture_dir.name} {t['language']}: {len(t['tokens'])} ids, {t['tokens'].count(unk)} [UNK]", file=sys.stderr)
    (out / "text_tokens.json").write_text(json.dumps(tokens, indent=1, ensure_ascii=False) + "\n")
    if greedy:
        arrays, meta = run_case(model, GREEDY)
        assert len(set(meta["speech_tokens_clean"])) > 1, "greedy speech tokens are all the same"
        save(out, GREEDY["name"], arrays, meta)
    meta = {
        "mlx": mx.__version__,
        "mlx-audio": version("mlx-audio"),
        "tokenizers": version("tokenizers"),
        "python": sys.version.split()[0],
        "fixture": fixture_dir.name,
        "text_preprocessing": model.config.text_preprocessing,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"  {fixture_dir.name}: references written in {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: chatterbox_mtl_ref.py MTL_DIR MTL_V3_DIR")
    write_refs(Path(sys.argv[1]), PAIRS, greedy=True)
    write_refs(Path(sys.argv[2]), V3_PAIRS, greedy=False)
