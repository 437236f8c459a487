"""What every task is made of (the base of the task registry, :mod:`models.registry`): the :class:`~.base.Task`
spec a task package fills in — its bundle kind and head, its features and loss, its export outputs and parity
check, its runtime head (post-processing) — and the torch-free pieces the heads share: length-bucketed batching
and the input limits (:mod:`.batching`), and the generic fine-tuning loop a task without its own can use
(:mod:`.finetune`, torch inside functions).

A task package (``models/classify``, ``models/qa``, a new one) subclasses :class:`~.base.Task` in its ``task``
module; :mod:`models.registry` lists the instances. Nothing here names a task.

May import: :mod:`models.io`, :mod:`models.text`, :mod:`models.bundle`, :mod:`models.training`. Torch-free at import
time (the serving runtime imports it).
"""
