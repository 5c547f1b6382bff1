"""Write byte-level token shards of any text, for ``--set data=shards:DIR``.

    python tools/write_shards.py stdlib shards/stdlib            # the standard library sources
    python tools/write_shards.py notes/ shards/notes --raw       # nanoGPT's train.bin / val.bin
    actlab run spikes --quick --set data=shards:shards/stdlib

The text is split into train and validation as ``data="<the same source>"`` splits it
(:mod:`actlab.data.text`), every byte becomes one ``uint16`` token id (vocabulary 256; no BPE
tokenizer is available offline), and the splits are written as headed shards
``bytes_train_000000.bin``, ``bytes_val_000000.bin``, ... (the FineWeb header of
:mod:`actlab.data.shards`, at most ``--tokens-per-shard`` ids each) or, with ``--raw``, as
``train.bin`` and ``val.bin``. A training run on the shards sees the same tokens as one on the
text.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from actlab.data.shards import write_shards  # noqa: E402
from actlab.data.text import load_corpus  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    """Write the shards and list them (exit 2 on a bad source)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="'stdlib', or a text file or folder")
    parser.add_argument("out", type=Path, help="folder for the shards")
    parser.add_argument("--tokens-per-shard", type=int, default=100_000_000)
    parser.add_argument("--val-fraction", type=float, default=0.1)
    parser.add_argument("--raw", action="store_true",
                        help="headerless train.bin / val.bin (nanoGPT) instead of headed shards")
    args = parser.parse_args(argv)
    try:
        corpus = load_corpus(args.source, val_fraction=args.val_fraction)
        paths = write_shards(args.out, {"train": corpus.train, "val": corpus.val},
                             tokens_per_shard=args.tokens_per_shard, header=not args.raw)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(f"{path}  {path.stat().st_size:,} bytes")
    print(f"{corpus}: use --set data=shards:{args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
