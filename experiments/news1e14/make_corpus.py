"""Write the text of labelled-data *train* files as a pretraining corpus: one paragraph per line.

The user's scenario in miniature: the company's own unlabelled text (here the news articles of livedoor's train
split, and the questions of JaQuAD's question-type train split, labels dropped) beside the public corpora. Only
train files are read, so no dev or held-out text reaches pretraining. Conventions of ../shared/data's corpus files:
text verbatim, split on newlines, lines under 10 characters dropped, exact duplicates removed, order kept. The
output is not committed (the livedoor articles are CC BY-ND; see the data README).

    python experiments/news1e14/make_corpus.py runs/news/corpus_domain_train.txt \
        ../shared/data/livedoor_train.jsonl.gz:title,text ../shared/data/jaquad_qtype_train.jsonl.gz:text
"""
import gzip
import json
import os
import sys

dst, sources = sys.argv[1], sys.argv[2:]
seen: set[str] = set()
os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
with open(dst + ".partial", "w", encoding="utf-8") as out:
    for spec in sources:
        path, fields = spec.rsplit(":", 1)
        n_rows = n_lines = n_chars = 0
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                n_rows += 1
                for field in fields.split(","):
                    for par in row[field].split("\n"):
                        par = par.strip()
                        if len(par) < 10 or par in seen:
                            continue
                        seen.add(par)
                        out.write(par + "\n")
                        n_lines += 1
                        n_chars += len(par)
        print(f"{path} ({fields}): {n_rows} rows -> {n_lines} lines, {n_chars} characters")
os.replace(dst + ".partial", dst)
print(f"wrote {dst}")
