"""Pictures of a split plan: a text table, Graphviz DOT, and a self-drawn SVG (no Graphviz needed).

All three take the :class:`~ggml_core.sched.SchedPlan` from :meth:`Scheduler.plan`; DOT and SVG also take the
graph, to draw its edges. Colours follow the backend (the CPU is grey); device copies are drawn as their own boxes
on the receiving device, with dashed arrows from the tensor copied.
"""

from __future__ import annotations

from collections.abc import Iterable
from xml.sax.saxutils import escape

from ggml_core._graph import Graph
from ggml_core._tensor import Tensor, TensorFlag
from ggml_core.backend.interfaces import BufferUsage
from ggml_core.ops._enum import VIEW_OPS
from ggml_core.sched._plan import InputCopy, SchedPlan

__all__ = ["backend_colors", "render_dot", "render_svg", "render_text"]

_PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1", "#edc948", "#ff9da7", "#9c755f")
_CPU = "#8c8c8c"


def backend_colors(plan: SchedPlan) -> dict[str, str]:
    """A colour per backend: accelerators from a palette in priority order, the CPU (last) grey."""
    out: dict[str, str] = {}
    for i, name in enumerate(plan.backends):
        out[name] = _CPU if i == len(plan.backends) - 1 else _PALETTE[i % len(_PALETTE)]
    return out


def _tint(color: str, amount: float) -> str:
    """Mix ``color`` with white (amount 0 = colour, 1 = white)."""
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    mix = [round(c + (255 - c) * amount) for c in (r, g, b)]
    return "#" + "".join(f"{c:02x}" for c in mix)


def _size(n: int) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):.2f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.2f} KiB"
    return f"{n} B"


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


# ================================================================================================ text


def render_text(plan: SchedPlan) -> str:
    """A table of the splits: backend, node counts, node range, and each input copied (from → to, bytes)."""
    lines = [
        f"{plan.n_nodes} nodes in {plan.n_splits} split(s) over {', '.join(plan.backends)}; "
        f"{plan.n_copies} input copies per compute ({_size(plan.bytes_copied)})"
        + (f"; {plan.pipeline_copies} pipeline copies" if plan.pipeline_copies > 1 else "")
    ]
    w_b = max([len("backend"), *(len(s.backend) for s in plan.splits)])
    head = f"{'#':>3}  {'backend':<{w_b}}  {'nodes':>5}  {'kernels':>7}  {'first → last node':<40}  inputs copied"
    lines += [head, "-" * len(head)]
    for s in plan.splits:
        span = f"{s.nodes[0]} → {s.nodes[-1]}" if s.nodes else "-"
        row = f"{s.index:>3}  {s.backend:<{w_b}}  {len(s.nodes):>5}  {s.n_compute:>7}  {_cut(span, 40):<40}  "
        if not s.inputs:
            lines.append(row + "-")
            continue
        for k, c in enumerate(s.inputs):
            copy = f"{_cut(c.name, 28):<28} {c.from_backend} → {c.to_backend}  {_size(c.nbytes):>10}"
            lines.append((row if k == 0 else " " * len(row)) + copy)
    if plan.buffer_sizes:
        lines.append("compute buffers: " + ", ".join(f"{k} {_size(v)}" for k, v in plan.buffer_sizes.items()))
    return "\n".join(lines) + "\n"


# ================================================================================================ shared


def _copies_by_consumer(plan: SchedPlan) -> tuple[dict[tuple[int, int], str], list[tuple[int, InputCopy]]]:
    """(tensor id, consumer id) → copy key, and every copy with its split index."""
    by: dict[tuple[int, int], str] = {}
    copies: list[tuple[int, InputCopy]] = []
    for s in plan.splits:
        for c in s.inputs:
            key = f"c{s.index}_{c.tensor_id}"
            copies.append((s.index, c))
            for cons in c.consumer_ids:
                by[(c.tensor_id, cons)] = key
    return by, copies


def _leaf_kind(t: Tensor) -> str:
    if t.flags & TensorFlag.INPUT:
        return "input"
    if t.buffer is not None and t.buffer.usage == BufferUsage.WEIGHTS:
        return "weight"
    return "leaf"


def _srcs(t: Tensor) -> Iterable[Tensor]:
    return (s for s in t.src if s is not None)


