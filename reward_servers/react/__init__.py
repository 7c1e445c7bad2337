"""React reward server (issue 4): bundle, lint, render and judge generated React components."""
