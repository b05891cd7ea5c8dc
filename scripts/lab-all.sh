#!/usr/bin/env bash
# `make lab-all`: every lab-* target outside `make test`, in turn, each from a fresh lab (each
# target's pytest session destroys the lab before and after it). One line per target on the
# screen and in results/lab-all.md (pass or fail, pytest's own summary, the time); each target's
# whole output in results/lab-all/<target>.log. Exits 1 when a target failed, 2 on a bad
# LAB_ALL_TARGETS (a space-separated subset, in the order to run; default: all of them).
set -uo pipefail
cd "$(dirname "$0")/.."

ALL=(lab-rabbitmq lab-security lab-valkey lab-mixed lab-projects lab-ha lab-cluster)
read -r -a targets <<<"${LAB_ALL_TARGETS:-${ALL[*]}}"
if [ ${#targets[@]} -eq 0 ]; then
  echo "lab-all: LAB_ALL_TARGETS names no target; choose from: ${ALL[*]}" >&2
  exit 2
fi
for target in "${targets[@]}"; do
  if [[ ! " ${ALL[*]} " == *" $target "* ]]; then
    echo "lab-all: LAB_ALL_TARGETS: unknown target '$target'; choose from: ${ALL[*]}" >&2
    exit 2
  fi
done

logs=results/lab-all
summary=results/lab-all.md
mkdir -p "$logs"
{
  echo "# make lab-all, $(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD 2>/dev/null || echo 'no git')"
  echo
} >"$summary"
failed=0
for target in "${targets[@]}"; do
  start=$SECONDS
  make --no-print-directory "$target" >"$logs/$target.log" 2>&1
  rc=$?
  took=$((SECONDS - start))
  # pytest's last summary line, e.g. "3 passed, 1 deselected in 812.40s (0:13:32)"
  result=$(grep -E '^=+ .*(passed|failed|error|no tests ran).* =+$' "$logs/$target.log" | tail -n 1 |
    sed -E 's/^=+ //; s/ =+$//')
  if [ "$rc" -eq 0 ]; then verdict=PASS; else verdict=FAIL failed=1; fi
  line=$(printf '%s: %s, %s (%d min %02d s; log %s)' "$target" "$verdict" \
    "${result:-make exited $rc before pytest reported}" $((took / 60)) $((took % 60)) \
    "$logs/$target.log")
  echo "$line"
  echo "- $line" >>"$summary"
done
exit "$failed"
