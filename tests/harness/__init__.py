"""What several test modules share (tests/README.md): no test module imports another one."""
