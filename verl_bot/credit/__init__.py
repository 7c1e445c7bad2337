"""Token credit: a scorer's verdict becomes one reward per response token (pure; nothing of verl, no I/O).

    token_credit.py  THE composition: a verdict and a rollout's token layout -> token rewards, streams, metrics
    verdict.py       the verdict, parsed and validated once (`Verdict`), or the scorer's failure
    spans.py         character spans of a response -> its tokens
    turns.py         a multi-turn response's turns (from the response mask)
    sessions.py      a multi-output sample's outputs, one rollout
    streams.py       the named reward streams (local, step ends, outcome, format) that PURE and PASS read
    dense.py         the dense `reward_score` forms that carry token rewards across Ray
    context.py       the batch context the trainer hooks give an estimator or a loss (streams, failed rows)
"""
