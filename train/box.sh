#!/bin/bash
# Trains on an offline GPU box over several consecutive calls, each under a size limit on what it
# carries, with a run that outlives the call that starts it (train/README.md, "Known limits").
#
#   bash train/box.sh stash                   # copy the parts of .train-carry/ this call carried
#   bash train/box.sh start [train_vlm opts]  # copy the checkout, unpack train/weights, start run.sh
#   bash train/box.sh poll [SECONDS]          # wait, then show the run's last lines
#   bash train/box.sh finish                  # wait for the end, copy the export's parts and logs to $OUT
#   bash train/box.sh fetch seed-S            # in a later call: a run's parts that finish could not bring
#
# start passes MINUTES, WORKERS, EVAL and RUN_DIR on to run.sh, and refuses options without
# `--init-from` unless FROM_SCRATCH=1: a run that forgets it trains from random weights for the
# whole call (its loss near 8, where a run from an export starts near 0.1). train/weights' export
# is unpacked to $BOX/init/hf_bf16 for `--init-from`, or with INIT=.train-carry/DIR the export whose parts
# (hf_bf16.tgz.part-*, as finish brings them back) were stashed there: a soup of the last runs,
# say. A call carries 64 MiB with the checkout (38 MB, train/weights' archive most of it), so a
# part of 14 MiB goes in a stash call of its own, or beside the 13.6 MB wheels-transformers/ when
# the two come to less than 26 MiB. The box keeps $BOX only while it is held: on a box given back
# and started afresh, poll and finish exit at once with code 4.
#
# SEEDS="51 52" start runs the same options once per seed, side by side on the one GPU, each with
# `--seed S` added, RUN_DIR/seed-S as its run folder and WORKERS data workers (so WORKERS=7 for two
# on 16 cores); finish then copies each export's parts to $OUT/seed-S/. A lone run of this small
# model leaves the GPU half idle, so two train at three quarters of one's speed each or more
# (train/README.md, "Two seeds at once" and "Six runs on from K"), and one run against one other
# does not rank two recipes.
#
# A call brings back at most BACK_FILES files and BACK_BYTES in all from $OUT (8 and 64 MiB by
# default): two deep exports (three 15 MiB parts each) are more than that. finish copies the runs
# whose parts fit, in order, and names the others; `fetch seed-S` in the next call brings each.
set -euo pipefail
BOX=${BOX:-/tmp/box}
RUNOUT=$BOX/trainout
BACK_FILES=${BACK_FILES:-8}
BACK_BYTES=${BACK_BYTES:-67108864}
verb=${1:?usage: box.sh stash|start|poll|finish|fetch}
shift
# A box given back between two calls comes back fresh, with no run: poll and finish say so at once
# instead of sleeping (or waiting for ever) on a box that holds nothing.
require_run() {
    [ -e "$BOX/run.log" ] && return 0
    echo "no run on this box: it was given back since start, or start was never called" >&2
    exit 4
}
# Starts run.sh in the background, outliving this call: output folder (under $BOX), run folder, options.
launch() {
    mkdir -p "$BOX/$1"
    echo "$1" >> "$BOX/runs"
    # A run started here is a new one: train_vlm resumes from a checkpoint in its --out (run.sh's
    # RUN_DIR) before it looks at --init-from, so a second start on the same box would go on with
    # the last run's schedule. Its export (hf/) stays, for --init-from or a bench.
    rm -rf "$2/checkpoint"
    setsid nohup bash -c "cd '$BOX/repo' && OUT='$BOX/$1' RUN_DIR='$2' bash .train-carry/run.sh $3 \
        >> '$BOX/run.log' 2>&1; echo \$? > '$BOX/$1/done'" < /dev/null > /dev/null 2>&1 &
}
case $verb in
stash)
    mkdir -p "$BOX/repo/.train-carry"
    cp -r .train-carry/. "$BOX/repo/.train-carry/"
    du -sh "$BOX/repo/.train-carry"/* ;;
start)
    test -x "$BOX/repo/.train-carry/run.sh" || { echo "stash .train-carry/ first" >&2; exit 2; }
    # A run started before the last part is stashed fails on the box, out of sight until finish:
    # run.sh refuses an install that lacks a carried package, the trainer needs fonts and words.
    missing=""
    for part in fonts words wheels wheels-transformers; do
        [ -e "$BOX/repo/.train-carry/$part" ] || missing="$missing $part"
    done
    [ -z "$missing" ] || { echo "not stashed yet:$missing (stash them in the call that carries them)" >&2; exit 2; }
    if [ "${FROM_SCRATCH:-0}" != 1 ]; then
        named=""
        for option in "$@"; do
            case $option in --init-from | --init-from=*) named=1 ;; esac
        done
        [ -n "$named" ] || {
            echo "no --init-from: the run would train from random weights (FROM_SCRATCH=1 if meant;" \
                "--init-from $BOX/init/hf_bf16 for the export unpacked here)" >&2
            exit 2
        }
    fi
    tar --exclude=./.train-carry --exclude=./.git -cf - . | tar -xf - -C "$BOX/repo"
    rm -rf "$BOX/init" "$RUNOUT" && mkdir -p "$BOX/init" "$RUNOUT"
    if [ -n "${INIT:-}" ]; then
        parts=("$BOX/repo/$INIT"/hf_bf16.tgz.part-*)
        [ -e "${parts[0]}" ] || { echo "no hf_bf16.tgz.part-* in $INIT: stash them first" >&2; exit 2; }
        cat "${parts[@]}" | tar -xzf - -C "$BOX/init"
    else
        tar -xzf train/weights/line_reader_hf_bf16.tgz -C "$BOX/init"
    fi
    args=""  # the options, quoted again for the inner shell (printf alone would quote an empty one)
    (($#)) && args=$(printf '%q ' "$@")
    : > "$BOX/run.log"  # here, not in the background: it marks the run started for poll and finish
    : > "$BOX/runs"  # each run's output folder under $BOX, one a line, for poll and finish
    run_dir=${RUN_DIR:-/tmp/vlmrun}
    if [ -n "${SEEDS:-}" ]; then
        for seed in $SEEDS; do
            launch "trainout/seed-$seed" "$run_dir/seed-$seed" "$args--seed $seed"
        done
    else
        launch trainout "$run_dir" "$args"
    fi
    echo "started; init export in $BOX/init/hf_bf16" ;;
poll)
    require_run
    sleep "${1:-530}"
    while read -r run; do
        tail -n 4 "$BOX/$run/console.txt" 2>/dev/null || tail -n 4 "$BOX/run.log"
    done < "$BOX/runs"
    # The GPU's own count (every process on it), beside the trainer's torch peak in the console.
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
    fi ;;
finish)
    require_run
    mapfile -t runs < "$BOX/runs"
    logs=(run.log)
    for run in "${runs[@]}"; do
        while [ ! -e "$BOX/$run/done" ]; do sleep 5; done
        tail -n 6 "$BOX/$run/console.txt" 2>/dev/null || tail -n 6 "$BOX/run.log"
        logs+=("$run/console.txt" "$run/train.log")
    done
    tar -C "$BOX" -czf "${OUT:?}/logs.tgz" --ignore-failed-read "${logs[@]}" 2>/dev/null || true
    for run in "${runs[@]}"; do
        code=$(cat "$BOX/$run/done")
        [ "$code" = 0 ] || { echo "run.sh exited with $code in $run (logs.tgz has its log)" >&2; exit "$code"; }
    done
    left=()
    for run in "${runs[@]}"; do
        name=${run#trainout}
        name=${name#/}  # seed-S, or empty for a lone run (its parts go to $OUT itself)
        parts=("$BOX/$run"/hf_bf16.tgz.part-*)
        size=$(cat "${parts[@]}" | wc -c)
        files=$(find "$OUT" -type f | wc -l)
        taken=$(find "$OUT" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
        if ((files + ${#parts[@]} > BACK_FILES || taken + size > BACK_BYTES)); then
            left+=("$name")
            continue
        fi
        mkdir -p "$OUT/$name"
        cp "${parts[@]}" "$OUT/$name/"
    done
    for run in "${left[@]}"; do
        echo "the export of ${run:-the run} is more than this call brings back:" \
            "bash train/box.sh fetch${run:+ $run} in the next call" >&2
    done ;;
fetch)
    require_run
    run=${1:-}  # seed-S, or nothing for a lone run
    parts=("$RUNOUT/${run:+$run/}"hf_bf16.tgz.part-*)
    [ -e "${parts[0]}" ] || { echo "no export of ${run:-a lone run} on this box" >&2; exit 2; }
    mkdir -p "$OUT/$run"
    cp "${parts[@]}" "$OUT/$run/" ;;
*)
    echo "unknown verb $verb" >&2; exit 2 ;;
esac
