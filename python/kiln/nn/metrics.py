"""Metrics for Model(metrics=...): the engine computes them; these name them."""


class Metric:
    _kiln_name = None


class Accuracy(Metric):
    _kiln_name = "accuracy"

    def __init__(self, eval_type="classification"):
        if eval_type != "classification":
            raise ValueError(f"Accuracy: eval_type {eval_type!r}; Kiln has 'classification'")


class Loss(Metric):
    _kiln_name = "loss"
