"""Where the React server looks for its Node dependencies (reward_servers/react/node_deps.py): a clone's own folder,
an installed package's user cache, or REACT_REWARD_NODE_DIR. tests/e2e/test_wheel.py installs them for a wheel and
scores a component through them."""

from __future__ import annotations

from pathlib import Path

from reward_servers.react import node_deps, worker

ROOT = Path(__file__).resolve().parents[2]


def test_a_clone_keeps_them_in_the_package_folder(monkeypatch):
    monkeypatch.delenv("REACT_REWARD_NODE_DIR", raising=False)
    assert node_deps.node_dir() == ROOT / "reward_servers" / "react"


def test_an_installed_package_keeps_them_in_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("REACT_REWARD_NODE_DIR", raising=False)
    monkeypatch.setattr(node_deps, "PACKAGE_DIR", tmp_path / "lib" / "site-packages" / "reward_servers" / "react")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert node_deps.node_dir() == tmp_path / "xdg" / "verl-bot" / "react"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert node_deps.node_dir() == tmp_path / "home" / ".cache" / "verl-bot" / "react"


def test_the_variable_wins_and_the_server_checks_that_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("REACT_REWARD_NODE_DIR", str(tmp_path / "node"))
    assert node_deps.node_dir() == tmp_path / "node"
    ready, why = worker.node_ready()
    assert not ready and str(tmp_path / "node" / "node_modules") in why and "reward_servers.react.node_deps" in why
