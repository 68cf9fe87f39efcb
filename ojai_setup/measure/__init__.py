"""Measuring what a route computes and what it buys: ``ojai bench`` (paired drafted-vs-plain
campaigns), ``ojai tune`` (the drafting and backend sweeps, and the choice written through a
plan) and the correctness gate that ``ojai verify``, ``ojai tune``, an upgrade and an apply run.

Its own layers, top to bottom (an import-linter contract in pyproject.toml):

- :mod:`.tune`: the tuner;
- :mod:`.command` (a bench campaign on routes or servers) and :mod:`.report` (its report);
- :mod:`.campaign` (paired requests), :mod:`.sweep` (backend x drafting x depth), :mod:`.gate`
  (a backend against the CPU) and :mod:`.plot`;
- :mod:`.results` (what a campaign measured, as documents);
- :mod:`.servers` (launch scripts, starting and stopping llama-server);
- :mod:`.client`, :mod:`.kinds`, :mod:`.prompts`, :mod:`.stats`: the HTTP client, the
  drafting kinds' flags, the prompts, and the statistics (pure).

The command-line glue (options, terminal output) is in :mod:`ojai_setup.commands.bench`.
"""
