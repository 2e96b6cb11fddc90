#!/usr/bin/env bash
# Run every benchmark in full mode, one after another (never in parallel: they time each other).
# Usage (from anywhere):  bash benchmarks/run_all.sh        # PYTHON=/path/to/python to override
# Results: benchmarks/results/<name>.md and benchmarks/results/<name>.png
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
for name in bench_feature_sum bench_race bench_noise bench_m2m bench_m2m_speed bench_kde bench_classify bench_distance bench_jl bench_stream bench_dask bench_cli bench_ckm bench_subsampling bench_ledger bench_hardening bench_pca bench_race_regression bench_ckm_auto bench_binary bench_intervals bench_rows_fraction bench_report bench_tall bench_wide; do
    echo "=== ${name} ==="
    "$PYTHON" "benchmarks/${name}.py" "$@"
done
# real tables: one run per ε (needs the [examples] and opendp[mbi] extras)
for eps in 1 0.1 3; do
    echo "=== bench_real_tables ε=${eps} ==="
    out="benchmarks/results/real_tables"; [ "$eps" = 1 ] || out="${out}_eps${eps/./_}"
    "$PYTHON" benchmarks/bench_real_tables.py --epsilon "$eps" --releases 5 --peer-releases 2 --out "$out"
done
