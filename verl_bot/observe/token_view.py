"""How a rollout's token credit is shown: each token's bytes made legible, its reward r_t and advantage A_t as
colours on one symmetric scale per quantity, the legends, one rollout's HTML. Shared by the training report
(`verl_bot.eval.training_report`) and the trackers' panels (`verl_bot.observe.panels`).

Bytes that are not printable text are shown legibly: `<0xE2>` for a byte that is not a whole UTF-8
character (the first bytes of a multi-byte character split across tokens), `·` a space, `↵` a newline,
`→` a tab, ASCII control characters as `<0x07>` (in a solid box), other invisible characters as
`<U+200B>`; special tokens by their name in a box.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable

POSITIVE = (33, 102, 172)  # full colour at +scale (blue)
NEGATIVE = (178, 24, 43)  # full colour at -scale (red)
QUANTITIES = (("rewards", "reward r_t"), ("advantages", "advantage A_t"))
_WHITESPACE = {" ": "\u00b7", "\n": "\u21b5", "\t": "\u2192"}


# ------------------------------------------------------------------------------------------- tokens
def _one_char(raw: bytes, i: int) -> str | None:
    """The UTF-8 character that starts at byte i of raw, or None when raw[i] starts no complete character."""
    for n in range(1, 5):
        try:
            text = raw[i : i + n].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return text if len(text) == 1 else None
    return None


def display_segments(raw: bytes) -> list[tuple[str, str]]:
    """What a token's bytes look like on the page: [(text, kind)], kind in text/space/byte/control.

    Whole UTF-8 characters are text (spaces, newlines, tabs as visible markers, kind `space`); a byte that
    is no whole character is `<0xNN>` (kind `byte`); an ASCII control character `<0xNN>` too and any other
    character Python does not call printable `<U+NNNN>` (kind `control`, boxed differently). Consecutive
    text is merged. Only ASCII and the marker characters are used for what is not text, so every font
    shows them.
    """
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(raw):
        ch = _one_char(raw, i)
        if ch is None:
            seg, i = (f"<0x{raw[i]:02X}>", "byte"), i + 1
        else:
            i += len(ch.encode("utf-8"))
            if ch in _WHITESPACE:
                seg = (_WHITESPACE[ch], "space")
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                seg = (f"<0x{ord(ch):02X}>", "control")
            elif not ch.isprintable():
                seg = (f"<U+{ord(ch):04X}>", "control")
            else:
                seg = (ch, "text")
        if out and seg[1] == "text" and out[-1][1] == "text":
            out[-1] = (out[-1][0] + seg[0], "text")
        else:
            out.append(seg)
    return out


# ------------------------------------------------------------------------------------------- colours
def colour(value: float, scale: float) -> tuple[int, int, int]:
    """White at 0, linearly to POSITIVE at +scale and NEGATIVE at -scale (clipped beyond)."""
    t = max(-1.0, min(1.0, value / scale)) if scale > 0 else 0.0
    end = POSITIVE if t >= 0 else NEGATIVE
    return tuple(round(255 + abs(t) * (c - 255)) for c in end)


NICE = (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)


def nice_scale(largest: float) -> float:
    """The smallest of NICE x 10^k that is >= largest (> 0), for round legend ticks; 1 for 0."""
    if not largest > 0 or not math.isfinite(largest):
        return 1.0
    base = 10 ** math.floor(math.log10(largest))
    return next(m * base for m in NICE if m * base >= largest * (1 - 1e-12))


def _css(rgb: tuple[int, int, int]) -> str:
    return f"rgb({rgb[0]},{rgb[1]},{rgb[2]})"


def legend(key: str, label: str, scale: float) -> str:
    """A colour bar from -scale to +scale with five tick labels."""
    ticks = "".join(f"<span>{v:+g}</span>" for v in (-scale, -scale / 2, 0.0, scale / 2, scale))
    return (
        f'<div class="legend" data-quantity="{key}" data-scale="{scale:g}"><b>{label}</b>'
        f'<div class="bar" style="background:linear-gradient(to right,{_css(NEGATIVE)},rgb(255,255,255),'
        f'{_css(POSITIVE)})"></div><div class="ticks">{ticks}</div></div>'
    )


def legends_html(scales: dict[str, float]) -> str:
    """The legend bars of every quantity (QUANTITIES), side by side."""
    return '<div class="legends">' + "".join(legend(key, label, scales[key]) for key, label in QUANTITIES) + "</div>"


def token_scales(records: Iterable[dict]) -> dict[str, float]:
    """One symmetric colour scale per quantity (QUANTITIES) for every token of `records`: `nice_scale` of the
    largest |value|, so the extreme token is (nearly) full colour and the legend's ticks are round."""
    largest = dict.fromkeys((key for key, _ in QUANTITIES), 0.0)
    for record in records:
        for key in largest:
            largest[key] = max(largest[key], max((abs(v) for v in record[key]), default=0.0))
    return {key: nice_scale(value) for key, value in largest.items()}


