#!/usr/bin/env bash
# The newcomer's first run, cold (issue 41): a fresh clone, an empty target directory, the
# crates already downloaded, then the README's run command timed from `cargo run` to the demo's
# verdict. Prints the wall-clock seconds on stdout (the CPU seconds, cargo's build time and the
# demo's summary on stderr); exits non-zero, with the end of the output, if the command fails.
#
#   benches/first-run.sh [REV]      # REV: a commit of this repository, HEAD by default
#
# Run it on a quiet machine: the number is wall-clock time, and other builds on the same cores
# inflate it. BENCHMARKS.md ("The first run") records what it printed.
set -euo pipefail

# The README's run command, word for word; checked against README.md below so the two cannot drift.
readonly RUN='cargo run --profile demo -p kxp-cli --bin kxp -- demo'

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
rev=$(git -C "$repo" rev-parse "${1:-HEAD}")
grep -qF "$RUN" "$repo/README.md" || {
    echo "README.md no longer says \`$RUN\`: update this script" >&2
    exit 2
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone --quiet "$repo" "$work/kxp-webhooks"
cd "$work/kxp-webhooks"
git checkout --quiet "$rev"
# Crates downloaded, nothing built: only the download is done before the clock starts.
cargo fetch --locked --quiet
unset CARGO_TARGET_DIR CARGO_BUILD_TARGET_DIR
echo "first run of $rev in $work" >&2

TIMEFORMAT='%R %U %S'
{ time $RUN >"$work/run.log" 2>&1; } 2>"$work/time" || {
    tail -n 40 "$work/run.log" >&2
    echo "the run command failed" >&2
    exit 1
}
read -r real user sys <"$work/time"
echo "CPU (user + sys) seconds: $(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')" >&2
grep -E '^ +Finished ' "$work/run.log" >&2 || true
sed -n '/^kxp demo summary/,$p' "$work/run.log" >&2
echo "$real"
