"""Packs what a GPU box without network needs to train into the ignored folder .train-carry/.

    python -m train.pack [--crops DIR [--crop-every N] [--unsure-below C --hints FILE]]
        [--fonts-from /usr/share/fonts] [--words /usr/share/dict/words] [--more-faces]

.train-carry/ gets: wheels/ (cp312 manylinux wheels of tokenizers, safetensors and the dependency
closure of transformers, less numpy, which a box with torch has) and wheels-transformers/ (the
transformers wheel alone), fonts/ (the Debian fonts the renderer uses; with --more-faces, fonts/more/ holds
MORE_FONTS cut down to Latin), words (Debian's word list),
crops/ (every third receipt line crop made by train.make_crops by default, with its label;
evaluation only; with --unsure-below, only those among them whose ONNX read in --hints is below C,
the lines the cascade reads again) and run.sh, which installs both wheel folders into
/tmp/trainsite once and trains into /tmp/vlmrun, outside the working tree, so consecutive runs on
one box resume.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from train.eval_lines import unsure_crops
from train.render import MORE_FOLDER

CARRY = Path(".train-carry")
CALL_BYTES = 64 * 1024 * 1024  # what one device call carries, the checkout included
# What a box with torch lacks, at the pins of train/requirements.txt; installed there with
# --no-deps, so the closure is downloaded here.
CARRIED = ("transformers", "tokenizers", "safetensors", "rapidfuzz")
REQUIREMENTS = Path(__file__).with_name("requirements.txt")


def carried_pins() -> list[str]:
    """The requirement lines of the CARRIED packages, as train/requirements.txt pins them."""
    lines = REQUIREMENTS.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.split("==")[0].strip() in CARRIED]


# Left out to stay under the size budget: numpy comes with the box's torch stack, and hf_xet only
# speeds up Hub downloads, which an offline box never makes.
LEAVE_OUT = ("numpy-", "torch-", "nvidia_", "hf_xet-")
# The largest wheel gets a folder of its own: the working tree with train/weights is about 38 MB
# and a call carries 64 MiB in all, so the carry goes over two calls, and wheels/ whole (29 MB)
# would leave a call almost no room (train/README.md, "Known limits").
SPLIT_OFF = ("transformers-",)
SPLIT_FOLDER = "wheels-transformers"
# Receipt monospace and sans fonts, plus one CJK font (Debian packages in train/README.md).
FONTS = (
    "DejaVuSansMono.ttf",
    "DejaVuSansMono-Bold.ttf",
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSansCondensed.ttf",
    "LiberationMono-Regular.ttf",
    "LiberationMono-Bold.ttf",
    "LiberationSans-Regular.ttf",
    "LiberationSans-Bold.ttf",
    "LiberationSerif-Regular.ttf",
    "FreeMono.ttf",
    "FreeMonoBold.ttf",
    "FreeSans.ttf",
    "OCRB.otf",
    # Monospace faces whose zero is a plain oval, as on most receipt printers (Liberation Mono and
    # Noto Sans Mono mark theirs with a dot or a slash), and one real italic.
    "Courier Prime Sans.otf",
    "Courier Prime Sans Bold.otf",
    "Courier Prime Sans Italic.otf",
    "Courier Prime Bold.otf",
    "NotoSansMono-Regular.ttf",
    "NotoSansMono-Bold.ttf",
    # Faces whose A has a flat top, as many thermal receipt printers draw it; a model that never
    # saw one read the A of such receipts as `#` (31 times in the receipt crops) or `R`.
    "3270-Regular.ttf",
    "3270Condensed-Regular.ttf",
    "OCRA.ttf",
    # Tall condensed faces, as the receipts' items, dates and tax lines are printed in (`5588
    # EAGLE FRIED DACE` read `SSBB`, `GST` read `6ST`, `18/04/2018` read `2010`): the 24 faces above
    # had one condensed sans and one condensed mono, and a glyph squeezed to width is not the
    # glyph such a face draws.
    "LeagueMono-Condensed.otf",
    "LeagueMono-CondensedBold.otf",
    "RobotoCondensed-Regular.ttf",
    "RobotoCondensed-Bold.ttf",
    "LiberationSansNarrow-Regular.ttf",
    "LiberationSansNarrow-Bold.ttf",
    "OpenSans-CondBold.ttf",
    "routed-gothic-narrow.ttf",
    # Other monospace shapes (a `%` like `/` with rings, a `1` without a flag, open and closed 4s),
    # and a face built on a 16 x 16 dot grid, as a thermal head prints, with the Chinese
    # characters of its Japanese set.
    "B612Mono-Regular.otf",
    "Go-Mono.ttf",
    "Inconsolata.otf",
    "mononoki-Regular.ttf",
    "agave-r-autohinted.ttf",
    "DotGothic16-Regular.ttf",
    "wqy-microhei.ttc",
)
# More Latin faces, carried in fonts/more/ with --more-faces and drawn on `--more-face-share` of
# the Latin lines (train.render's MORE_FACE_SHARE, off by default): the 37 faces above were picked
# after receipt misreads one by one, and glyph shapes the reader had never seen looked like a
# cause of its gap to the ONNX recogniser on receipts. Measured, they are not: the kept reader
# reads lines drawn in these faces nearly as well as in its own (2.88% against 2.60%), and four
# runs that drew them on 35% of the Latin lines read the receipts no better than six without
# (train/README.md, "A hundred more faces"). Monospace, sans, condensed and serif faces of the
# Debian packages in train/README.md, regular and bold; left out are faces that draw small letters
# as capitals (Bebas Neue, small-caps cuts), whose labels would teach the wrong case, and
# bitmap-only faces (Terminus), which FreeType draws at their few fixed sizes only. Cut down to
# Latin (`subset_latin`), they take 6 MB where whole they would take 60.
MORE_FONTS = (
    # monospace
    "AerialMono.ttf",
    "AerialMonoBd.ttf",
    "Anonymous Pro.ttf",
    "Anonymous Pro B.ttf",
    "Cousine-Regular.ttf",
    "Cousine-Bold.ttf",
    "cmuntt.ttf",
    "FiraCode-Regular.ttf",
    "FiraCode-Bold.ttf",
    "Go-Mono-Bold.ttf",
    "Hack-Regular.ttf",
    "Hack-Bold.ttf",
    "JetBrainsMono-Regular.ttf",
    "JetBrainsMono-Bold.ttf",
    "LeagueMono-Regular.otf",
    "LeagueMono-Bold.otf",
    "LeagueMono-NarrowRegular.otf",
    "LeagueMono-NarrowBold.otf",
    "Mplus1Code-Regular.otf",
    "Mplus1Code-Bold.otf",
    "MplusCodeLatin50-Regular.otf",
    "NanumGothicCoding.ttf",
    "NanumGothicCodingBold.ttf",
    "NimbusMonoPS-Regular.otf",
    "NimbusMonoPS-Bold.otf",
    "texgyrecursor-regular.otf",
    "texgyrecursor-bold.otf",
    "lmmono10-regular.otf",
    "OxygenMono-Regular.ttf",
    "TlwgMono.ttf",
    "TlwgMono-Bold.ttf",
    "TlwgTypewriter.ttf",
    "TlwgTypewriter-Bold.ttf",
    "monof55.ttf",
    "mononoki-Bold.ttf",
    "agave-b-autohinted.ttf",
    "B612Mono-Bold.otf",
    "3270SemiCondensed-Regular.ttf",
    "OCRABold.ttf",
    "OCRACondensed.ttf",
    "Hermit-medium.otf",
    "Hermit-bold.otf",
    "Courier Prime Code.otf",
    "TakaoGothic.ttf",
    "unifont.otf",
    # sans, condensed among them
    "Aerial.ttf",
    "AerialBd.ttf",
    "Andika-Regular.ttf",
    "Arimo-Regular.ttf",
    "Arimo-Bold.ttf",
    "B612-Regular.otf",
    "Cabin-Regular.otf",
    "Cabin-Bold.otf",
    "Cantarell-Regular.otf",
    "Cantarell-Bold.otf",
    "Carlito-Regular.ttf",
    "Carlito-Bold.ttf",
    "cmunss.ttf",
    "cmunssdc.ttf",
    "ComicNeue-Regular.otf",
    "ComicNeue-Bold.otf",
    "Dosis-Bold.otf",
    "Go-Regular.ttf",
    "Go-Bold.ttf",
    "Inter-Regular.otf",
    "Inter-Bold.otf",
    "Jura-Regular.otf",
    "Jura-Bold.otf",
    "Lato-Regular.ttf",
    "Lato-Bold.ttf",
    "LeagueSpartan-Bold.otf",
    "LinBiolinum_R.otf",
    "LinBiolinum_RB.otf",
    "Manrope-Regular.ttf",
    "Manrope-Bold.ttf",
    "Mplus1-Regular.otf",
    "Mplus2-Bold.otf",
    "NanumGothic.ttf",
    "NanumBarunGothicBold.ttf",
    "NanumSquareR.ttf",
    "NanumSquareB.ttf",
    "NanumSquareRoundB.ttf",
    "NimbusSans-Regular.otf",
    "NimbusSans-Bold.otf",
    "NimbusSansNarrow-Regular.otf",
    "NimbusSansNarrow-Bold.otf",
    "OpenSans-Regular.ttf",
    "OpenSans-Bold.ttf",
    "Oxygen-Sans-Bold.ttf",
    "Quicksand-Regular.ttf",
    "Quicksand-Bold.ttf",
    "Roboto-Regular.ttf",
    "Roboto-Bold.ttf",
    "routed-gothic.ttf",
    "routed-gothic-wide.ttf",
    "texgyreadventor-regular.otf",
    "texgyreheros-regular.otf",
    "texgyreheros-bold.otf",
    "texgyreheroscn-regular.otf",
    "texgyreheroscn-bold.otf",
    "lmsansdemicond10-regular.otf",
    "URWGothic-Demi.otf",
    "Veranda.ttf",
    "VerandaBd.ttf",
    "VL-Gothic-Regular.ttf",
    "YanoneKaffeesatz-Regular.otf",
    "YanoneKaffeesatz-Bold.otf",
    "InterDisplay-Bold.otf",
    # serif
    "C059-Roman.otf",
    "Caladea-Regular.ttf",
    "CharisSIL-Regular.ttf",
    "EBGaramond12-Regular.otf",
    "LinLibertine_R.otf",
    "NimbusRoman-Regular.otf",
    "NimbusRoman-Bold.otf",
    "P052-Roman.otf",
    "Tinos-Regular.ttf",
    "Tymes.ttf",
    "URWBookman-Demi.otf",
    "cmunrm.ttf",
    "cmunorm.ttf",
    "texgyreschola-regular.otf",
    "NanumMyeongjo.ttf",
)
# What a Latin line of the text source can hold (ASCII and the yen sign today), with room: Latin-1
# and Extended-A, general punctuation, currency symbols.
LATIN_RANGES = ((0x20, 0x7E), (0xA0, 0x17F), (0x2010, 0x206F), (0x20A0, 0x20CF))

RUN_SH = r"""#!/bin/bash
# Trains on a CUDA box with torch and no network: MINUTES=7 .train-carry/run.sh [train_vlm options]
# MINUTES is the training's budget; the script takes about 1.5 minutes more (install, start, export,
# EVAL=1's receipt reading, capped at EVAL_SECONDS=120; EVAL_LIMIT=N reads the first N crops).
# When $OUT is set the console and train.log are copied there as they grow, so a run cut short
# still returns its log, and at the end the results and the export in bf16 (a gzipped tar in 15 MiB
# parts: cat them, untar, and load it with dtype float32).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
SITE=${TRAIN_SITE:-/tmp/trainsite}
RUN=${RUN_DIR:-/tmp/vlmrun}
export PYTHONUNBUFFERED=1
# Under a lock: runs started side by side (box.sh's SEEDS) would otherwise install into one folder at once.
(
    flock 9
    if [ ! -e "$SITE/.installed" ]; then
        python3 -m pip install -q --no-index --no-deps --target "$SITE" "$HERE"/wheels*/*.whl
        # Marked done only once every carried package imports: an install from part of the carry
        # (a wheel folder not yet stashed) would otherwise stay, and every later run fail at import.
        if ! PYTHONPATH="$SITE" python3 -c "import @CARRIED@"; then
            echo "the carried wheels do not all install: stash wheels/ and wheels-transformers/" >&2
            rm -rf "$SITE"
            exit 3
        fi
        touch "$SITE/.installed"
    fi
) 9> "$SITE.lock"
export PYTHONPATH="$SITE:$REPO"
cd "$REPO"
mkdir -p "$RUN"
if [ -n "${OUT:-}" ]; then
    (while sleep 10; do cp "$RUN/train.log" "$OUT/" 2>/dev/null || true; done) &
    log_copier=$!
    trap 'kill $log_copier 2>/dev/null' EXIT
    exec > >(tee -a "$OUT/console.txt") 2>&1
fi
python3 -m train.train_vlm --out "$RUN" --minutes "${MINUTES:-7}" --fonts "$HERE/fonts" \
    --words "$HERE/words" --workers "${WORKERS:-14}" --batch "${BATCH:-128}" "$@"
if [ "${EVAL:-0}" = 1 ]; then
    timeout "${EVAL_SECONDS:-120}" python3 -m train.eval_lines --hf "$RUN/hf" --crops "$HERE/crops" \
        --out "$RUN/eval_receipts.json" ${EVAL_LIMIT:+--limit "$EVAL_LIMIT"} || echo "receipt reading stopped"
fi
if [ -n "${OUT:-}" ]; then
    cp "$RUN/train.log" "$OUT/"
    cp "$RUN/eval_receipts.json" "$OUT/" 2>/dev/null || true
    # bf16 halves what is carried off the box (the default shape's fp32 weights are 70 MB).
    rm -rf "$RUN/hf_bf16" && cp -r "$RUN/hf" "$RUN/hf_bf16"
    python3 -c "
import sys, pathlib, torch
from safetensors.torch import load_file, save_file
for f in pathlib.Path(sys.argv[1]).glob('*.safetensors'):
    save_file({k: v.to(torch.bfloat16) for k, v in load_file(f).items()}, f, metadata={'format': 'pt'})
" "$RUN/hf_bf16"
    tar -C "$RUN" -czf - hf_bf16 | split -b 15M - "$OUT/hf_bf16.tgz.part-"
fi
""".replace("@CARRIED@", ", ".join(CARRIED))


def carried_bytes(path: Path) -> int:
    """The bytes of a file, or of every file under a folder."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files)


def checkout_bytes() -> int:
    """The bytes of the files git tracks: the working tree every device call carries besides."""
    listed = subprocess.run(["git", "ls-files", "-z"], check=True, capture_output=True, text=True).stdout
    return sum(carried_bytes(Path(name)) for name in listed.split("\0") if name and Path(name).is_file())


def over_a_call(sizes: Mapping[str, int], checkout: int) -> list[str]:
    """The parts carried one call each (`bash train/box.sh stash`) that do not fit beside the checkout.

    The limit is a call's, not the whole carry's: the parts go over consecutive calls, and a soup's
    parts in .train-carry/init, which pack does not write, go in calls of their own.
    """
    return [call for call, size in sizes.items() if checkout + size > CALL_BYTES]


def find_font(name: str, roots: list[Path]) -> Path:
    for root in roots:
        # Sorted: a package may ship one file name in several folders (Fantasque's variants).
        for path in sorted(root.rglob(name)):
            return path
    raise FileNotFoundError(f"font {name} not found (apt-get install the packages in train/README.md)")


def subset_latin(source: Path, target: Path) -> None:
    """Writes `source` cut down to the glyphs of LATIN_RANGES, outlines, hinting and kerning kept."""
    from fontTools import subset

    options = subset.Options()
    options.hinting = True
    options.notdef_outline = True
    options.name_IDs = ["*"]
    font = subset.load_font(str(source), options)
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=[code for low, high in LATIN_RANGES for code in range(low, high + 1)])
    subsetter.subset(font)
    subset.save_font(font, str(target), options)


def download_wheels(wheels: Path, run: Callable[..., Any] = subprocess.run) -> None:
    """Downloads the carried pins and their dependency closure into `wheels`, emptied first.

    Afresh, as the fonts are: the closure's unpinned wheels move on between packs, and a folder
    that kept an earlier pack's `httpx2-2.16.2` beside the new `httpx2-2.17.0` made run.sh's pip
    refuse the whole install on the box (two versions of one package).
    """
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            "--implementation",
            "cp",
            "--platform",
            "manylinux2014_x86_64",
            "--platform",
            "manylinux_2_17_x86_64",
            "--platform",
            "manylinux_2_28_x86_64",
            "--platform",
            "any",
            "-d",
            str(wheels),
            *carried_pins(),
        ],
        check=True,
    )


def split_wheels(wheels: Path, target: Path) -> list[str]:
    """Moves the SPLIT_OFF wheels out of `wheels` into `target` (afresh); returns their names."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    moved = sorted(wheel.name for wheel in wheels.glob("*.whl") if wheel.name.startswith(SPLIT_OFF))
    for name in moved:
        (wheels / name).rename(target / name)
    return moved


def copy_crops(source: Path, target: Path, every: int, files: Collection[str] | None = None) -> int:
    """Copies every `every`-th crop of a train.make_crops folder with its labels; returns how many.

    With `files`, only the crops so named among them (the lines the cascade would read again).
    """
    rows = [line for line in (source / "labels.jsonl").read_text(encoding="utf-8").splitlines() if line]
    kept = [row for row in rows[::every] if files is None or json.loads(row)["file"] in files]
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for row in kept:
        name = json.loads(row)["file"]
        shutil.copy2(source / name, target / name)
    (target / "labels.jsonl").write_text("".join(row + "\n" for row in kept), encoding="utf-8")
    return len(kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.pack", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--crops", type=Path, help="a crop folder made by train.make_crops (copied as crops/)"
    )
    parser.add_argument(
        "--crop-every", type=int, default=3, help="carry every Nth crop (all 3,430 SROIE crops are 24 MB)"
    )
    parser.add_argument(
        "--unsure-below",
        type=float,
        help="carry only the crops whose ONNX read (--hints) is below this confidence: the cascade's lines",
    )
    parser.add_argument("--hints", type=Path, help="the crops' ONNX reads (bench.vlm_lines --save-hints)")
    parser.add_argument("--fonts-from", type=Path, action="append", default=None)
    parser.add_argument(
        "--more-faces",
        action="store_true",
        help="also carry MORE_FONTS cut to Latin in fonts/more/ (drawn with train_vlm --more-face-share)",
    )
    parser.add_argument("--words", type=Path, default=Path("/usr/share/dict/words"))
    args = parser.parse_args(argv)
    if (args.unsure_below is None) != (args.hints is None):
        parser.error("--unsure-below and --hints go together")
    unsure = None
    if args.hints:
        unsure = unsure_crops(args.hints, args.unsure_below)
    wheels = CARRY / "wheels"
    download_wheels(wheels)
    for wheel in wheels.glob("*.whl"):
        if wheel.name.startswith(LEAVE_OUT):
            wheel.unlink()
    split_wheels(wheels, CARRY / SPLIT_FOLDER)
    fonts = CARRY / "fonts"
    # Afresh: the renderer draws with every font in the folder, so one left from an earlier pack
    # would still be trained on.
    shutil.rmtree(fonts, ignore_errors=True)
    fonts.mkdir()
    roots = args.fonts_from or [Path("/usr/share/fonts"), Path("/usr/share/texmf/fonts")]
    for name in FONTS:
        shutil.copy2(find_font(name, roots), fonts / name)
    if args.more_faces:
        (fonts / MORE_FOLDER).mkdir()
        for name in MORE_FONTS:
            subset_latin(find_font(name, roots), fonts / MORE_FOLDER / name)
    shutil.copy2(args.words.resolve(), CARRY / "words")
    if args.crops:
        copy_crops(args.crops, CARRY / "crops", args.crop_every, unsure)
    (CARRY / "run.sh").write_text(RUN_SH, encoding="utf-8")
    (CARRY / "run.sh").chmod(0o755)
    calls = {
        "fonts, words, run.sh": [fonts, CARRY / "words", CARRY / "run.sh"],
        "wheels": [wheels],
        SPLIT_FOLDER: [CARRY / SPLIT_FOLDER],
        **({"crops": [CARRY / "crops"]} if args.crops else {}),
    }
    sizes = {call: sum(map(carried_bytes, paths)) for call, paths in calls.items()}
    checkout = checkout_bytes()
    for call, size in sizes.items():
        print(f"{call}: {size / 1e6:.1f} MB, {(checkout + size) / 1e6:.1f} MB with the checkout")
    too_large = over_a_call(sizes, checkout)
    if too_large:
        print(
            f"more than one call carries ({CALL_BYTES / 1e6:.1f} MB): {', '.join(too_large)}", file=sys.stderr
        )
    return 1 if too_large else 0


if __name__ == "__main__":
    sys.exit(main())
