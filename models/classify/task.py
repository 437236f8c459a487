"""The router as a registered task (:mod:`models.registry`): what export, the runtime, batch, HTTP, Ray and the
demo ask of it. Fine-tuning keeps its own command (:mod:`.finetune`: calibration, fusion, self-training)."""
from __future__ import annotations

from pathlib import Path

from denki.models.task.base import Task


class RouterTask(Task):
    name = "classifier"
    command = "classify"
    title = "router"
    hf_task = "text-classification"
    experiment_metric = "macro_f1"

    def bundle_files(self, task_json: dict) -> tuple[str, ...]:
        """The TF-IDF model that a fused router or one with an out-of-scope rule carries (copied when present)."""
        from denki.models.classify.parity import LEXICAL_FILES

        return LEXICAL_FILES

    def runtime_head(self, session):
        from denki.models.classify.runtime import RouterHead

        return RouterHead(session)

    def examples(self, sample: dict, n: int = 5) -> list[list[str]]:
        """One short text per label (at most ``n``), in the sample's order."""
        seen, out = set(), []
        for t, lab in zip(sample["texts"], sample.get("labels") or [None] * len(sample["texts"])):
            if lab not in seen and len(t) < 300:
                seen.add(lab)
                out.append([t])
            if len(out) >= n:
                break
        return out

    def warmup_example(self) -> list[str]:
        from denki.models.classify.runtime import WARMUP_TEXT

        return [WARMUP_TEXT]

    def torch_model(self, bundle_dir: Path, task_json: dict):
        # Auto class: the bundle's config.json decides the architecture (ELECTRA, or BERT from `denki import`)
        from transformers import AutoModelForSequenceClassification

        from denki.models.bundle.pytorch import load_model

        return load_model(bundle_dir, AutoModelForSequenceClassification).eval()

    def parity_data(self, src, parity_file, task_json, limit):
        from denki.models.classify.parity import load_parity

        return load_parity(src, parity_file, task_json, limit)

    def sample_encodings(self, tok, data, task_json, limit):
        from denki.models.classify.parity import encodings

        return encodings(tok, data, task_json, limit)

    def parity(self, model, tok, files, data, task_json):
        from denki.models.classify.parity import parity

        return parity(model, tok, files, data, task_json)

    def golden(self, tok, data, task_json, n=50):
        from denki.models.classify.parity import golden

        return golden(tok, data, task_json, n)

    def extra_gates(self, src, task_json):
        from denki.models.classify.parity import lexical_gate

        # raises when the numpy TF-IDF model drifts from scikit-learn
        return {"lexical": lexical_gate(src)} if (task_json.get("fusion") or task_json.get("scope")) else {}


ROUTER = RouterTask()
