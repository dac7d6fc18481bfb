"""One contiguous parameter vector per model: flatten, unflatten and zero-copy binding.

Every learning algorithm in concilium (aggregators, attacks, CMFL scoring, FedAvg/FedProx/MIFA/MimiC/SCAFFOLD
state) works on *flat* update vectors ``θ ∈ ℝ^d``. The layout is fixed: the model's parameters in
``module.named_parameters()`` order, each flattened row-major (C order). Buffers (BatchNorm running statistics) are
not part of the vector; none of the registered models has one (VGG-11 is used without BatchNorm, mimic spec §4,
sself spec §7 item 13).

Two ways to move between a module and its vector:

* :func:`flatten_parameters` / :func:`unflatten_parameters` copy (work on any module, never alias it);
* :class:`FlatParameters` re-seats the module's parameters *and gradients* as views of one vector each, so that
  ``flat.vector`` **is** the model (no copy to read it, one ``copy_`` to load a global model) and one fused
  ``vector.add_(grad, alpha=-lr)`` is an SGD step. This is what local training uses (the simulator's hot path).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from learning._errors import ConfigError

__all__ = [
    "FlatParameters",
    "ParameterLayout",
    "flatten_parameters",
    "parameter_count",
    "parameter_layout",
    "unflatten_parameters",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ParameterLayout:
    """Where each named parameter lives inside the flat vector.

    Attributes
    ----------
    names, shapes, offsets:
        Parallel tuples: parameter ``names[i]`` of shape ``shapes[i]`` occupies
        ``vector[offsets[i] : offsets[i] + prod(shapes[i])]``.
    numel:
        Length ``d`` of the flat vector.
    """

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]
    numel: int

    def slice_of(self, name: str) -> slice:
        """The slice of the flat vector that holds parameter ``name``."""
        try:
            i = self.names.index(name)
        except ValueError:
            raise ConfigError(f"no parameter named {name!r} (have {', '.join(self.names)})") from None
        size = 1
        for dim in self.shapes[i]:
            size *= dim
        return slice(self.offsets[i], self.offsets[i] + size)


def parameter_count(module: nn.Module) -> int:
    """Number of scalars in ``module``'s parameters, i.e. the length ``d`` of its flat vector."""
    return sum(p.numel() for p in module.parameters())


def parameter_layout(module: nn.Module) -> ParameterLayout:
    """The :class:`ParameterLayout` of ``module`` (``named_parameters()`` order)."""
    names: list[str] = []
    shapes: list[tuple[int, ...]] = []
    offsets: list[int] = []
    offset = 0
    for name, p in module.named_parameters():
        names.append(name)
        shapes.append(tuple(p.shape))
        offsets.append(offset)
        offset += p.numel()
    return ParameterLayout(names=tuple(names), shapes=tuple(shapes), offsets=tuple(offsets), numel=offset)


def _parameters(module: nn.Module) -> list[nn.Parameter]:
    params = list(module.parameters())
    if not params:
        raise ConfigError(f"{type(module).__name__} has no parameters")
    dtype, device = params[0].dtype, params[0].device
    for p in params:
        if p.dtype != dtype or p.device != device:
            raise ConfigError(
                f"all parameters must share one dtype and device to be flattened; found {dtype}/{device} "
                f"and {p.dtype}/{p.device}"
            )
    return params


def flatten_parameters(module: nn.Module) -> torch.Tensor:
    """Copy ``module``'s parameters into a new contiguous 1-D tensor (``named_parameters()`` order).

    If ``module`` was bound with :class:`FlatParameters`, ``FlatParameters.vector`` gives the same values
    without a copy.
    """
    params = _parameters(module)
    with torch.no_grad():
        return torch.cat([p.detach().reshape(-1) for p in params])


