"""Byzantine attacks: crafted updates and poisoned local data. An attack never inspects the defence.

* ``_update``  :class:`UpdateAttack` ``attack(honest, rng=rng) -> update``: gradient scaling, same value, sign
               flip, model scaling, Gaussian, ALIE, IPM/FOE, mimic (:func:`parse_update_attack`);
* ``_data``    :class:`DataAttack` ``transform(x, y, rng=rng)``: label flip, backdoor (:func:`parse_data_attack`).

A new attack: a frozen dataclass decorated with ``@register_update_attack("name")`` or
``@register_data_attack("name")``; a scenario names it in ``[adversary] attack`` / ``data_attack``.
"""

from learning.attacks._update import (
    ALIE, Gaussian, GradientScaling, InnerProductManipulation, Mimic, ModelScaling, SameValue, SignFlip,
    UPDATE_ATTACKS, UpdateAttack, craft_byzantine_updates, format_attack, parse_update_attack,
    register_update_attack,
)
from learning.attacks._data import (
    Backdoor, DATA_ATTACKS, DataAttack, LabelFlip, parse_data_attack, register_data_attack,
)

__all__ = [
    "ALIE", "Backdoor", "DATA_ATTACKS", "DataAttack", "Gaussian", "GradientScaling", "InnerProductManipulation",
    "LabelFlip", "Mimic", "ModelScaling", "SameValue", "SignFlip", "UPDATE_ATTACKS", "UpdateAttack",
    "craft_byzantine_updates", "format_attack", "parse_data_attack", "parse_update_attack", "register_data_attack",
    "register_update_attack",
]
