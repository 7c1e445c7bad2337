"""Evaluation metrics (pass@k, compile rate, pairwise win rate)."""
