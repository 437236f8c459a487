# Sourced (from the repository root) by docs/hybrid1e14/*.sh: one thread per run, offline, the shared corpora ($C),
# the output folder ($R), the CLI ($B) and the fine-tuning helpers of docs/levers1e14/ft.sh (ft, ft_model).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
C="../shared/data/corpus_manpages_ja.txt.gz ../shared/data/corpus_wiki_ja.txt.gz"
R=runs/hybrid; B=.venv/bin/denki
mkdir -p $R
. docs/levers1e14/ft.sh  # ft CORE RUN_DIR TASK TEXT_FIELD; ft_model CORE OUT TASK TEXT_FIELD MODEL_OPTIONS...
