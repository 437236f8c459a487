"""`denki checkpoints`: the shipped general checkpoints — a table that fits a terminal (name, kind, size, parameters,
FLOPs, licence); the corpus list, dev scores and path are in ``--json`` and in each folder's model card."""
from __future__ import annotations

import argparse
import json
import sys


def register(sub) -> None:
    p = sub.add_parser(
        "checkpoints", help="list denki's shipped general Japanese checkpoints (names work as --model/--init-from)",
        description="List the general checkpoints shipped in the repository's checkpoints/ folder (and in the "
                    "folders of $DENKI_CHECKPOINTS): a tiny Japanese ELECTRA pretrained on general corpora, to "
                    "continue on your corpus (`denki pretrain --init-from NAME`) or fine-tune "
                    "(`denki finetune classify --model NAME`), and a QA model fine-tuned from it. Every --model / "
                    "--init-from / --tokenizer accepts a checkpoint's name as well as a path. Each folder's "
                    "README.md is its model card.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--json", action="store_true", help="print a JSON list of the checkpoints' cards instead")
    p.add_argument("--verify", action="store_true",
                   help="check every file of every checkpoint against its SHA256SUMS and the bundle's manifest; "
                        "exit 1 if any differs")
    p.set_defaults(func=cmd_checkpoints)


#: the table's columns: what picks a checkpoint at a glance (a row stays well under 100 characters)
HEAD = ["name", "kind", "size", "params", "FLOPs", "licence"]


def _row(card: dict) -> list[str]:
    params = card.get("parameters")
    flops = card.get("flops")
    return [card["name"], card["kind"], str(card.get("size", "")),
            f"{params / 1e6:.1f}M" if isinstance(params, (int, float)) else "",
            f"{flops:.2g}" if isinstance(flops, (int, float)) else "", str(card.get("licence", ""))]


def cmd_checkpoints(args) -> int:
    from denki.models.registry.checkpoints import WHERE_TO_GET, checkpoint_dirs, list_checkpoints, verify_checkpoint

    cards = list_checkpoints()
    if args.json:
        print(json.dumps(cards, ensure_ascii=False, indent=2))
    elif not cards:
        print("no checkpoints found in " + ", ".join(str(d) for d in checkpoint_dirs()) + f"\n{WHERE_TO_GET}")
    else:
        rows = [HEAD] + [_row(c) for c in cards]
        widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD))]
        for r in rows:
            print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
        print("corpora, dev scores and folders: denki checkpoints --json, or each folder's README.md (model card)")
    if not args.verify:
        return 0
    bad = 0
    for card in cards:
        problems = verify_checkpoint(card)
        bad += bool(problems)
        status = "OK" if not problems else "FAILED\n  " + "\n  ".join(problems)
        print(f"verify {card['name']}: {status}", file=sys.stderr)
    return 1 if bad else 0