# ------------------------------------------------------------------------------------------- html
def token_segments(record: dict, i: int) -> list[tuple[str, str]]:
    """How token i of a record shows: a special token by its name (kind `special`), any other by
    `display_segments` of its bytes."""
    raw = bytes.fromhex(record["token_bytes"][i])
    return [(raw.decode("utf-8", "replace"), "special")] if record["special"][i] else display_segments(raw)


def _token(i: int, record: dict, scales: dict[str, float]) -> str:
    raw = bytes.fromhex(record["token_bytes"][i])
    segments = token_segments(record, i)
    inner = "".join(f'<span class="{kind}">{html.escape(text)}</span>' for text, kind in segments) or "&#8203;"
    values = {key: float(record[key][i]) for key, _ in QUANTITIES}
    title = (
        f"#{i} id {record['response_ids'][i]} bytes {raw.hex(' ').upper() or '-'}"
        f" | r {values['rewards']:+.4f} | A {values['advantages']:+.4f}"
    )
    cells = []
    for key, _ in QUANTITIES:
        rgb = colour(values[key], scales[key])
        ink = "#fff" if sum(rgb) < 380 else "#000"
        cells.append(
            f'<span class="cell {key}" data-value="{values[key]:.6g}" style="background:{_css(rgb)};color:{ink}">'
            f"{inner}</span>"
        )
    return f'<span class="tok" title="{html.escape(title)}">{"".join(cells)}</span>'


def shown_tokens(length: int, limit: int) -> list[int]:
    """The token positions shown of a rollout of `length` tokens: all of them, or with `limit` > 0 and a longer
    rollout its first ceil(limit / 2) and last floor(limit / 2) tokens (the start and the answer)."""
    if limit <= 0 or length <= limit:
        return list(range(length))
    return [*range((limit + 1) // 2), *range(length - limit // 2, length)]


def rollout_html(record: dict, scales: dict[str, float], limit: int = 0) -> str:
    """One rollout: its facts (G, solved, failure, length) and its tokens, `shown_tokens(length, limit)` of them
    (a gap marker where tokens are left out), each coloured on `scales`."""
    info = record.get("info") or {}
    length = len(record["response_ids"])
    shown = shown_tokens(length, limit)
    facts = [f"G {info['score']:+.3f}" if "score" in info else None]
    facts.append(f"solved {info['acc']:g}" if "acc" in info else None)
    facts.append("scorer failed: advantage 0" if info.get("scorer_failed") else None)
    facts.append(f"{length} tokens" + (f" ({len(shown)} shown)" if len(shown) < length else ""))
    tokens, last = [], -1
    for i in shown:
        if i > last + 1:
            tokens.append(f'<span class="gap" data-omitted="{i - last - 1}">\u2026 {i - last - 1} tokens \u2026</span>')
        tokens.append(_token(i, record, scales))
        last = i
    head = " · ".join(f for f in facts if f)
    return (f'<div class="rollout" data-key="{html.escape(record["key"])}"><div class="facts">{head}</div>'
            f'{"".join(tokens)}</div>')


STYLE = """body{font-family:sans-serif;margin:1.5em auto;max-width:1500px;padding:0 1em}
.legends{display:flex;gap:3em;margin:.5em 0} .legend .bar{width:320px;height:14px;border:1px solid #888}
.legend .ticks{width:320px;display:flex;justify-content:space-between;font-size:12px}
.group{border-top:2px solid #ccc;margin-top:1em} .prompt{font-family:monospace;white-space:pre-wrap;
background:#f4f4f4;padding:4px;margin:6px 0} .runs{display:grid;gap:1.5em} .run h3{margin:.3em 0}
.rollout{border-top:1px solid #ddd;padding:4px 0} .facts{font-size:12px;color:#444}
.tok{display:inline-flex;flex-direction:column;margin:1px 1px 2px 0;vertical-align:top}
.cell{font-family:monospace;font-size:13px;padding:1px 2px;white-space:pre;line-height:16px;min-width:6px}
.space{opacity:.75} .byte{font-size:10px;border:1px dotted currentColor}
.control{font-size:10px;border:1px solid currentColor}
.special{font-size:10px;border:1px solid currentColor;border-radius:3px}
.gap{font-size:11px;color:#666;font-style:italic;margin:0 4px}
"""
