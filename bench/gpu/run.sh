#!/usr/bin/env bash
# THE command to run on a GPU machine: check every exported plan and time eager, torch.compile (default and
# max-autotune) and EqiForge within an 8-minute budget (420 s of work, the rest start-up and a compile that
# runs over). Results: bench/results/gpu.json, gpu.md and gpu_records.jsonl (or --out DIR); a short table is
# printed last.
#
# The plans are made beforehand where egglog is installed (python bench/gpu/export_plans.py) into
# bench/gpu/plans, which git ignores: carry that folder to the GPU machine with the working tree.
# Extra arguments go to run.py, e.g. --out DIR, --no-max-autotune, --budget-s 300, --programs mlp_fp16.
# Without CUDA it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${PYTHON:-python3}" bench/gpu/run.py --budget-s 420 "$@"
