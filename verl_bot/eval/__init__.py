"""Evaluation: metrics (pass@k, compile rate, pairwise win rate), figures, and the CLI ``python -m verl_bot.eval``
(generate / compile-rate / winrate / passk / plot; see ``__main__.py``)."""
