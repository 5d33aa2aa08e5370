"""Which imports and steps before a llama.cpp model load make it crash: each sequence in a fresh process.

On the H200 machine (CUDA build of llama-cpp-python 0.3.36, see bench/README.md) a model load died
with SIGSEGV in every process that had imported numpy before llama_cpp, and the vlm_gguf engine
aborted ("free(): invalid pointer") in its first OpenCV call with llama_cpp imported first: both
because libggml-cuda.so carries and exports its own copy of part of libstdc++ (the step
`stdcxx_global`, what appliance/llama_preload.py does, cures both). Native crashes cannot be caught
in-process, so every variant runs in a child process of its own and only its exit status and last
lines come back:

    PYTHONPATH=/tmp/site:. python3 bench/vlm_gpu_probe.py --model-dir DIR [--json OUT] [--native-trace]
        [VARIANT ...]

PYTHONFAULTHANDLER=1 in a variant prints the Python stack of a crash; --native-trace (below) its
native stack.

A VARIANT is a comma-separated list of steps, optionally after environment assignments separated by
spaces: "numpy,llama,load" or "PYTHONFAULTHANDLER=1 llama,cv2,engine". Without variants the default
matrix below runs. DIR holds model-Q8_0.gguf (or --model NAME) and mmproj-f16.gguf, plus a
manifest.json for the `engine` step (`python -m quantize.gguf manifest`).

Steps:
  numpy, cv2, pydantic, yaml   import that package now
  llama                        import llama_cpp (dlopens libggml*, libllama, libmtmd)
  appliance                    import the appliance package (CUDA build: libstdc++ made global first)
  stdcxx_global                load (or promote) libstdc++ RTLD_GLOBAL, as llama_preload does
  runtime                      import the engine's runtime (also llama_backend_init)
  faulthandler                 Python stack on a native crash
  maps                         list the shared libraries mapped so far
  load                         the model fully offloaded, a 4,096-token context, 1,616 + 3 tokens decoded
  load_cpu                     the same with n_gpu_layers=0
  engine                       the vlm_gguf engine reads two synthetic pages (no draft)
  engine_hint                  the same with a text hint to draft from (the cascade's path)
  no_cv2                       put a stand-in `cv2` (BGR->RGB only) in place, so `engine` loads no OpenCV
  no_gpu_memory                the engine never asks ggml for the devices' memory (a path only a GPU takes)
  cv2info                      which OpenCV: its file, version, parallel framework, OpenCL, IPP, LAPACK
  cv2op                        OpenCV's first work: BGR->RGB and an area resize of a 1540x1100 page
  cv2_no_opencl                cv2.ocl.setUseOpenCL(False) before any OpenCV work
  ocl                          ask OpenCV whether OpenCL is there (loads the OpenCL runtime if any)

--native-trace compiles bench/native_trace.c (needs a C compiler) and preloads it into every child:
a SIGABRT or SIGSEGV then prints the native stack, which PYTHONFAULTHANDLER cannot.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repo root is on PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The check of the fix (appliance/llama_preload.py): the first and last variant, with the preload
# switched off, crash; every other one, each import order with libstdc++ made global, must end ok.
DEFAULT_VARIANTS = (
    "OCR_APPLIANCE_NO_LLAMA_PRELOAD=1 appliance,llama,cv2op",
    "stdcxx_global,llama,cv2op",
    "numpy,stdcxx_global,llama,load",
    "cv2,cv2op,stdcxx_global,llama,load,cv2op",
    "numpy,cv2,appliance,load,cv2op",
    "appliance,engine",
    "numpy,appliance,engine_hint",
    "OCR_APPLIANCE_NO_LLAMA_PRELOAD=1 numpy,appliance,load",
)


def _stand_in_cv2() -> None:
    """A `cv2` module with only what the engine calls on a page that needs no scaling."""
    module = types.ModuleType("cv2")
    module.COLOR_BGR2RGB = 4  # type: ignore[attr-defined]
    module.INTER_AREA = 3  # type: ignore[attr-defined]
    module.cvtColor = lambda image, _code: image[:, :, ::-1].copy()  # type: ignore[attr-defined]
    sys.modules["cv2"] = module


def run_steps(steps: list[str], model_dir: Path, model_name: str, device: str = "auto") -> None:
    """Run the steps in order in this process, saying each before it starts (the last one said crashed)."""
    model = model_dir / model_name
    for step in steps:
        print(f"step {step}", flush=True)
        if step in ("numpy", "cv2", "pydantic", "yaml", "faulthandler"):
            module = __import__(step)
            if step == "faulthandler":
                module.enable()
        elif step == "llama":
            import llama_cpp  # noqa: F401
        elif step == "appliance":
            import appliance  # noqa: F401
        elif step == "runtime":
            from appliance.engines.vlm_gguf import runtime  # its import runs llama_backend_init
        elif step == "stdcxx_global":
            import ctypes

            ctypes.CDLL("libstdc++.so.6", mode=os.RTLD_GLOBAL | os.RTLD_NOW)
        elif step == "no_cv2":
            _stand_in_cv2()
        elif step == "no_gpu_memory":
            from appliance.engines.vlm_gguf import runtime

            runtime.gpu_memory_used = lambda: None
        elif step == "cv2info":
            import cv2

            build = cv2.getBuildInformation().splitlines()
            wanted = ("Parallel framework", "OpenCL:", "Intel IPP:", "Lapack", "Version control")
            print(cv2.__version__, cv2.__file__, flush=True)
            print("\n".join(line.strip() for line in build if line.strip().startswith(wanted)), flush=True)
        elif step == "cv2op":
            import cv2
            import numpy as np

            pixels = np.random.default_rng(0).integers(0, 255, (1100, 1540, 3), dtype=np.uint8)
            rgb = cv2.cvtColor(pixels, cv2.COLOR_BGR2RGB)
            small = cv2.resize(rgb, None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA)
            print(f"cv2 work done: {small.shape}", flush=True)
        elif step == "cv2_no_opencl":
            import cv2

            cv2.ocl.setUseOpenCL(False)
        elif step == "ocl":
            import cv2

            print(f"OpenCL there: {cv2.ocl.haveOpenCL()}, used: {cv2.ocl.useOpenCL()}", flush=True)
        elif step == "maps":
            maps = Path("/proc/self/maps").read_text(encoding="utf-8").splitlines()
            print("\n".join(sorted({line.split()[-1] for line in maps if ".so" in line})), flush=True)
        elif step in ("load", "load_cpu"):
            from appliance.engines.vlm_gguf import runtime

            started = time.perf_counter()
            text = runtime.TextModel(model, n_gpu_layers=0 if step == "load_cpu" else 999)
            print(f"loaded {text.n_layer} layers in {time.perf_counter() - started:.2f} s", flush=True)
            settings = runtime.ContextSettings(
                n_ctx=4096, n_batch=512, n_threads=os.cpu_count() or 1, kv_type="f16", flash_attention=True
            )
            context = runtime.Context(text, settings)
            context.append(list(range(1000, 2616)), logits=False)
            print(f"decoded, logits {context.append([1000, 1001, 1002]).shape}", flush=True)
            context.close()
            text.close()
        elif step in ("engine", "engine_hint"):
            from appliance.config import VlmGgufConfig
            from appliance.engines.vlm_gguf.engine import VlmGgufEngine
            from bench.vlm_gpu_bench import synthetic_page

            config = VlmGgufConfig.model_validate(
                {
                    "model_dir": model_dir,
                    "max_tokens_per_page": 300,
                    "verify_hashes": False,
                    "draft": {"source": "ocr_hint" if step == "engine_hint" else "none"},
                    "device": device,
                }
            )
            engine = VlmGgufEngine(config)
            print(f"engine loaded: {json.dumps(engine.describe().get('gpu_memory'))}", flush=True)
            # engine_hint: an ONNX-like text to draft from (tokenized and aligned: TextHintDraft).
            hint = "ACME STORE\nTEA 3.00\nTOTAL 12.50" if step == "engine_hint" else None
            for seed in range(2):
                page = engine.read(synthetic_page(1540, 1100, seed)[:, :, ::-1], hint=hint)
                details = page.details.get("vlm_gguf", {})
                tokens, total_ms = details.get("generated_tokens"), details.get("total_ms")
                print(f"page {seed}: {tokens} tokens, {total_ms} ms", flush=True)
            engine.close()
        else:
            raise SystemExit(f"unknown step {step!r}")
    print("OK", flush=True)


def parse_variant(variant: str) -> tuple[dict[str, str], list[str]]:
    """'A=1 B=2 step,step' -> ({'A': '1', 'B': '2'}, ['step', 'step'])."""
    *assignments, steps = variant.split()
    env = dict(assignment.split("=", 1) for assignment in assignments)
    return env, [step for step in steps.split(",") if step]


def run_variant(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    env, steps = parse_variant(variant)
    command = [sys.executable, str(Path(__file__).resolve()), "--model-dir", str(args.model_dir)]
    command += ["--model", args.model, "--device", args.device, "--child", ",".join(steps)]
    started = time.perf_counter()
    try:
        environment = {**os.environ, **env}
        if args.preload:
            environment["LD_PRELOAD"] = " ".join(filter(None, [args.preload, environment.get("LD_PRELOAD")]))
        done = subprocess.run(
            command, env=environment, capture_output=True, text=True, timeout=args.timeout, check=False
        )
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        partial = b"".join(part for part in (expired.stdout, expired.stderr) if isinstance(part, bytes))
        code, output = None, f"{partial.decode(errors='replace')}\ntimed out after {args.timeout} s"
    said = [line[5:] for line in output.splitlines() if line.startswith("step ")]
    outcome = "ok" if code == 0 else ("timeout" if code is None else _exit_name(code))
    return {
        "variant": variant,
        "outcome": outcome,
        "last_step": said[-1] if said and code != 0 else None,
        "seconds": round(time.perf_counter() - started, 1),
        "tail": output.strip().splitlines()[-args.tail :],
    }


def _build_native_trace() -> str:
    """Compile bench/native_trace.c into a temporary shared library; its path."""
    source = Path(__file__).resolve().parent / "native_trace.c"
    library = Path(tempfile.mkdtemp(prefix="native-trace-")) / "native_trace.so"
    compiler = shutil.which("cc") or shutil.which("gcc") or "cc"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(library), str(source)], check=True)
    return str(library)


def _exit_name(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", help="default: the matrix in this file")
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--model", default="model-Q8_0.gguf")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"], help="the engine step's")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--tail", type=int, default=8, help="last lines of a variant's output shown")
    parser.add_argument("--json", type=Path, help="write the outcomes here")
    parser.add_argument("--native-trace", action="store_true", help="preload bench/native_trace.c")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        run_steps(args.child.split(","), args.model_dir, args.model, args.device)
        return 0
    args.preload = _build_native_trace() if args.native_trace else None
    results = []
    for variant in args.variants or DEFAULT_VARIANTS:
        result = run_variant(variant, args)
        results.append(result)
        where = f" in step {result['last_step']}" if result["last_step"] else ""
        print(f"{result['outcome']:<8} {result['seconds']:>5.1f} s  {variant}{where}", flush=True)
        if result["outcome"] != "ok":
            print("\n".join(f"         | {line}" for line in result["tail"]), flush=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0 if all(result["outcome"] == "ok" for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
