"""What a run shows of its token credit: exact token records of chosen steps, and the panels of the trackers.

    token_records.py  token ids, bytes, rewards and advantages of the steps asked for (the token-credit report)
    panels.py         the token-credit panel and per-token histograms for wandb and TensorBoard
"""
