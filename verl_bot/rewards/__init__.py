"""Token-level rewards: reward manager, verdict composition, span->token mapping, scorer clients."""
