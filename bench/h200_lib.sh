# Shared by the bench/h200_*.sh device scripts (source it): one pagesim command with a time limit and the
# progress bars filtered out, and the summary of the live runs and profile a script made.
#   run ARGS...            python3 -m pagesim ARGS, under timeout ${BUDGET:-200} (adds --force when FORCE=1)
#   profile_summary P      calibration time and held-out fit of the profile P
#   runs_summary RESULTS   per run in RESULTS/live: wall time, warm-up, compilations and graph captures during it, profile
#   pack                   OUT/results.tgz from OUT/results (the device returns files at most two levels under $OUT;
#                          rewritten after every step, so a call cut short still returns what was recorded)
#   fp8_and_longdoc_b_windows SUFFIX  the fp8 `calibrate` and fp8 window, then longdoc-b with `live --calibrate`
#   longdoc_windows SUFFIX longdoc-b with its own `live --calibrate`, then longdoc-a with its profile (H200 only)
#   gpu_line               the GPU's name, driver and memory, one line
#   live_call              the live scripts' set-up: R=$OUT/results with live/ and profiles/, unbuffered Python, gpu_line
#   kernel_call OUT        the kernel scripts' set-up: the carried wheels installed, PYTHONPATH, OUT/log.txt begun
#                          with the GPU's clocks, the versions and the commit; defines `step NAME` (a line in the log)
#   clocks_start [MS]      nvidia-smi's SM/memory clock, power, temperature and clock event reasons every MS ms (50)
#                          into R/clocks.csv, in the background (after live_call); clocks_stop ends it and gzips it
#   mark NAME EDGE         a line "UTC-time NAME EDGE" in R/phases.txt (bench/clock_phases.py reads both files)
#   calibrate_marked P     bf16 `calibrate` of Llama-3-8B into P, its phase marked, its fit summarised
#   window_preempt / window_kshot / window_swap / window_offload / window_azure_conv / window_azure_code / window_fp8 / window_longdoc_a
#                          SUFFIX PROFILE [TRACES]: a committed window, one home each; window_longdoc_b_calibrated
#                          SUFFIX: longdoc-b with its own `live --calibrate`; calibrate_fp8_marked P: the fp8 `calibrate`
#                          (live labels a run with the card it runs on, engine/device_gpu.py; calibrate_marked and
#                          calibrate_fp8_marked pass --gpu ${GPU:-h200}, refused on another card)
run() {
  echo "== $(date +%T) $*"
  timeout "${BUDGET:-200}" python3 -m pagesim "$@" ${FORCE:+--force} 2>&1 | grep -v "req/s\]\|it/s\]\|workload/s\]"
}
profile_summary() {
  [ -f "$1" ] || { echo "profile_summary: no profile at $1 (the command that should have written it failed)"; return 0; }
  python3 -c "import json, sys; p = json.load(open(sys.argv[1])); r = p.get('report', {})
print('calibration_s', p.get('calibration_s'), 'fit', r.get('mape'), r.get('by_kind'), 'swap', p.get('swap_bandwidth'))" "$1"
}
runs_summary() {
  for d in "$1"/live/*/; do
    [ -f "$d/summary.json" ] && python3 -c "import json, sys; s = json.load(open(sys.argv[1] + 'summary.json')); r = s['runs']['live']
print(sys.argv[1], 'wall', round(r.get('wall_s', 0), 1), 'warmup_s', r.get('warmup_s'), 'compilations_during_run',
      r.get('compilations_during_run'), r.get('compiled_kernels_during_run'), 'graph_captures_during_run',
      r.get('graph_captures_during_run'), 'gc', r.get('gc_collections_during_run'), 'profile', s.get('profile'))" "$d"
  done
}
pack() { tar -czf "$OUT/results.tgz" -C "$OUT" results; }
# The fp8 `calibrate` and the fp8 k-shot window with its profile, then longdoc-b with its own `live --calibrate`
# (Llama-3.1-8B at 32k); $1: the runs' suffix (needs live_call's R and the script's D)
fp8_and_longdoc_b_windows() {
  PF="$R/profiles/h200-llama-3-8b-fp8-$D-$1.json"
  calibrate_fp8_marked "$PF"; window_fp8 "$1" "$PF"; window_longdoc_b_calibrated "$1"
}
gpu_line() { nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader; }
live_call() {
  export PYTHONUNBUFFERED=1
  R=$OUT/results
  mkdir -p "$R/live" "$R/profiles"
  gpu_line
}
kernel_call() {
  # the carried wheels (simpy, xxhash: cp312 for the device Python): from .gpuwt/<copy> or the root
  local whl=../whl; [ -d "$whl" ] || whl=.gpuwt/whl
  [ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site "$whl"/*.whl
  export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
  log=$1/log.txt
  step() { echo "== $(date +%T) $*" >>"$log"; }
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$log" 2>&1
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >>"$log" 2>&1
  echo "commit ${PAGESIM_GIT_COMMIT:-unknown}" >>"$log"
}
clocks_start() {
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
      --format=csv -lms "${1:-50}" >"$R/clocks.csv" 2>&1 &
  SMI=$!
}
clocks_stop() { kill "$SMI"; gzip -f "$R/clocks.csv"; }
mark() { echo "$(date -u '+%Y/%m/%d %H:%M:%S.%3N') $*" >>"$R/phases.txt"; }
# The committed windows' commands, one home each (round 19 on; $1: the run's name suffix, $2: the profile, $3 for
# Azure: the folder with the Azure 2023 CSVs); each marks its phase in R/phases.txt and packs.
window_preempt() {
  mark "preempt-$1" start
  BUDGET=75 run live traces/sharegpt-bursty-1k.jsonl --limit 200 --watermark 0.01 --profile "$2" --num-gpu-blocks 400 \
      --out "$R/live/preempt-sharegpt-bursty-$1"; mark "preempt-$1" end; pack
}
window_kshot() {
  mark "kshot-$1" start
  BUDGET=80 run live traces/kshot-shared-prefix-500.jsonl --limit 250 --enable-prefix-caching --num-gpu-blocks 900 \
      --watermark 0.01 --profile "$2" --out "$R/live/kshot-prefix-pressure-$1"; mark "kshot-$1" end; pack
}
window_azure_conv() { window_azure conv "$@"; }
window_azure_code() { window_azure code "$@"; }
window_azure() {  # $1: conv or code; then SUFFIX PROFILE TRACES
  mark "azure-$1-$2" start
  BUDGET=100 run live "$4/AzureLLMInferenceTrace_$1.csv" --start-s 600 --end-s 660 --watermark 0.01 --profile "$3" \
      --out "$R/live/azure-$1-600-660-$2"; mark "azure-$1-$2" end; pack
}
window_swap() {
  mark "swap-$1" start
  BUDGET=75 run live traces/sharegpt-bursty-1k.jsonl --limit 200 --watermark 0.01 --profile "$2" \
      --preemption-mode swap --num-gpu-blocks 500 --out "$R/live/swap-sharegpt-bursty-$1"; mark "swap-$1" end; pack
}
window_offload() {  # $2: a profile with the host tier's measured bandwidth (bench.host_tier_bw --profile-out)
  mark "offload-$1" start
  # 150 s: on a fresh machine (no Triton cache) the warm-up alone ran the round-22 call past 90 s
  BUDGET=150 run live traces/kshot-shared-prefix-500.jsonl --limit 150 --enable-prefix-caching --num-gpu-blocks 600 \
      --watermark 0.01 --kv-offloading-size 4.7 --profile "$2" --out "$R/live/offload-kshot-$1"; mark "offload-$1" end; pack
}
window_fp8() {  # $2: an fp8 profile (calibrate --kv-cache-dtype fp8)
  mark "fp8-$1" start
  BUDGET=90 run live traces/kshot-shared-prefix-500.jsonl --enable-prefix-caching --watermark 0.01 --limit 150 \
      --num-gpu-blocks 600 --kv-cache-dtype fp8 --profile "$2" --out "$R/live/fp8-kshot-$1"; mark "fp8-$1" end; pack
}
window_longdoc_b_calibrated() {  # longdoc-b with its own `live --calibrate` (Llama-3.1-8B at 32k): RUN/profile.json
  mark "longdoc-b-$1" start
  BUDGET=200 run live traces/longdoc-b.jsonl --model llama-3.1-8b --max-model-len 32768 --enable-prefix-caching \
      --watermark 0.01 --calibrate --out "$R/live/longdoc-b-$1"; mark "longdoc-b-$1" end
  profile_summary "$R/live/longdoc-b-$1/profile.json"; pack
}
window_longdoc_a() {  # $2: a Llama-3.1-8B profile (longdoc-b's own)
  mark "longdoc-a-$1" start
  BUDGET=90 run live traces/longdoc-a.jsonl --model llama-3.1-8b --max-model-len 32768 --enable-prefix-caching \
      --watermark 0.01 --profile "$2" --out "$R/live/longdoc-a-$1"; mark "longdoc-a-$1" end; pack
}
# The two long-document windows on the Gluon prefill (rounds 28-29): on an H200 only (exit 3 otherwise), with clocks,
# longdoc-b with its own `live --calibrate`, then longdoc-a with that profile; $1: the runs' suffix (needs OUT and log)
longdoc_windows() {
  D=$(date -u +%F)
  live_call >>"$log"
  gpu_line | grep -q H200 || { echo "not an H200: $(gpu_line); nothing recorded" >>"$log"; exit 3; }
  clocks_start 50
  window_longdoc_b_calibrated "$1" >>"$log" 2>&1
  window_longdoc_a "$1" "$R/live/longdoc-b-$1/profile.json" >>"$log" 2>&1
  clocks_stop
  runs_summary "$R" >>"$log"; pack
}
calibrate_fp8_marked() {  # $1: the fp8 profile to write
  mark calibrate-fp8 start; BUDGET=${CAL_BUDGET:-150} run calibrate --model llama-3-8b --gpu ${GPU:-h200} --kv-cache-dtype fp8 --out "$1"
  mark calibrate-fp8 end; profile_summary "$1"; pack
}
calibrate_marked() {  # $1: the profile to write (bf16 Llama-3-8B), its phase marked and its fit summarised
  mark calibrate start; BUDGET=150 run calibrate --model llama-3-8b --gpu ${GPU:-h200} --out "$1"; mark calibrate end
  profile_summary "$1"; pack
}
window_multiturn() {
  mark "multiturn-$1" start
  BUDGET=90 run live traces/multiturn-300.jsonl --limit 200 --enable-prefix-caching --profile "$2" \
      --out "$R/live/multiturn-200-$1"; mark "multiturn-$1" end; pack
}
window_pair() {  # the paper's claim: Azure conv from 600 s, 200 requests, arrivals 20x compressed, 4096 blocks, paged
  # then contiguous `max`; $3: the folder with the Azure 2023 CSVs
  mark "pair-$1" start
  BUDGET=90 run live "$3/AzureLLMInferenceTrace_conv.csv" --start-s 600 --limit 200 --time-scale 20 --num-gpu-blocks 4096 \
      --watermark 0.01 --profile "$2" --out "$R/live/pair-conv-paged-$1"
  BUDGET=120 run live "$3/AzureLLMInferenceTrace_conv.csv" --start-s 600 --limit 200 --time-scale 20 --num-gpu-blocks 4096 \
      --watermark 0.01 --baseline max --profile "$2" --out "$R/live/pair-conv-contiguous-max-$1"; mark "pair-$1" end; pack
}
