"""concilium: the application shell (command line) above ``sim`` and ``node``.

The library lives in the top-level packages ``ledger``, ``consensus``, ``learning``, ``node`` and ``sim``.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
