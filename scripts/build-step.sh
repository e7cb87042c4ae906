# Sourced by cluster-bins.sh and volcano-bins.sh: `step NAME CMD...` runs one build step,
# saying so on stderr, timed with /usr/bin/time -v into $STEP_TIMING when that is set (used
# for the build times in docs/kubernetes.md). $STEP_PREFIX names the script in its messages.
step() {
  local name="$1"; shift
  echo "${STEP_PREFIX:-build}: $name" >&2
  if [ -n "${STEP_TIMING:-}" ] && [ -x /usr/bin/time ]; then
    { echo "=== $name"; } >>"$STEP_TIMING"
    /usr/bin/time -v -a -o "$STEP_TIMING" "$@"
  else
    "$@"
  fi
}
