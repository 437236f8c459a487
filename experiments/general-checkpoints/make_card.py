"""Assemble a shipped checkpoint folder from a finished run: the bundle, card.json, the model card README.md, the
licences it inherits and SHA256SUMS (what `denki checkpoints --verify` checks).

    python experiments/general-checkpoints/make_card.py pretrained --run runs/general/electra-tiny-8e14 \
        --name denki-electra-tiny-ja --out checkpoints/denki-electra-tiny-ja [--scores scores.json]
    python experiments/general-checkpoints/make_card.py qa --run runs/general/qa --name denki-electra-tiny-ja-qa \
        --parent checkpoints/denki-electra-tiny-ja --out checkpoints/denki-electra-tiny-ja-qa [--scores scores.json]

``pretrained`` exports the run's newest checkpoint with its generator (`denki pretrain export --generator`); ``qa``
copies a `denki finetune qa` bundle. ``--scores``: a JSON object of dev scores (name → number) for the card; the
folder can be remade with new scores at any time (the weights do not change, only card.json, README.md and
SHA256SUMS). Run from the repository root.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from denki.models.registry.checkpoints import write_sums  # noqa: E402
from denki.models.bundle.format import read_manifest  # noqa: E402

DATA = REPO.parent / "shared" / "data"
LICENCE_DIR = "LICENSES"

#: what each general corpus file is, its licence and its licence files in ../shared/data/LICENSES (data README)
CORPORA = {
    "corpus_wiki_ja.txt.gz": {
        "what": "Japanese Wikipedia paragraphs (the contexts of JaQuAD train/dev and JSQuAD valid; no questions, "
                "no answers)", "chars": "3.9M",
        "licence": "CC BY-SA 3.0 (JaQuAD) / CC BY-SA 4.0 (JSQuAD)",
        "attribution": "Japanese Wikipedia contributors, via JaQuAD (So et al. 2022, SkelterLabsInc/JaQuAD) and "
                       "JSQuAD (JGLUE, Kurihara et al. 2022, yahoojapan/JGLUE)",
        "files": ["JaQuAD_LICENSE_CC-BY-SA-3.0.txt", "JGLUE_LICENSE_CC-BY-SA-4.0.txt"]},
    "corpus_manpages_ja.txt.gz": {
        "what": "Japanese man pages (JM Project, Debian manpages-ja 0.5.0.0.20221215), train + dev pages' "
                "paragraphs (no section labels)", "chars": "5.1M",
        "licence": "per page, DFSG-free (GPL, BSD, Linux man-pages licence, …)",
        "attribution": "JM Project (linuxjm) translators and the authors of the original pages; Debian packages "
                       "manpages-ja / manpages-ja-dev",
        "files": ["manpages-ja_debian_copyright.txt"]},
    "corpus_docs_ja.txt.gz": {
        "what": "Japanese technical documentation, human-translated (Microsoft Docs ja-jp, PHP, Python, Ruby "
                "(rurema), Rust, Vue)", "chars": "47.1M",
        "licence": "CC BY 4.0 / CC BY 3.0 / PSF / MIT or Apache-2.0 (per source)",
        "attribution": "Microsoft Corporation and contributors (CC BY 4.0); the PHP Documentation Group (CC BY 3.0); "
                       "Python Software Foundation and the Python Japanese translation team (PSF); rurema/doctree "
                       "(CC BY 3.0); rust-lang-ja (MIT or Apache-2.0); Vue documentation contributors (CC BY 4.0)",
        "files": ["MicrosoftDocs_LICENSE_CC-BY-4.0.txt", "php_doc-ja_legalnotice.txt",
                  "python-docs-ja_PSF_license_page_en.txt", "rurema_doctree_LICENSE.txt",
                  "rust-lang-ja_LICENSE-APACHE-2.0.txt", "rust-lang-ja_book-ja_LICENSE-MIT.txt",
                  "rust-lang-ja_rust-by-example-ja_LICENSE-MIT.txt", "vuejs-docs-ja_LICENSE.txt"]},
    "jaquad_train.squad2.json.gz": {
        "what": "JaQuAD train questions and answer spans (SQuAD 2.0 format, one third synthetic no-answer pairs)",
        "chars": "", "licence": "CC BY-SA 3.0",
        "attribution": "JaQuAD (So et al. 2022, SkelterLabsInc/JaQuAD), from Japanese Wikipedia",
        "files": ["JaQuAD_LICENSE_CC-BY-SA-3.0.txt"]},
}
#: the strictest of the sources' licences: ShareAlike (Wikipedia text). CC BY-SA 3.0 material may be adapted under
#: a later version, so the weights and the card are offered under CC BY-SA 4.0, with every source attributed
LICENCE = "CC BY-SA 4.0"


def n_params(safetensors_path: Path) -> int:
    """Parameters in a safetensors file, from its header (no torch needed)."""
    import struct

    with open(safetensors_path, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    total = 0
    for k, v in header.items():
        if k != "__metadata__":
            n = 1
            for d in v["shape"]:
                n *= d
            total += n
    return total


def cpu_flags() -> str:
    keep = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")
    try:
        flags = next(line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags"))
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return "not recorded"
    return f"{model}; flags {' '.join(f for f in keep if f in flags)}"


def corpus_rows(paths_shas) -> list[dict]:
    rows = []
    for path, sha in paths_shas:
        name = Path(path).name
        info = CORPORA.get(name, {"what": name, "chars": "", "licence": "see its source", "attribution": "",
                                  "files": []})
        rows.append({"name": name, "sha256": sha, **info})
    return rows


def copy_licences(rows: list[dict], out: Path) -> list[str]:
    names = sorted({f for r in rows for f in r["files"]})
    (out / LICENCE_DIR).mkdir(exist_ok=True)
    for f in names:
        if (DATA / LICENCE_DIR / f).is_file():
            shutil.copy2(DATA / LICENCE_DIR / f, out / LICENCE_DIR / f)
    return names


def render_readme(card: dict) -> str:
    """The model card for people, from card.json (one source for both)."""
    lines = [f"# {card['name']}", "", card["description"], "",
             "| | |", "|---|---|",
             f"| kind | `{card['kind']}` ({card['architecture']}) |",
             f"| size | {card['size']}: {card['layers']} layers, hidden {card['hidden']}, vocabulary {card['vocab_size']:,}"
             f" (MeCab unidic-lite words → WordPiece) |",
             f"| parameters | {card['parameters']:,}" + (f" (generator: {card['generator_parameters']:,})"
                                                          if card.get("generator_parameters") else "") + " |",
             f"| pretraining FLOPs | {card['flops']:.3g} ({card['steps']:,} steps, {card['tokens']:,} tokens, "
             f"batch {card['batch_size']} × {card['seq_len']}, {card['precision']}) |",
             (f"| wall time | {card['wall_s'] / 3600:.2f} h in all, one CPU core (the last leg: {card['cpu']}) |"
              if card.get("legs") else f"| wall time | {card['wall_s'] / 3600:.2f} h on one CPU core ({card['cpu']}) |"),
             f"| licence | {card['licence']} (the strictest of its sources'; attribution below) |", ""]
    if card.get("legs"):  # continued pretraining: each leg a whole schedule (--init-from resets the optimizer)
        lines += ["Pretrained in legs, each continuing the last with `--init-from` (a whole schedule per leg):", "",
                  "| leg | FLOPs | cumulative | steps | tokens | wall (h) |", "|---|---:|---:|---:|---:|---:|"]
        total = 0.0
        for leg in card["legs"]:
            total += leg["flops"]
            lines.append(f"| {leg['name']} | {leg['flops']:.3g} | {total:.3g} | {leg['steps']:,} | "
                         f"{leg['tokens']:,} | {leg['wall_s'] / 3600:.2f} |")
        lines += ["", "Precision and CPU above are the last leg's; the recipe below has every leg's command.", ""]
    if card.get("diagnostics"):
        lines += ["Replaced-token detection at the end of pretraining: " + ", ".join(
            f"{k} {v:.3f}" for k, v in card["diagnostics"].items() if isinstance(v, (int, float))) + ".", ""]
    lines += ["## Use", "", "```bash"] + card["usage"] + ["```", "",
              "It loads in plain transformers as well: `AutoModel.from_pretrained(PATH)` and "
              "`AutoTokenizer.from_pretrained(PATH)` (BertJapaneseTokenizer; needs fugashi and unidic-lite).", ""]
    lines += ["## Dev scores", ""]
    if card["dev_scores"]:
        lines += ["| task (dev split) | score |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in card["dev_scores"].items()]
        if card.get("scores_note"):
            lines += ["", card["scores_note"]]
    else:
        lines += ["Not measured yet."]
    lines += ["", "## Training data", "", "| file | what | sha256 | licence |", "|---|---|---|---|"]
    lines += [f"| `{r['name']}` | {r['what']}{' (' + r['chars'] + ' characters)' if r['chars'] else ''} | "
              f"`{r['sha256'][:16]}…` | {r['licence']} |" for r in card["corpus"]]
    lines += ["", "Full sha256s are in card.json. No held-out text is in any corpus file (../shared/data/README.md)."]
    lines += ["", "## Recipe (the exact commands)", "", "```bash"] + card["command"] + ["```", "",
              f"Cost to rebuild: {card['rebuild']}", ""]
    lines += ["## Licence and attribution", "",
              f"Weights and card: {card['licence']}. Sources:", ""]
    lines += [f"* {r['attribution']} — {r['licence']}" for r in card["corpus"] if r["attribution"]]
    lines += ["", f"The licence texts are in `{LICENCE_DIR}/`."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=("pretrained", "qa"))
    ap.add_argument("--run", required=True, help="pretrained: the `denki pretrain` run directory; qa: the "
                                                 "`denki finetune qa --out` directory")
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--parent", help="qa: the pretrained checkpoint folder it was fine-tuned from")
    ap.add_argument("--scores", help="JSON file: {score name: value} (dev scores)")
    ap.add_argument("--scores-note", default="", help="a sentence under the scores table (how they were measured)")
    ap.add_argument("--command", action="append", default=[], help="a command line of the recipe (repeatable; "
                                                                     "default: from the run's records)")
    ap.add_argument("--rebuild", default="", help="what rebuilding costs (one sentence)")
    args = ap.parse_args()
    run, out = Path(args.run), Path(args.out)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    if args.kind == "pretrained":
        subprocess.run([str(REPO / ".venv" / "bin" / "denki"), "pretrain", "export", "--checkpoint", str(run),
                        "--out", str(tmp), "--generator"], check=True)
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        runinfo = json.loads((run / "run.json").read_text(encoding="utf-8"))
        ident, cfgd = runinfo["identity"], runinfo["config"]
        corpus = corpus_rows(zip(runinfo["corpus"], ident["corpus_sha256"]))
        diag = summary.get("final") or {}
        stats = {"steps": summary["steps"], "tokens": summary["tokens"], "flops": summary["flops"],
                 "wall_s": summary["wall_s"], "batch_size": ident["batch_size"], "seq_len": ident["seq_len"],
                 "precision": summary.get("precision", cfgd.get("precision", "fp32")),
                 "recipe": {k: ident.get(k) for k in ("lr", "seed", "mask_prob", "gen_size", "disc_weight",
                                                      "cls_contrast", "gen_temperature", "max_flops")},
                 "diagnostics": {k: diag.get(k) for k in ("disc_precision", "disc_recall", "disc_auc_own_t",
                                                          "cls_spread") if diag.get(k) is not None}}
        architecture = "ElectraForPreTraining discriminator + ElectraForMaskedLM generator in generator/"
        description = ("A general tiny Japanese ELECTRA (replaced-token detection), pretrained by `denki pretrain` "
                       "on every general corpus of the kit's shared data (Wikipedia, man pages, technical "
                       "documentation). Start here instead of random weights: continue RTD on your own corpus "
                       "(domain-adaptive pretraining) or fine-tune a router on your labels.")
        usage = [f"denki pretrain --init-from {args.name} --corpus your_corpus.txt --max-flops 5e13 --out runs/dapt",
                 f"denki finetune classify --model {args.name} --train train.jsonl --dev dev.jsonl --out runs/router",
                 f"denki finetune qa --model {args.name} --train qa_train.json --dev qa_dev.json --out runs/qa"]
        budget = f"--max-flops {ident['max_flops']:g}" if ident.get("max_flops") else f"--steps {ident['steps']}"
        default_cmd = [f"denki tokenizer train --corpus {' '.join(runinfo['corpus'])} --vocab-size 8000 "
                       f"--out {runinfo['tokenizer_dir']}",
                       f"denki pretrain --corpus {' '.join(runinfo['corpus'])} --tokenizer {runinfo['tokenizer_dir']} "
                       f"--size tiny --objective electra {budget} --precision {stats['precision']} "
                       f"--seed {ident['seed']} --out {run}",
                       f"denki pretrain export --checkpoint {run} --out {out} --generator"]
        init = runinfo.get("init_from")
        if init:  # a leg continuing an earlier checkpoint: the FLOPs behind the weights are both legs', and the
            # recipe is the earlier checkpoint's plus this leg (--init-from resets the optimizer and the schedule)
            prev_dir = Path(init["path"])
            prev = json.loads((prev_dir / "card.json").read_text(encoding="utf-8"))
            stats["leg"] = {"flops": summary["flops"], "steps": summary["steps"], "tokens": summary["tokens"],
                            "wall_s": summary["wall_s"], "init_from": prev["name"], "init_sha256": init["sha256"]}
            stats["legs"] = prev.get("legs", [{k: prev.get(k) for k in ("flops", "steps", "tokens", "wall_s")}
                                              | {"name": prev["name"]}]) + [stats["leg"] | {"name": args.name}]
            for k in ("flops", "steps", "tokens", "wall_s"):
                stats[k] = sum(leg[k] for leg in stats["legs"])
            default_cmd = prev.get("command", []) + [
                f"denki pretrain --corpus {' '.join(runinfo['corpus'])} --init-from {prev['name']} "
                f"--objective electra {budget} --precision {stats['precision']} --seed {ident['seed']} --out {run}",
                f"denki pretrain export --checkpoint {run} --out {out} --generator"]
        gen_params = n_params(tmp / "generator" / "model.safetensors")
    else:
        shutil.copytree(run / "bundle" if (run / "bundle").is_dir() else run, tmp)
        man = read_manifest(tmp)
        parent = json.loads((Path(args.parent) / "card.json").read_text(encoding="utf-8")) if args.parent else {}
        corpus = parent.get("corpus", []) + corpus_rows([(str(DATA / "jaquad_train.squad2.json.gz"),
                                                          man.get("source", {}).get("train_sha256", ""))])
        stats = {k: parent.get(k) for k in ("steps", "tokens", "flops", "wall_s", "batch_size", "seq_len",
                                            "precision")}
        stats["recipe"] = {"finetune": man.get("source", {}).get("command")}
        stats["diagnostics"] = {}
        architecture = "ElectraForQuestionAnswering" + (" + answerable head" if (tmp / "task.json").is_file() and
                                                        json.loads((tmp / "task.json").read_text()).get("null_rule")
                                                        in ("head", "combined") else "")
        description = (f"A general Japanese extractive QA model (exact span of the passage, or no answer), "
                       f"fine-tuned from {parent.get('name', 'the general checkpoint')} on all of JaQuAD train. Start "
                       "here to fine-tune on your own question/passage pairs, as one starts from a SQuAD model.")
        usage = [f"denki finetune qa --model {args.name} --train your_qa_train.json --dev your_qa_dev.json "
                 "--out runs/qa",
                 f"denki export --model {args.name} --out runs/qa-onnx --optimize O2 --quantize int8"]
        default_cmd = parent.get("command", []) + [man.get("source", {}).get("command", "")]
        gen_params = None
    cfg = json.loads((tmp / "config.json").read_text(encoding="utf-8"))
    licence_files = copy_licences(corpus, tmp)
    scores = json.loads(Path(args.scores).read_text(encoding="utf-8")) if args.scores else {}
    card = {"name": args.name, "kind": args.kind, "description": description, "architecture": architecture,
            "size": "tiny" if cfg["hidden_size"] <= 128 else "small" if cfg["hidden_size"] <= 256 else "base",
            "layers": cfg["num_hidden_layers"], "hidden": cfg["hidden_size"], "vocab_size": cfg["vocab_size"],
            "parameters": n_params(tmp / "model.safetensors"), "generator_parameters": gen_params, **stats,
            "cpu": cpu_flags() if args.kind == "pretrained" else parent.get("cpu", ""),
            "corpus": corpus, "licence": LICENCE, "licence_files": licence_files,
            "parent": parent.get("name") if args.kind == "qa" else None,
            "dev_scores": scores, "scores_note": args.scores_note, "usage": usage,
            "command": args.command or default_cmd, "rebuild": args.rebuild or "not recorded"}
    (tmp / "card.json").write_text(json.dumps(card, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    (tmp / "README.md").write_text(render_readme(card), encoding="utf-8")
    write_sums(tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    print(f"{args.name}: {card['parameters']:,} parameters → {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
