"""Pictures and pages drawn from runs: learning curves, each algorithm's figures, the HTML
report, Elo league plots. It reads runs (payoff.track) and trained algorithms; nothing below
it imports it, so training never depends on drawing."""