def unflatten_parameters(module: nn.Module, vector: torch.Tensor) -> None:
    """Copy the flat ``vector`` into ``module``'s parameters in place (inverse of :func:`flatten_parameters`).

    Raises
    ------
    ConfigError
        If ``vector`` is not 1-D of length :func:`parameter_count` ``(module)``.
    """
    params = _parameters(module)
    total = sum(p.numel() for p in params)
    if vector.dim() != 1 or vector.numel() != total:
        raise ConfigError(f"expected a 1-D vector of {total} values, got shape {tuple(vector.shape)}")
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(vector[offset : offset + n].view_as(p))
            offset += n


class FlatParameters:
    """A module whose parameters and gradients are views of two contiguous vectors.

    After ``flat = FlatParameters.bind(model)``:

    * ``flat.vector`` (1-D, length ``d``) holds every parameter: reading it is free, ``flat.load_(θ)`` is one
      ``copy_``; ``model``'s parameters change when ``flat.vector`` does, and vice versa;
    * ``flat.grad`` holds every gradient: ``loss.backward()`` accumulates into it in place (PyTorch adds into an
      existing ``.grad`` when not building a higher-order graph), so call :meth:`zero_grad_` before each
      backward and never ``optimizer.zero_grad(set_to_none=True)`` (that would detach the views).

    Parameters keep their identity (``model.parameters()`` yields the same objects), so optimizers and hooks
    created before or after binding still work.

    Examples
    --------
    >>> import torch
    >>> model = torch.nn.Linear(3, 2)
    >>> flat = FlatParameters.bind(model)
    >>> flat.numel
    8
    >>> flat.load_(torch.zeros(8)); float(model.weight.detach().abs().sum())
    0.0
    """

    __slots__ = ("grad", "layout", "module", "vector")

    module: nn.Module
    vector: torch.Tensor
    grad: torch.Tensor
    layout: ParameterLayout

    def __init__(self, module: nn.Module, vector: torch.Tensor, grad: torch.Tensor, layout: ParameterLayout) -> None:
        self.module = module
        self.vector = vector
        self.grad = grad
        self.layout = layout

    @classmethod
    def bind(cls, module: nn.Module) -> FlatParameters:
        """Re-seat ``module``'s parameters (values kept) and gradients as views of two new flat vectors."""
        params = _parameters(module)
        layout = parameter_layout(module)
        total = layout.numel
        vector = torch.empty(total, dtype=params[0].dtype, device=params[0].device)
        grad = torch.zeros_like(vector)
        offset = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                view = vector[offset : offset + n]
                view.copy_(p.detach().reshape(-1))
                p.data = view.view_as(p)
                p.grad = grad[offset : offset + n].view_as(p)
                offset += n
        return cls(module, vector, grad, layout)

    @property
    def numel(self) -> int:
        """Length ``d`` of the flat vector."""
        return self.vector.numel()

    def load_(self, vector: torch.Tensor) -> None:
        """Set every parameter from the flat ``vector`` (one copy; dtype/device converted if needed)."""
        if vector.dim() != 1 or vector.numel() != self.vector.numel():
            raise ConfigError(f"expected a 1-D vector of {self.vector.numel()} values, got shape {tuple(vector.shape)}")
        self.vector.copy_(vector)

    def zero_grad_(self) -> None:
        """Zero the flat gradient in place (keeps the per-parameter ``.grad`` views attached)."""
        self.grad.zero_()

    def is_bound(self) -> bool:
        """Whether every parameter of the module still aliases :attr:`vector` and :attr:`grad`.

        False after something replaced a parameter's ``.data`` or set ``.grad = None``.
        """
        params: Sequence[nn.Parameter] = list(self.module.parameters())
        vec_ptr, grad_ptr = self.vector.data_ptr(), self.grad.data_ptr()
        item = self.vector.element_size()
        for p, offset in zip(params, self.layout.offsets, strict=True):
            if p.data_ptr() != vec_ptr + offset * item:
                return False
            if p.grad is None or p.grad.data_ptr() != grad_ptr + offset * item:
                return False
        return True
