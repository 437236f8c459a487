"""Passage retrieval for asking a whole manual (issue 61): documents → passages (:mod:`.passages`: text files one
paragraph per line, Markdown and other plain text split at headings and blank lines, JSONL/CSV records, the
contexts of a SQuAD 2.0 file), MeCab words for BM25 (:mod:`.words`), and the index — a folder with a manifest,
ranked by SQLite FTS5's BM25 over denki's MeCab words (:mod:`.index`) — plus passage recall on a labelled QA file
(:mod:`.evaluate`).

May import: :mod:`models.io`, :mod:`models.text`. Torch-free (the serving runtime searches with it); SQLite FTS5
ships with Python, so the runtime install needs nothing more.
"""
