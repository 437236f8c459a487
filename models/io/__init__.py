"""Files in and out, the bottom of ``models/``: errors a user can act on (:mod:`.errors`), atomic writes and
hashing (:mod:`.fileio`), user text files, plain or .gz (:mod:`.textio`), labelled JSONL/CSV records
(:mod:`.records`) and the headless matplotlib set-up every report uses (:mod:`.plotting`).

May import: nothing from denki (standard library and numpy; matplotlib only inside functions). Torch-free.
"""
