"""The ANTLR runtime under math-verify's LaTeX parser is the one installed, and it is the one hydra allows.

The `math` extra asks for `antlr4-python3-runtime==4.9.3` next to math-verify (whose own extras only pin the
same runtime). hydra (verl's config system) needs 4.9.*; math-verify's parser, latex2sympy2_extended, picks its
generated parser by the installed runtime's version. Checked in a worker process of the math server's pool,
where every answer is parsed.
"""

from importlib.metadata import requires, version

from packaging.requirements import Requirement

from reward_servers.math.pool import WorkerPool


def _spec(package: str, dependency: str):
    """The version specifier `package` declares for `dependency` (extras markers ignored)."""
    for line in requires(package) or []:
        req = Requirement(line)
        if req.name.replace("_", "-") == dependency and req.marker is None:
            return req.specifier
    raise AssertionError(f"{package} does not depend on {dependency}")


def test_the_installed_antlr_runtime_satisfies_hydra_and_math_verify():
    installed = version("antlr4-python3-runtime")
    assert installed == "4.9.3"
    assert installed in _spec("hydra-core", "antlr4-python3-runtime")
    assert installed in _spec("latex2sympy2_extended", "antlr4-python3-runtime")
    assert version("math-verify") == "0.9.0"


def test_the_math_servers_workers_parse_latex_on_that_runtime():
    with WorkerPool("reward_servers.math.verify:antlr_runtime", n_workers=1, item_timeout_s=60.0) as pool:
        info = pool.map([None])[0]
    assert info["runtime"] == version("antlr4-python3-runtime")
    assert info["parser"] == "latex2sympy2_extended.gen.antlr4_9_3.PSParser"
    assert "disagree" not in info["printed"], info["printed"]
    with WorkerPool("reward_servers.math.verify:check", n_workers=1, item_timeout_s=30.0) as pool:
        items = [{"pred": pred, "gold": 33, "mode": "aime"} for pred in ("\\frac{66}{2}", "\\sqrt{1089}")]
        frac, sqrt = pool.map(items)
    assert frac["correct"] is True and sqrt["correct"] is True  # both need the LaTeX (ANTLR) parser