# ================================================================================================ DOT


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render_dot(plan: SchedPlan, graph: Graph) -> str:
    """Graphviz DOT: one cluster per split coloured by backend, copies as notes on the receiving side.

    Render with ``dot -Tsvg plan.dot -o plan.svg`` where Graphviz is installed (or use :func:`render_svg`).
    """
    colors = backend_colors(plan)
    by_consumer, _ = _copies_by_consumer(plan)
    split_of = {nid: sp.index for sp in plan.splits for nid in sp.node_ids}
    out = [
        "digraph sched {",
        "  rankdir=TB; newrank=true; compound=true;",
        f"  label={_q(f'{plan.n_splits} splits, {plan.n_copies} input copies ({_size(plan.bytes_copied)})')};",
        "  labelloc=t; fontname=Helvetica;",
        '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10, penwidth=1.2];',
        '  edge [color="#666666", arrowsize=0.6];',
    ]
    # legend
    out.append('  subgraph cluster_legend { label="devices"; style=rounded; color="#bbbbbb";')
    for name, col in colors.items():
        label = _q(f"{name} · {_size(plan.buffer_sizes.get(name, 0))}")
        out.append(f"    legend_{_ident(name)} [label={label}, fillcolor={_q(_tint(col, 0.55))}, color={_q(col)}];")
    out.append("  }")
    nodes_by_split: dict[int, list[Tensor]] = {}
    for t in graph.nodes:
        nodes_by_split.setdefault(split_of.get(t.id, -1), []).append(t)
    for sp in plan.splits:
        col = colors[sp.backend]
        label = f"split #{sp.index} · {sp.backend} · {len(sp.inputs)} input(s)"
        out.append(f"  subgraph cluster_split_{sp.index} {{")
        out.append(f'    label={_q(label)}; style="rounded,filled"; color={_q(col)}; fillcolor={_q(_tint(col, 0.9))};')
        for c in sp.inputs:
            text = f"⇄ {c.name}\n{c.from_backend} → {c.to_backend} · {_size(c.nbytes)}"
            out.append(
                f'    c{sp.index}_{c.tensor_id} [label={_q(text)}, shape=note, style="filled,dashed", '
                f"fillcolor={_q(_tint(col, 0.7))}, color={_q(col)}];"
            )
        for t in nodes_by_split.get(sp.index, []):
            out.append(f"    {_node_dot(t, col)}")
        out.append("  }")
    for t in nodes_by_split.get(-1, []):
        out.append(f"  {_node_dot(t, _CPU)}")
    for t in graph.leafs:
        kind = _leaf_kind(t)
        col = colors.get(plan.assignments.get(t.id, ""), _CPU)
        shape = {"input": "invhouse", "weight": "cylinder"}.get(kind, "box")
        label = f"{t.name}\n{kind} {t.type.traits.name} {list(t.ne)}"
        out.append(f"  n{t.id} [label={_q(label)}, shape={shape}, fillcolor={_q(_tint(col, 0.75))}, color={_q(col)}];")
    drawn: set[str] = set()
    for t in graph.nodes:
        for src in _srcs(t):
            key = by_consumer.get((src.id, t.id))
            if key is None:
                out.append(f"  n{src.id} -> n{t.id};")
                continue
            if key not in drawn:
                drawn.add(key)
                out.append(f'  n{src.id} -> {key} [style=dashed, color="#d62728", penwidth=1.4];')
            out.append(f"  {key} -> n{t.id};")
    out.append("}")
    return "\n".join(out) + "\n"


def _ident(s: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in s)


def _node_dot(t: Tensor, col: str) -> str:
    view = t.op in VIEW_OPS
    label = f"{t.name}\n{t.op_desc} {list(t.ne)}"
    style = "" if not view else ', shape=ellipse, style="filled,dashed"'
    fill = _q(_tint(col, 0.35 if not view else 0.75))
    return f"n{t.id} [label={_q(label)}, fillcolor={fill}, color={_q(col)}{style}];"


# ================================================================================================ SVG

_ROW = 34
_BOX_H = 26
_LANE_W = 280
_BOX_W = 236
_LEFT = 190
_TOP = 96
_BULGE = 64  # how far a same-lane arrow may swing out to the right of the boxes


