"""Models: the papers' architectures by name, and a model as one flat parameter vector and as a ledger blob.

* ``_zoo``     the model registry (``logreg``, ``mlp``, ``lenet5``, ``fmnist_cnn``, ``femnist_cnn``, ``vgg11``,
               ``char_lstm``, ``word_lstm``): typed frozen specs, :func:`model_spec` (the config boundary),
               :func:`build_model` with seeded initialisation;
* ``_params``  the flat vector ``θ ∈ ℝ^d`` every algorithm works on (:class:`FlatParameters`, flatten/unflatten);
* ``_blobs``   that vector as a canonical tensor blob (what the ledger commits to) and back, strictly decoded.

A new architecture: a frozen spec dataclass with ``build()`` and ``initialize(module, generator)``, decorated with
``@register_model("name")``.
"""

from learning.models._zoo import (
    CharLSTMSpec, FEMNISTCNNSpec, FMNISTCNNSpec, LeNet5Spec, LogisticRegressionSpec, MLPSpec, MODELS, ModelSpec,
    SeededDropout, VGG11Spec, WordLSTMSpec, build_model, model_spec, register_model, set_dropout_generator,
)
from learning.models._params import (
    FlatParameters, ParameterLayout, flatten_parameters, parameter_count, parameter_layout, unflatten_parameters,
)
from learning.models._blobs import VECTOR_TENSOR, blob_digest, blob_to_vector, vector_to_blob

__all__ = [
    "CharLSTMSpec", "FEMNISTCNNSpec", "FMNISTCNNSpec", "FlatParameters", "LeNet5Spec", "LogisticRegressionSpec",
    "MLPSpec", "MODELS", "ModelSpec", "ParameterLayout", "SeededDropout", "VECTOR_TENSOR", "VGG11Spec",
    "WordLSTMSpec", "blob_digest", "blob_to_vector", "build_model", "flatten_parameters", "model_spec",
    "parameter_count", "parameter_layout", "register_model", "set_dropout_generator", "unflatten_parameters",
    "vector_to_blob",
]
