"""The boot paths: one module each (:mod:`ojai_setup.boot.base` says what a module gives,
:mod:`ojai_setup.boot.table` lists them, :mod:`ojai_setup.boot.detect` decides which one a
machine has). Below ``domain``, above ``formats``: the paths parse with ``formats/``, read the
machine only through the Root or context they are handed, and are asked by ``facts/`` (the
configured and generated states), ``domain/checks.py`` (doctor's words) and ``steps/ttm.py``
(the edit)."""