def render_svg(plan: SchedPlan, graph: Graph) -> str:
    """A self-contained SVG: one lane per device, nodes top to bottom in execution order, splits as bands.

    Each node is a box in its device's lane and colour (hover for its op, shape and why it went there); view ops
    are folded into the arrows; every input copy is a dashed box at the top of the split that receives it, fed by
    a dashed red arrow from the tensor copied. Weights show as the node's ``← weight`` line.
    """
    colors = backend_colors(plan)
    lanes = {name: i for i, name in enumerate(plan.backends)}
    split_of = {nid: sp.index for sp in plan.splits for nid in sp.node_ids}
    by_consumer, _ = _copies_by_consumer(plan)
    rows: list[tuple[str, Tensor | tuple[int, InputCopy], int, int]] = []  # (kind, payload, lane, split)
    pos: dict[int, tuple[float, float]] = {}  # tensor id → (x centre, y top) of its box
    copy_pos: dict[str, tuple[float, float]] = {}
    band: list[tuple[int, int, int]] = []  # split, first row, last row

    inputs = [t for t in graph.leafs if t.flags & TensorFlag.INPUT]
    for t in inputs:
        rows.append(("input", t, lanes.get(plan.assignments.get(t.id, ""), len(lanes) - 1), -1))
    by_split: dict[int, list[Tensor]] = {}
    for t in graph.nodes:
        if t.op not in VIEW_OPS:
            by_split.setdefault(split_of.get(t.id, -1), []).append(t)
    for sp in plan.splits:
        first = len(rows)
        for c in sp.inputs:
            rows.append(("copy", (sp.index, c), lanes[sp.backend], sp.index))
        for t in by_split.get(sp.index, []):
            rows.append(("node", t, lanes.get(plan.assignments.get(t.id, sp.backend), lanes[sp.backend]), sp.index))
        band.append((sp.index, first, len(rows) - 1))

    width = _LEFT + _LANE_W * len(lanes) + _BULGE + 16
    height = _TOP + _ROW * max(1, len(rows)) + 40
    lane_x = [_LEFT + _LANE_W * i + _LANE_W / 2 for i in range(len(lanes))]
    body: list[str] = []
    # split bands
    for k, (si, r0, r1) in enumerate(band):
        if r1 < r0:
            continue
        sp = plan.splits[si]
        col = colors[sp.backend]
        y0, y1 = _TOP + r0 * _ROW - 4, _TOP + (r1 + 1) * _ROW - 4
        body.append(
            f'<rect x="8" y="{y0}" width="{width - 16}" height="{y1 - y0}" rx="6" '
            f'fill="{_tint(col, 0.93 if k % 2 == 0 else 0.88)}" stroke="{_tint(col, 0.6)}"/>'
        )
        label = f"split #{si} · {sp.backend}"
        sub = f"{sp.n_compute} kernels · {len(sp.inputs)} input(s)"
        body.append(f'<text x="18" y="{y0 + 18}" class="split" fill="{col}">{escape(label)}</text>')
        body.append(f'<text x="18" y="{y0 + 32}" class="sub">{escape(sub)}</text>')
    # lane guides and headers
    for name, i in lanes.items():
        x = _LEFT + _LANE_W * i
        col = colors[name]
        mid = x + _LANE_W / 2
        body.append(f'<line x1="{mid}" y1="{_TOP - 10}" x2="{mid}" y2="{height - 30}" class="lane"/>')
        body.append(f'<rect x="{x + 20}" y="44" width="{_LANE_W - 40}" height="34" rx="8" fill="{col}"/>')
        body.append(f'<text x="{x + _LANE_W / 2}" y="60" class="head">{escape(name)}</text>')
        size = plan.buffer_sizes.get(name, 0)
        body.append(f'<text x="{x + _LANE_W / 2}" y="73" class="headsub">compute {escape(_size(size))}</text>')
    title = (
        f"{plan.n_nodes} nodes · {plan.n_splits} splits · {plan.n_copies} input copies "
        f"({_size(plan.bytes_copied)} per compute)"
    )
    body.append(f'<text x="16" y="26" class="title">{escape(title)}</text>')
    # boxes
    boxes: list[str] = []
    for r, (kind, payload, lane, _si) in enumerate(rows):
        cx = lane_x[lane]
        y = _TOP + r * _ROW
        col = colors[plan.backends[lane]]
        if isinstance(payload, tuple):
            si, c = payload
            key = f"c{si}_{c.tensor_id}"
            copy_pos[key] = (cx, y)
            text = f"⇄ {_cut(c.name, 24)} · {_size(c.nbytes)}"
            tip = f"copy {c.name}: {c.from_backend} → {c.to_backend}, {c.nbytes} bytes ({c.copy_name})"
            boxes.append(_box(cx, y, text, "", _tint(col, 0.8), col, tip, dashed=True))
            continue
        assert isinstance(payload, Tensor)
        t = payload
        pos[t.id] = (cx, y)
        if kind == "input":
            tip = f"{t.name}: graph input {t.type.traits.name} {list(t.ne)}"
            boxes.append(_box(cx, y, f"▼ {_cut(t.name, 30)}", "input", _tint(col, 0.75), col, tip))
            continue
        weights = [w.name for w in _srcs(t) if w.buffer is not None and w.buffer.usage == BufferUsage.WEIGHTS]
        sub = t.op_desc + (f" ← {weights[0]}" if weights else "")
        cause = plan.causes.get(t.id, "")
        tip = f"{t.name}: {t.op_desc} {t.type.traits.name} {list(t.ne)} on {plan.assignments.get(t.id, '?')}" + (
            f" (placed by {cause})" if cause else ""
        )
        boxes.append(_box(cx, y, _cut(t.name, 34), _cut(sub, 40), _tint(col, 0.45), col, tip))
    # edges (under the boxes)
    edges: list[str] = []
    drawn: set[str] = set()
    for t in graph.nodes:
        if t.op in VIEW_OPS or t.id not in pos:
            continue
        for operand in _srcs(t):
            ckey = by_consumer.get((operand.id, t.id))
            src = _through_views(operand)
            if ckey is not None and ckey in copy_pos:
                if ckey not in drawn and src.id in pos:
                    drawn.add(ckey)
                    edges.append(_edge(pos[src.id], copy_pos[ckey], "copy"))
                edges.append(_edge(copy_pos[ckey], pos[t.id], "dep"))
            elif src.id in pos:
                edges.append(_edge(pos[src.id], pos[t.id], "dep"))
    style = (
        "<style>"
        "text{font-family:Helvetica,Arial,sans-serif}"
        ".title{font-size:15px;font-weight:bold;fill:#222}"
        ".split{font-size:12px;font-weight:bold}.sub{font-size:10px;fill:#555}"
        ".head{font-size:13px;font-weight:bold;fill:#fff;text-anchor:middle}"
        ".headsub{font-size:9px;fill:#fff;text-anchor:middle}"
        ".lane{stroke:#ccc;stroke-dasharray:2 4}"
        ".name{font-size:11px;fill:#111;text-anchor:middle}.op{font-size:9px;fill:#333;text-anchor:middle}"
        ".dep{fill:none;stroke:#777;stroke-width:1;opacity:.7}"
        ".copy{fill:none;stroke:#d62728;stroke-width:1.6;stroke-dasharray:5 3}"
        "</style>"
    )
    defs = (
        '<defs><marker id="a" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#777"/></marker>'
        '<marker id="ac" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#d62728"/></marker></defs>'
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">\n'
        f"{style}\n{defs}\n"
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>\n'
        + "\n".join(body)
        + "\n"
        + "\n".join(edges)
        + "\n"
        + "\n".join(boxes)
        + "\n</svg>\n"
    )


