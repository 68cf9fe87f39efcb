"""The table of action kinds (model/actions.py ACTION_KINDS) against the actions themselves."""

from __future__ import annotations

import importlib
import typing

from ojai_setup.model.actions import ACTION_KINDS, Action
from ojai_setup.planning.plan import FETCH_KINDS


def test_every_action_of_a_plan_has_one_row_and_each_row_names_its_own_kind():
    union = typing.get_args(typing.get_args(Action)[0])
    assert {m.__name__ for m in union} == {row.model.__name__ for row in ACTION_KINDS.values()}
    for kind, row in ACTION_KINDS.items():
        assert row.model.model_fields["kind"].default == kind


def test_every_executor_and_verifier_the_table_names_exists():
    for kind, row in ACTION_KINDS.items():
        for where in (row.executor, row.verifier):
            if where is not None:
                module, function = where
                assert callable(getattr(importlib.import_module(module), function)), (kind, where)
    # the one kind whose executor a command registers: ojai setup, when its plan holds one
    assert [k for k, row in ACTION_KINDS.items() if row.executor is None] == ["prove_build"]
    from ojai_setup.commands.upgrade import execute_prove_build

    assert callable(execute_prove_build)


def test_the_fetch_phase_is_the_table_s():
    assert FETCH_KINDS == {"install_archive", "install_package", "build_from_source",
                           "prove_build", "hub_download"}
