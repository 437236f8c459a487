# Sourced (from the repository root) by experiments/hybrid1e14/*.sh: one thread per run, offline, the shared corpora ($C),
# the output folder ($R), the CLI ($B), the fine-tuning helpers of experiments/levers1e14/ft.sh (ft, ft_model) and
# pretrain_ft (below).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
C="../shared/data/corpus_manpages_ja.txt.gz ../shared/data/corpus_wiki_ja.txt.gz"
R=runs/hybrid; B=.venv/bin/denki
mkdir -p $R
. experiments/levers1e14/ft.sh  # ft CORE RUN_DIR TASK TEXT_FIELD; ft_model CORE OUT TASK TEXT_FIELD MODEL_OPTIONS...
# pretrain_ft CORE NAME PRETRAIN_OPTIONS...: a tiny pretraining on $C with runs/tok8k into $R/NAME (skipped when its
# bundle exists), then 3-seed fine-tuning on both tasks (ft); prints the wall times. The lever scripts' one body.
pretrain_ft() {
  local core=$1 name=$2 start; start=$(date +%s); shift 2
  # --gen-temperature 1: the sampling these scripts' runs were measured with, pinned so that they reproduce whatever
  # tiny ELECTRA's long-run default is (it was 3 for one session, docs/results.md); a lever's own --gen-temperature,
  # later in "$@", wins. --cls-contrast 0 likewise: the paper's loss, which tiny ELECTRA runs of >= 1,000 steps no
  # longer get by default (--cls-contrast 1 since 2026-12-03); a lever's own --cls-contrast wins. Both are no-ops for
  # MLM and electra-mlm and leave the run identity of the documented runs unchanged.
  [ -f $R/$name/bundle/manifest.json ] || taskset -c $core $B pretrain --corpus $C --tokenizer runs/tok8k \
    --size tiny --gen-temperature 1 --cls-contrast 0 "$@" --no-progress --out $R/$name > $R/$name.log 2>&1
  echo "$name PRETRAIN wall $(( $(date +%s) - start )) s"
  ft $core $R/$name livedoor-title title
  ft $core $R/$name jaquad-qtype text
  echo "$name ALL wall $(( $(date +%s) - start )) s"
}
