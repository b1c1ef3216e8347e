"""One process of benchmark/distributed.js's MLX-LM side: alone, or as a rank under
mlx.launch (then the model loads with sharded_load, tensor parallel, as mlx_lm.chat and
mlx_lm.benchmark load it in a group). argv: MODEL REQUEST_JSON. The request: {"prompt": [ids],
"maxTokens", "reps", "block": [ids never to sample]}. Runs one warm-up and `reps` greedy
stream_generate calls; rank 0 prints one JSON line: MLX-LM's own generation and prompt
tok/s per call, and the peak memory (MLX's) and resident set (the OS's) of this process."""

import json
import resource
import sys

_stdout = sys.stdout
sys.stdout = sys.stderr

import mlx.core as mx  # noqa: E402
from mlx_lm.generate import stream_generate  # noqa: E402
from mlx_lm.sample_utils import make_logits_processors  # noqa: E402
from mlx_lm.utils import load, sharded_load  # noqa: E402


def main():
    model_dir, request = sys.argv[1], json.loads(sys.argv[2])
    group = mx.distributed.init()
    if group.size() > 1:
        model, tokenizer = sharded_load(model_dir)
    else:
        model, tokenizer = load(model_dir)
    processors = make_logits_processors(logit_bias={t: -1e9 for t in request["block"]})
    runs = []
    for i in range(request["reps"] + 1):
        mx.reset_peak_memory()
        last = None
        for last in stream_generate(model, tokenizer, mx.array(request["prompt"]), max_tokens=request["maxTokens"] if i else 8,
                                    logits_processors=processors):
            pass
        if i:
            runs.append({"generationTps": last.generation_tps, "promptTps": last.prompt_tps,
                         "peakMemory": int(last.peak_memory * 1e9), "tokens": last.generation_tokens})
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if group.rank() == 0:
        _stdout.write(json.dumps({"runs": runs, "maxRss": rss, "size": group.size()}) + "\n")
        _stdout.flush()


if __name__ == "__main__":
    main()
