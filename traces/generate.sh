#!/usr/bin/env bash
# Regenerates every bundled trace in this folder, byte for byte (seeded): bash traces/generate.sh
set -euo pipefail
cd "$(dirname "$0")/.."
synth() { python -m pagesim trace synth "$@"; }
synth --preset sharegpt   --num-requests 1000 --rate 10 --seed 0 --name sharegpt-poisson-1k    --out traces/sharegpt-poisson-1k.jsonl
synth --preset azure-conv --num-requests 2000 --rate 5  --seed 0 --name azure-conv-like-2k     --out traces/azure-conv-like-2k.jsonl
synth --preset sharegpt   --num-requests 1000 --rate 10 --arrival gamma --cv 3 --seed 0 --name sharegpt-bursty-1k --out traces/sharegpt-bursty-1k.jsonl
synth --preset kshot      --num-requests 500  --rate 8  --seed 0 --name kshot-shared-prefix-500 --out traces/kshot-shared-prefix-500.jsonl
synth --preset multiturn  --num-requests 300  --rate 5  --seed 0 --name multiturn-300          --out traces/multiturn-300.jsonl
