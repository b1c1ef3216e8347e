"""The line protocol of the benchmark workers (benchmark/python-worker.js on the other end):
one JSON request per stdin line, {"cmd": name, ...}, one JSON answer per stdout line.

Import it before anything that may print: from then on print() and library logs go to
stderr, so stdout carries answers only.
"""

import json
import sys
import traceback
from importlib.metadata import version

_stdout = sys.stdout
sys.stdout = sys.stderr


def serve(commands):
    """Answers requests until stdin closes; `commands` maps a cmd to a function of the request."""
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            cmd = req.get("cmd")
            if cmd not in commands:
                raise ValueError(f"unknown cmd: {cmd}")
            answer = commands[cmd](req)
        except Exception as e:  # one bad request must not end the worker
            traceback.print_exc(file=sys.stderr)
            answer = {"error": str(e) or type(e).__name__}
        _stdout.write(json.dumps(answer) + "\n")
        _stdout.flush()


def blas_in_use():
    """Which BLAS the process has mapped (Linux): the OpenBLAS the benchmarks preload, or the wheel's own."""
    if sys.platform != "linux":
        return "n/a"
    with open("/proc/self/maps") as f:
        maps = f.read()
    if "openblas" in maps:
        return "openblas"
    return "reference (libblas from the mlx-cpu wheel)" if "libblas" in maps else "unknown"


def info(package_key, package):
    """The `info` answer: MLX's version, `package`'s (under `package_key`), the BLAS, Python, the device."""
    import mlx.core as mx

    return {
        "mlx": mx.__version__,
        package_key: version(package),
        "blas": blas_in_use(),
        "python": sys.version.split()[0],
        "device": str(mx.default_device()),
    }
