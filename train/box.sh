#!/bin/bash
# Trains on an offline GPU box over several consecutive calls, each under a size limit on what it
# carries, with a run that outlives the call that starts it (train/README.md, "Known limits").
#
#   bash train/box.sh stash                   # copy the parts of .train-carry/ this call carried
#   bash train/box.sh start [train_vlm opts]  # copy the checkout, unpack train/weights, start run.sh
#   bash train/box.sh poll [SECONDS]          # wait, then show the run's last lines
#   bash train/box.sh finish                  # wait for the end, copy the export's parts and logs to $OUT
#
# start passes MINUTES, WORKERS, EVAL and RUN_DIR on to run.sh; train/weights' export is unpacked to
# $BOX/init/hf_bf16 for `--init-from`. The box keeps $BOX only while it is held: on a box given back
# and started afresh, poll and finish exit at once with code 4.
set -euo pipefail
BOX=${BOX:-/tmp/box}
RUNOUT=$BOX/trainout
verb=${1:?usage: box.sh stash|start|poll|finish}
shift
# A box given back between two calls comes back fresh, with no run: poll and finish say so at once
# instead of sleeping (or waiting for ever) on a box that holds nothing.
require_run() {
    [ -e "$BOX/run.log" ] && return 0
    echo "no run on this box: it was given back since start, or start was never called" >&2
    exit 4
}
case $verb in
stash)
    mkdir -p "$BOX/repo/.train-carry"
    cp -r .train-carry/. "$BOX/repo/.train-carry/"
    du -sh "$BOX/repo/.train-carry"/* ;;
start)
    test -x "$BOX/repo/.train-carry/run.sh" || { echo "stash .train-carry/ first" >&2; exit 2; }
    tar --exclude=./.train-carry --exclude=./.git -cf - . | tar -xf - -C "$BOX/repo"
    rm -rf "$BOX/init" "$RUNOUT" && mkdir -p "$BOX/init" "$RUNOUT"
    # A run started here is a new one: train_vlm resumes from a checkpoint in its --out (run.sh's
    # RUN_DIR) before it looks at --init-from, so a second start on the same box would go on with
    # the last run's schedule. Its export (hf/) stays, for --init-from or a bench.
    rm -rf "${RUN_DIR:-/tmp/vlmrun}/checkpoint"
    tar -xzf train/weights/line_reader_hf_bf16.tgz -C "$BOX/init"
    args=$(printf '%q ' "$@")  # quoted again for the inner shell
    : > "$BOX/run.log"  # here, not in the background: it marks the run started for poll and finish
    setsid nohup bash -c "cd '$BOX/repo' && OUT='$RUNOUT' bash .train-carry/run.sh $args \
        >> '$BOX/run.log' 2>&1; echo \$? > '$RUNOUT/done'" < /dev/null > /dev/null 2>&1 &
    echo "started; init export in $BOX/init/hf_bf16" ;;
poll)
    require_run
    sleep "${1:-530}"
    tail -n 4 "$RUNOUT/console.txt" 2>/dev/null || tail -n 4 "$BOX/run.log"
    # The GPU's own count (every process on it), beside the trainer's torch peak in the console.
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
    fi ;;
finish)
    require_run
    while [ ! -e "$RUNOUT/done" ]; do sleep 5; done
    tail -n 6 "$RUNOUT/console.txt" 2>/dev/null || tail -n 6 "$BOX/run.log"
    tar -C "$BOX" -czf "${OUT:?}/logs.tgz" run.log trainout/console.txt trainout/train.log 2>/dev/null || true
    code=$(cat "$RUNOUT/done")
    [ "$code" = 0 ] || { echo "run.sh exited with $code (logs.tgz has its log)" >&2; exit "$code"; }
    cp "$RUNOUT"/hf_bf16.tgz.part-* "$OUT/" ;;
*)
    echo "unknown verb $verb" >&2; exit 2 ;;
esac
