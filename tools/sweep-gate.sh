# bash tools/sweep-gate.sh FILE: exit 0 where the CUDA tests' verbose output in FILE passed what a sweep needs.
# Code that only runs on CUDA (captures) is first run there: a sweep on it when its tests fail would spend
# the session on failed points. The sweep runs no profiling process (profile: false), so a failing
# profiler or tracing test does not stop it (it is in cuda-tests.txt for the next session). Every other
# test does, the cuBLAS-workspace one included: a capture that holds a default-pool workspace writes into
# other tensors. Tested in tests/test_sweep.py.
file=$1
# pytest's summary line, not the file's last line: an abort at the interpreter's exit can follow it, and an
# abort before it leaves none
if ! grep -qE "^=+ .*[0-9]+ passed.* in [0-9.]+s" "$file" ||
   grep -E "::[^ ]+ (FAILED|ERROR)" "$file" | grep -vqE "::[^ ]*(profil|tracing|kernel_sums)"; then
  echo "CUDA tests the sweep needs did not all pass: no sweep"; grep -E " (FAILED|ERROR)" "$file"
  exit 1
fi
