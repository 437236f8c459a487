"""The reader (extractive QA) as a registered task (:mod:`models.registry`): what export, the runtime, batch,
HTTP and the demo ask of it. Fine-tuning keeps its own command (:mod:`.finetune`)."""
from __future__ import annotations

from pathlib import Path

from denki.models.task.base import Task

#: how far a served model's null score difference may lie from the one the bundle recorded (PyTorch's) before a
#: reload refuses it (serve.reload.check_parity); int8 variants move it by a few tenths on the sample
SERVING_ATOL = 1.0


class ReaderTask(Task):
    name = "qa"
    command = "qa"
    title = "reader"
    hf_task = "question-answering"
    experiment_metric = "best_f1"

    def runtime_head(self, session):
        from denki.models.qa.runtime import ReaderHead

        return ReaderHead(session)

    def examples(self, sample: dict, n: int = 5) -> list[list[str]]:
        """The first ``n`` (question, passage) pairs with a passage short enough to read on a screen."""
        out = []
        for e in sample["examples"]:
            if len(e["context"]) < 1500:
                out.append([e["question"], e["context"]])
            if len(out) >= n:
                break
        return out

    def warmup_example(self) -> list[str]:
        from denki.models.qa.runtime import WARMUP_QA

        return list(WARMUP_QA)

    def request(self, example: list[str]):
        return tuple(example)

    def serving_sample(self, sample, n):
        """The first ``n`` questions with the answers the fine-tuned PyTorch model gave (``expected``)."""
        rows = [e for e in sample["examples"] if "expected" in e][:n]
        return [(e["question"], e["context"]) for e in rows], [e["expected"] for e in rows]

    def serving_agrees(self, result, expected):
        """The null score difference within :data:`SERVING_ATOL` of PyTorch's: it does not depend on the null
        threshold (calibration may move that after the sample was written), and a wrong model is far off."""
        return abs(float(result["null_score_diff"]) - float(expected["null_score_diff"])) <= SERVING_ATOL

    @staticmethod
    def answerable(task_json: dict) -> bool:
        """Trained with ``--answerable-head``: the graph gets a third output, ``answerable_logits`` ``(batch,)``."""
        return bool(task_json.get("answerable_head"))

    def torch_model(self, bundle_dir: Path, task_json: dict):
        from denki.models.bundle.pytorch import load_model
        from denki.models.qa.heads import qa_model_class

        if self.answerable(task_json):
            cls = qa_model_class(bundle_dir, answerable_head=True)
        else:  # Auto class: the bundle's config.json decides the architecture
            from transformers import AutoModelForQuestionAnswering as cls
        return load_model(bundle_dir, cls).eval()

    def export_fp32(self, src: Path, work: Path, task_json: dict) -> Path:
        if not self.answerable(task_json):
            return super().export_fp32(src, work, task_json)
        return self._export_fp32_answerable(src, work, task_json)

    def _export_fp32_answerable(self, src: Path, work: Path, task_json: dict) -> Path:
        """A QA bundle trained with ``--answerable-head`` (:mod:`models.qa.heads`): optimum's question-answering
        config for the architecture plus a third output, ``answerable_logits`` ``(batch,)``. ``main_export`` would
        load the plain Auto class and drop the head, and ``onnx_export_from_model`` refuses a class outside
        transformers, so the subclass goes through optimum's lower-level ``export`` with that config."""
        from optimum.exporters.onnx import export
        from optimum.exporters.tasks import TasksManager

        from denki.models.qa.heads import qa_model_class

        model = self.torch_model(src, task_json)
        ctor = TasksManager.get_exporter_config_constructor("onnx", model_type=model.config.model_type,
                                                             task=self.hf_task, library_name="transformers")
        base_cls = type(ctor(model.config, task=self.hf_task))

        class WithAnswerable(base_cls):
            @property
            def outputs(self):
                return {**super().outputs, "answerable_logits": {0: "batch_size"}}

        export(model, WithAnswerable(model.config, task=self.hf_task), work / "model.onnx", device="cpu")
        # the plain QA class in config.json (the graph is its superset), so optimum's ORTModelForQuestionAnswering
        # and the optimiser read it as they read any QA export (this model is not used again: its config may change)
        model.config.architectures = [qa_model_class(src, answerable_head=False).__name__]
        model.config.save_pretrained(work)
        return work / "model.onnx"

    def parity_data(self, src, parity_file, task_json, limit):
        from denki.models.qa.parity import load_parity

        return load_parity(src, parity_file, task_json, limit)

    def sample_encodings(self, tok, data, task_json, limit):
        from denki.models.qa.parity import encodings

        return encodings(tok, data, task_json, limit)

    def parity(self, model, tok, files, data, task_json):
        from denki.models.qa.parity import parity

        return parity(model, tok, files, data, task_json)

    def golden(self, tok, data, task_json, n=50):
        from denki.models.qa.parity import golden

        return golden(tok, data, task_json, n)

    def gate_hint(self, task_json, failed):
        # the answerable head is finetune qa's default for ELECTRA bundles, and int8 variants of head models can
        # fail the gate where the plain head's pass (docs/qa.md): say so where a user meets it
        if self.answerable(task_json) and any(b.startswith("int8") for b in failed):
            return ("\nthis QA model has the answerable head (task.json answerable_head); int8 variants of head "
                    "models can miss the gate where the plain head passes (docs/qa.md): export it without "
                    "--quantize, or fine-tune with --no-answerable-head for an int8 model")
        return ""


READER = ReaderTask()