def _through_views(t: Tensor) -> Tensor:
    """The tensor a chain of view ops reads from (views are folded into the arrows)."""
    seen = 0
    while t.op in VIEW_OPS and t.src[0] is not None and seen < 64:
        t = t.src[0]
        seen += 1
    return t


def _box(cx: float, y: float, name: str, sub: str, fill: str, stroke: str, tip: str, dashed: bool = False) -> str:
    x = cx - _BOX_W / 2
    dash = ' stroke-dasharray="4 2"' if dashed else ""
    text_y = y + (_BOX_H / 2 + 4 if not sub else 11)
    parts = [
        f"<g><title>{escape(tip)}</title>",
        f'<rect x="{x}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="6" fill="{fill}" stroke="{stroke}"'
        f' stroke-width="1.3"{dash}/>',
        f'<text x="{cx}" y="{text_y}" class="name">{escape(name)}</text>',
    ]
    if sub:
        parts.append(f'<text x="{cx}" y="{y + 22}" class="op">{escape(sub)}</text>')
    parts.append("</g>")
    return "".join(parts)


def _edge(a: tuple[float, float], b: tuple[float, float], cls: str) -> str:
    (ax, ay), (bx, by) = a, b
    marker = "ac" if cls == "copy" else "a"
    if ax == bx:
        # same lane: leave from the right side and bulge out in proportion to the distance
        dy = by - ay
        x0, x1 = ax + _BOX_W / 2, ax + _BOX_W / 2 + min(_BULGE, 12 + dy / _ROW * 3)
        y0, y1 = ay + _BOX_H / 2, by + _BOX_H / 2
        d = f"M{x0},{y0} C{x1},{y0} {x1},{y1} {x0},{y1}"
        if dy == _ROW:
            d = f"M{ax},{ay + _BOX_H} L{bx},{by}"
    else:
        sx = ax + (_BOX_W / 2 if bx > ax else -_BOX_W / 2)
        tx = bx - (_BOX_W / 2 if bx > ax else -_BOX_W / 2)
        sy, ty = ay + _BOX_H / 2, by + _BOX_H / 2
        mid = (sx + tx) / 2
        d = f"M{sx},{sy} C{mid},{sy} {mid},{ty} {tx},{ty}"
    return f'<path d="{d}" class="{cls}" marker-end="url(#{marker})"/>'
