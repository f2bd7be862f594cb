#!/bin/sh
# tests/trainer/require_gpu_test.sh GPU_TEST_BINARY CASE
# Runs one case of a `gpu` test binary under SLUICE_REQUIRE_GPU=1. Passes when the case passed (a
# device is usable), or when it failed saying why it could not run; fails when it skipped (77),
# which is what a GPU machine with an old driver used to report as green.
out=$(SLUICE_REQUIRE_GPU=1 "$1" "$2" 2>&1)
rc=$?
echo "$out"
echo "exit code $rc"
[ "$rc" -eq 0 ] && exit 0
[ "$rc" -ne 77 ] && echo "$out" | grep -q "FAILED: SLUICE_REQUIRE_GPU=1 and " && exit 0
exit 1
