"""Extractive QA (``denki finetune qa`` / ``denki evaluate qa``): reading SQuAD 2.0 data (:mod:`.data`),
windows and span targets (:mod:`.features`), the optional answerable head (:mod:`.heads`, torch), and fine-tuning
as the router has it: the settings (:mod:`.config`), the model and one step's loss (:mod:`.model`), the features and
one seed's training loop (:mod:`.train`), the run as a list of steps (:mod:`.finetune`), batched PyTorch prediction
(:mod:`.predict`), PyTorch evaluation of a bundle (:mod:`.evaluate`) and the report with its figures
(:mod:`.report`) — torch inside functions throughout; and the numpy pieces that the ONNX runtime shares:
post-processing to an exact span of the original context or no answer (:mod:`.postprocess`) and character-level
SQuAD 2.0 metrics (:mod:`.metrics`).

May import: :mod:`models.io`, :mod:`models.text`, :mod:`models.bundle`, :mod:`models.training`. Inside, one way:
``finetune → train, evaluate → predict, report → features → data``; ``postprocess`` and ``metrics`` import nothing
from denki.
"""
