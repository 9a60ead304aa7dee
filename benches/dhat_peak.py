#!/usr/bin/env python3
"""What the heap held at its peak, from a DHAT file, by who allocated it.

Each allocation site's bytes and blocks at the global peak (t-gmax) are put
under the first frame of its stack, from the allocation upwards, that names
one of the crates below (`--by` picks how: the function, or the source file),
and the largest groups are printed, divided by `--per` (the number of open
streams at the peak) when given.

Used for the memory per idle stream (benches/README.md):

    LOAD_SERVE_WRAP="valgrind --tool=dhat --dhat-out-file=/tmp/serve.dhat" \
        cargo bench --bench load -- --phases streams --big-streams 300
    python3 benches/dhat_peak.py /tmp/serve.dhat --per 300
"""

import argparse
import json
import re
from collections import defaultdict

# The crates an allocation is put under: the nearest frame to the
# allocation that names one of them (standard library and buffer frames are
# passed over) is its owner.
OWNERS = [
    ("shimgate", re.compile(r"shimgate[_:]")),
    ("hyper", re.compile(r"hyper-1\.|hyper::")),
    ("hyper-util", re.compile(r"hyper-util|hyper_util::")),
    ("tokio", re.compile(r"tokio-1\.|tokio::")),
    ("rustls", re.compile(r"rustls")),
]

# A buffer crate's frame names no owner: the frame above it does.
GENERIC = re.compile(r"bytes-1\.|bytes::")

SKIP = re.compile(r"alloc::|core::|std::|__rust|malloc|calloc|realloc|raw_vec|vec_deque|hashbrown|<alloc|\?\?\?")


def owner(frames, by):
    for frame in frames:
        if SKIP.search(frame.split(": ", 1)[-1].split(" (", 1)[0]) or GENERIC.search(frame):
            continue
        for name, pattern in OWNERS:
            if pattern.search(frame):
                text = frame.split(": ", 1)[-1]
                if by == "file":
                    m = re.search(r"\(([^)]*?)(:\d+)?:\d+\)$", text)
                    place = m.group(1).split("/src/", 1)[-1] if m else text
                    return f"{name}: {place}"
                fn = text.split(" (", 1)[0]
                return f"{name}: {fn[:110]}"
    return "other: " + (frames[0].split(": ", 1)[-1][:100] if frames else "?")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--per", type=float, default=1.0, help="divide by this (streams open at the peak)")
    ap.add_argument("--by", choices=["function", "file"], default="function")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    with open(args.file) as f:
        d = json.load(f)
    ftbl = d["ftbl"]
    groups = defaultdict(lambda: [0, 0])
    total = [0, 0]
    for pp in d["pps"]:
        gb, gbk = pp.get("gb", 0), pp.get("gbk", 0)
        if not gb:
            continue
        frames = [ftbl[i] for i in pp["fs"]]
        g = groups[owner(frames, args.by)]
        g[0] += gb
        g[1] += gbk
        total[0] += gb
        total[1] += gbk
    per = args.per
    print(f"heap at the peak: {total[0] / per / 1024:.1f} KiB in {total[1] / per:.1f} blocks (per {per:g})")
    print("| KiB | blocks | first owning frame |")
    print("|---|---|---|")
    for name, (b, k) in sorted(groups.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"| {b / per / 1024:.2f} | {k / per:.2f} | {name} |")


if __name__ == "__main__":
    main()
