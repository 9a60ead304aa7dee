#!/usr/bin/env bash
# Fuzz smoke for CI: checks the targets' formatting and clippy, builds
# every cargo-fuzz target on the stable toolchain (no sanitizer, `-s none`),
# replays each target's committed seeds, then fuzzes each for a short time. Any crash, or a seed that fails, fails the
# script. Targets come from `cargo fuzz list`, so a new target is covered
# without editing this file.
#
# Usage (from anywhere): fuzz/ci.sh
#   FUZZ_SECONDS=60   time per target for the fuzzing run (default 60)
#
# Per target <t>, if present: seeds in fuzz/seeds/<t>/ (committed),
# dictionary fuzz/dict/<t>.dict (else fuzz/dict/sse.dict); the growing corpus
# goes to $FUZZ_CORPUS_DIR/<t>/ (default ~/.cache/shimgate/fuzz-corpus, outside
# the clone, so each CI run on a machine starts from where the last one got
# to). A crash leaves its input in fuzz/artifacts/<t>/; minimise it with
# `cargo fuzz tmin -s none <t> <file>` and turn it into a unit test.
set -euo pipefail

cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-60}"
corpus_root="${FUZZ_CORPUS_DIR:-${HOME:-/tmp}/.cache/shimgate/fuzz-corpus}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

# The fuzz crate is its own workspace, so the root's fmt and clippy steps
# do not see it.
echo "== rustfmt and clippy of the fuzz targets (warnings denied)"
(cd fuzz && cargo fmt --check && cargo clippy --all-targets -- -D warnings)

echo "== building all fuzz targets (stable, -s none)"
cargo fuzz build -s none

failed=()
for target in $(cargo fuzz list); do
    seeds="fuzz/seeds/$target"
    corpus="$corpus_root/$target"
    dict="fuzz/dict/$target.dict"
    [[ -f "$dict" ]] || dict="fuzz/dict/sse.dict"
    dict_arg=()
    [[ -f "$dict" ]] && dict_arg=("-dict=$dict")
    mkdir -p "$corpus"

    if [[ -d "$seeds" ]]; then
        echo "== $target: replaying $(find "$seeds" -type f | wc -l) seeds"
        if ! cargo fuzz run -s none "$target" "$seeds" -- -runs=0; then
            failed+=("$target (seeds)")
            continue
        fi
        # The corpus directory comes first: libFuzzer writes new inputs
        # there, never into the committed seeds.
        dirs=("$corpus" "$seeds")
    else
        dirs=("$corpus")
    fi

    echo "== $target: fuzzing for ${seconds}s"
    if ! cargo fuzz run -s none "$target" "${dirs[@]}" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 "${dict_arg[@]}"; then
        failed+=("$target")
    fi
done

if ((${#failed[@]})); then
    echo "== FAILED: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "== all fuzz targets passed"
