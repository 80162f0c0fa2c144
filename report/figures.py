"""Plotly figures of a run: the pipeline graph, the distributions, the shards, training and alerts."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from report.data import DocStats, RunData, _number

PALETTE = {"kept": "#2a9d8f", "removed": "#e76f51", "quarantined": "#9b5de5", "step": "#264653",
           "tokens": "#457b9d", "model": "#1d3557", "val": "#f4a261"}
ACTION_COLORS = {"warn": "#f4a261", "pause": "#9b5de5", "stop": "#d62828"}
DUP_BAR_WIDTH = 0.4  # in cluster-size units: both bars of a size stay within half a bin of it


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == int(value) and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def _compact(value: Any) -> str:
    """A count in few characters for a graph label (372,118 → 372k); exact figures are in the tables."""
    number = _number(value)
    if number is None:
        return "–"
    for limit, unit, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if abs(number) >= limit:
            scaled = number / unit
            return f"{scaled:.1f}{suffix}" if scaled < 10 else f"{scaled:.0f}{suffix}"
    return f"{int(number):,}"


def _base_layout(fig, title: str, height: int = 320, **extra) -> None:
    fig.update_layout(title={"text": title, "x": 0.01}, template="plotly_white", height=height,
                      margin={"l": 60, "r": 20, "t": 50, "b": 45}, **extra)


def step_seconds(stats: dict, manifest: dict | None) -> dict[str, float]:
    """Seconds per stage: busy time of each cleaning step, and the stages' wall times from manifest timings."""
    seconds = {row["step"]: float(row.get("busy_seconds") or 0.0) for row in stats.get("steps", [])} if stats else {}
    timings = (manifest or {}).get("timings") or {}
    for key, value in timings.items():
        if key.endswith("_seconds") and _number(value) is not None:
            seconds.setdefault(key[: -len("_seconds")], float(value))
    return seconds


@dataclass
class Edge:
    source: str
    target: str
    documents: int
    tokens: int | None = None
    kind: str = "kept"


def pipeline_edges(data: RunData) -> list[Edge]:
    """The run's graph, input to model: every edge with its document (and, after tokenizing, token) count."""
    stats, shards, edges = data.stats, data.shards, []
    if not stats:
        return edges
    read = int(stats.get("documents_read", 0))
    quarantined = stats.get("quarantined") or {}
    records = stats.get("records") or {}
    skipped = records.get("skipped") or {}
    if skipped.get("total"):  # raw sources: the funnel starts at the records, the skipped ones leave first
        edges.append(Edge("input", "records", int(records.get("read", 0))))
        for reason, count in sorted((skipped.get("by_reason") or {}).items(), key=lambda kv: -kv[1]):
            edges.append(Edge("records", f"skipped: {reason}", int(count), kind="removed"))
        edges.append(Edge("records", "read", read))
    else:
        edges.append(Edge("input", "read", read))
    for kind, count in sorted((quarantined.get("by_kind") or {}).items()):
        edges.append(Edge("read", f"quarantined: {kind}", int(count), kind="quarantined"))
    previous = "read"
    flowing = read - int(quarantined.get("total", 0))
    for row in stats.get("steps", []):
        edges.append(Edge(previous, row["step"], int(row.get("in", flowing))))
        for reason, count in sorted((row.get("removed_by_reason") or {}).items(), key=lambda kv: -kv[1]):
            edges.append(Edge(row["step"], f"{row['step']}: {reason}", int(count), kind="removed"))
        previous, flowing = row["step"], int(row.get("kept", flowing))
    kept = int(stats.get("kept", flowing))
    edges.append(Edge(previous, "kept documents", kept))
    if shards:
        totals = shards.get("totals") or {}
        for split in sorted(totals):
            t = totals[split]
            edges.append(Edge("kept documents", f"{split} shards", int(t.get("docs", 0)), int(t.get("tokens", 0)),
                              kind="val" if split != "train" else "tokens"))
        if data.metrics and "train" in totals:
            trained = data.metrics[-1].get("tokens_seen")
            edges.append(Edge("train shards", "model", int(totals["train"].get("docs", 0)),
                              int(trained) if _number(trained) is not None else None, kind="model"))
    return edges


def node_labels(data: RunData, edges: list[Edge]) -> dict[str, str]:
    stats, seconds = data.stats or {}, step_seconds(data.stats or {}, data.manifest)
    labels: dict[str, str] = {}
    inputs = (data.manifest or {}).get("inputs") or []
    labels["input"] = (f"input<br>{len(inputs)} file(s)<br>{sum(i.get('bytes', 0) for i in inputs) / 1e6:.1f} MB"
                       if inputs else "input")
    labels["read"] = f"read<br>{_fmt(stats.get('documents_read'))} docs"
    if "records" in {e.target for e in edges}:
        labels["records"] = f"records<br>{_fmt((stats.get('records') or {}).get('read'))}"
    for row in stats.get("steps", []):
        labels[row["step"]] = (f"{row['step']}<br>{_fmt(row.get('in'))} → {_fmt(row.get('kept'))}<br>"
                               f"{seconds.get(row['step'], 0.0):.1f} s")
        if row["step"] == "pii" and data.docs is not None and data.docs.pii_spans:
            labels["pii"] += f"<br>{sum(data.docs.pii_spans.values()):,} spans<br>masked"
    labels["kept documents"] = f"kept<br>{_fmt(stats.get('kept'))} docs"
    shards = data.shards or {}
    for split, t in (shards.get("totals") or {}).items():
        labels[f"{split} shards"] = (f"{split} shards<br>{_compact(t.get('tokens'))} tokens<br>{_fmt(t.get('rows'))} "
                                     f"rows<br>fill {100 * float(t.get('fill_ratio', 0)):.1f}%")
    if data.metrics:
        last = data.metrics[-1]
        train_s = sum(_number(r.get("step_time_s")) or 0.0 for r in data.metrics)
        labels["model"] = (f"model<br>{_compact(last.get('tokens_seen'))} tokens<br>trained<br>step "
                           f"{_fmt(last.get('step'))}<br>{seconds.get('train', train_s):.1f} s")
    for edge in edges:
        if edge.target not in labels:
            labels[edge.target] = f"{edge.target.split(': ', 1)[-1]} {_fmt(edge.documents)}"
    return labels


SIDE_KINDS = ("removed", "quarantined", "val")
MAIN_PX, MAIN_GAP_PX, SINK_GAP_PX, NODE_PAD_PX = 240, 28, 15, 6
# What the layout assumes of the drawn chart: its plot width, the label font's character width and line height
# (font size 11), and where plotly puts a label: NODE_PX + LABEL_GAP_PX right of a node's left edge, or left of
# the node for nodes of the last column.
PLOT_WIDTH_PX, CHAR_PX, LINE_PX, NODE_PX, LABEL_GAP_PX = 1100, 6.6, 14, 14, 6


@dataclass
class SankeyLayout:
    x: list[float]
    y: list[float]
    spacer: float  # value of an invisible flow that sets plotly's pixels-per-document scale
    height_px: int
    label_left: list[bool]  # plotly draws the labels of the last column's nodes to their left


@dataclass(frozen=True)
class Box:
    """A rectangle in plot pixels (x right, y down)."""

    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: "Box") -> bool:
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1


def label_box(label: str, x_px: float, y_center_px: float, last_column: bool) -> Box:
    """Where plotly draws a node's label (lines split at <br>), as the layout estimates it."""
    lines = label.split("<br>") if label else [""]
    width = max(len(line) for line in lines) * CHAR_PX
    height = len(lines) * LINE_PX
    if last_column:
        x1 = x_px - LABEL_GAP_PX
        return Box(x1 - width, y_center_px - height / 2, x1, y_center_px + height / 2)
    x0 = x_px + NODE_PX + LABEL_GAP_PX
    return Box(x0, y_center_px - height / 2, x0 + width, y_center_px + height / 2)


def _depths(names: list[str], edges: list[Edge]) -> dict[str, int]:
    """Longest distance from a source: the column plotly (d3-sankey) puts a node in when sizing nodes."""
    depth = {n: 0 for n in names}
    for _ in names:
        for e in edges:
            depth[e.target] = max(depth[e.target], depth[e.source] + 1)
    return depth


def sankey_layout(names: list[str], edges: list[Edge], labels: dict[str, str] | None = None) -> SankeyLayout:
    """A funnel: the main path left to right along the top, what each step removes stacked below, just right of
    it. Node heights are documents × a fixed scale; an invisible flow in the first column pins that scale, so the
    main path and the largest stack of removals both fit, and tiny removals keep room for their labels. A stack
    whose labels (estimated from ``labels``) would run into the labels or nodes placed before it moves down
    until they do not, so no two labels overlap."""
    labels = labels or {}
    main = [n for n in names if not any(e.target == n and e.kind in SIDE_KINDS for e in edges)]
    # The last column's labels are drawn to its left: give that gap double width so they do not collide.
    column = {n: i + (1 if i == len(main) - 1 and i > 1 else 0) for i, n in enumerate(main)}
    last = max(1, max(column.values(), default=1))
    value = {n: max(sum(e.documents for e in edges if e.target == n), sum(e.documents for e in edges if e.source == n))
             for n in names}
    ky = MAIN_PX / max(1, max((value[n] for n in main), default=1))
    sinks: dict[str, list[str]] = {}
    for e in edges:
        if e.kind in SIDE_KINDS:
            sinks.setdefault(e.source, []).append(e.target)
    x = {n: 0.001 + 0.998 * column[n] / last for n in main}
    x_px = {n: x[n] * (PLOT_WIDTH_PX - NODE_PX) for n in main}
    y_px = {n: value[n] * ky / 2 for n in main}  # centres; the main nodes hang from the top
    placed = [label_box(labels.get(n, n), x_px[n], y_px[n], column[n] == last) for n in main]
    top = MAIN_PX + MAIN_GAP_PX
    bottom = float(top)
    for source in sorted(sinks, key=lambda n: x.get(n, 0.0)):
        targets = sinks[source]
        x_sink = min(0.999, x[source] + 0.5 / last)
        sink_px = x_sink * (PLOT_WIDTH_PX - NODE_PX)
        start = top
        for _ in range(2000):  # move the stack down until neither its nodes nor its labels hit earlier labels
            cursor, boxes, centres = start, [], []
            for target in targets:
                height = max(value[target] * ky, 1.0)
                centre = cursor + height / 2
                centres.append(centre)
                boxes.append(Box(sink_px, cursor, sink_px + NODE_PX, cursor + height))
                boxes.append(label_box(labels.get(target, target), sink_px, centre, False))
                cursor += height + SINK_GAP_PX
            if not any(b.overlaps(p) for b in boxes for p in placed):
                break
            start += 4
        placed.extend(boxes)
        for target, centre in zip(targets, centres):
            x[target], y_px[target] = x_sink, centre
        bottom = max(bottom, cursor - SINK_GAP_PX, max(b.y1 for b in boxes))
    plot_px = bottom + 8
    # Every other column must allow at least this scale (d3-sankey takes the minimum over columns).
    depth = _depths(names, edges)
    for d in set(depth.values()):
        members = [n for n in names if depth[n] == d]
        need = sum(value[n] for n in members) * ky + (len(members) - 1) * NODE_PAD_PX
        plot_px = max(plot_px, need + 1)
    spacer = (plot_px - NODE_PAD_PX) / ky - sum(value[n] for n in names if depth[n] == 0)
    y = {n: y_px[n] / plot_px for n in names}
    return SankeyLayout([x[n] for n in names], [y[n] for n in names], spacer, int(plot_px),
                        [n in column and column[n] == last for n in names])


def sankey_label_boxes(names: list[str], labels: dict[str, str], layout: SankeyLayout) -> dict[str, Box]:
    """Every node's label box as the layout estimates plotly draws it (for checking that none overlap)."""
    return {n: label_box(labels.get(n, n), x * (PLOT_WIDTH_PX - NODE_PX), y * layout.height_px, left)
            for n, x, y, left in zip(names, layout.x, layout.y, layout.label_left)}


def pipeline_figure(data: RunData, edges: list[Edge]):
    import plotly.graph_objects as go

    labels = node_labels(data, edges)
    shown = [e for e in edges if e.documents > 0]
    names = list(dict.fromkeys(n for e in shown for n in (e.source, e.target)))
    index = {n: i for i, n in enumerate(names)}
    color_of = {"kept": "rgba(42,157,143,0.35)", "removed": "rgba(231,111,81,0.45)",
                "quarantined": "rgba(155,93,229,0.45)", "tokens": "rgba(69,123,157,0.45)",
                "val": "rgba(244,162,97,0.5)", "model": "rgba(29,53,87,0.45)"}
    node_color = []
    for n in names:
        kinds = {e.kind for e in shown if e.target == n}
        node_color.append(PALETTE["removed"] if "removed" in kinds else PALETTE["quarantined"]
                          if "quarantined" in kinds else PALETTE["model"] if n == "model" else PALETTE["step"])
    layout = sankey_layout(names, shown, labels)
    # The invisible flow: two transparent nodes at the bottom of the first two columns.
    spacer_nodes = [len(names), len(names) + 1]
    fig = go.Figure(go.Sankey(
        arrangement="fixed",
        node={"label": [labels.get(n, n) for n in names] + ["", ""],
              "color": node_color + ["rgba(0,0,0,0)"] * 2, "pad": NODE_PAD_PX, "thickness": 14,
              "x": layout.x + [0.001, layout.x[index[shown[0].target]]], "y": layout.y + [0.999, 0.999],
              "line": {"width": 0},
              "hoverinfo": "none"},
        link={"source": [index[e.source] for e in shown] + [spacer_nodes[0]],
              "target": [index[e.target] for e in shown] + [spacer_nodes[1]],
              "value": [e.documents for e in shown] + [max(layout.spacer, 0.0)],
              "color": [color_of.get(e.kind) for e in shown] + ["rgba(0,0,0,0)"],
              "customdata": [(f"{e.tokens:,} tokens" if e.tokens is not None else "") for e in shown] + [""],
              "hovertemplate": "%{source.label} → %{target.label}<br>%{value:,} documents<br>%{customdata}"
                               "<extra></extra>"},
    ))
    _base_layout(fig, "Pipeline: documents through every step, then tokens into shards and the model",
                 layout.height_px + 95, font={"size": 11})
    return fig


def _histogram(series: list[tuple[str, list[float], str]], title: str, x_title: str, bins: int, log_x: bool = False,
               legend_counts: bool = True):
    import plotly.graph_objects as go

    fig = go.Figure()
    for name, values, color in series:
        if values:
            xs = [math.log10(max(v, 1)) for v in values] if log_x else values
            label = f"{name} ({len(values):,})" if legend_counts or "(" not in name else name
            fig.add_trace(go.Histogram(x=xs, name=label, nbinsx=bins, marker_color=color, opacity=0.75))
    _base_layout(fig, title, barmode="overlay", xaxis_title=x_title, yaxis_title="documents")
    return fig


def distribution_figures(docs: DocStats, bins: int) -> tuple[list[tuple[str, Any]], list[str]]:
    import plotly.graph_objects as go

    figures, notes = [], []
    unscored = sum(docs.quality_kept_unscored.values())
    reasons = docs.quality_kept_unscored.most_common()
    why = reasons[0][0] if len(reasons) == 1 else ", ".join(f"{reason} {n:,}" for reason, n in reasons)
    if docs.quality_kept or docs.quality_removed:
        kept_name = f"kept, scored ({len(docs.quality_kept):,}; {unscored:,} more kept unscored)" if unscored \
            else "kept"
        title = f"Quality scores ({unscored:,} kept documents unscored, not shown: {why})" if unscored \
            else "Quality scores"
        figures.append(("quality", _histogram(
            [(kept_name, docs.quality_kept, PALETTE["kept"]), ("removed", docs.quality_removed, PALETTE["removed"])],
            title, "quality.score", bins, legend_counts=not unscored)))
    elif unscored:
        notes.append(f"Quality scores: none; {unscored:,} kept documents are unscored ({why}).")
    else:
        notes.append("Quality scores: no document carries a quality.score annotation (the quality step did not run).")
    if docs.kept_chars:
        figures.append(("doc_chars", _histogram([("kept", docs.kept_chars, PALETTE["kept"])],
                                                "Kept document lengths", "log10(characters)", bins, log_x=True)))
    else:
        notes.append("Document lengths: docs/ holds no documents.")
    if docs.kept_words or docs.removed_words:
        figures.append(("doc_words", _histogram(
            [("kept", docs.kept_words, PALETTE["kept"]), ("removed", docs.removed_words, PALETTE["removed"])],
            "Words per document, kept vs removed (filters annotation)", "log10(words)", bins, log_x=True)))
    sizes_near = Counter(docs.near_clusters.values())
    sizes_exact = Counter(n + 1 for n in docs.exact_groups.values())
    if sizes_near or sizes_exact:
        fig = go.Figure()
        # Each bar is drawn inside its own size's bin, near-duplicates on the left half, exact on the right: with
        # automatic grouping plotly sizes the bars by the gap between sizes, which puts them over the next bin.
        for (name, sizes, color), offset in zip((("near-duplicate clusters", sizes_near, PALETTE["tokens"]),
                                                 ("exact-duplicate groups", sizes_exact, PALETTE["removed"])),
                                                (-DUP_BAR_WIDTH, 0.0)):
            if sizes:
                xs = sorted(sizes)
                fig.add_trace(go.Bar(x=xs, y=[sizes[x] for x in xs], name=f"{name} ({sum(sizes.values()):,})",
                                     marker_color=color, width=DUP_BAR_WIDTH, offset=offset,
                                     hovertemplate="size %{x}: %{y} clusters<extra>" + name + "</extra>"))
        _base_layout(fig, "Duplicate cluster sizes (documents per cluster, kept one included)", barmode="overlay",
                     xaxis_title="cluster size", yaxis_title="clusters", xaxis={"dtick": 1})
        figures.append(("dup_clusters", fig))
    else:
        notes.append("Duplicate clusters: no near_dedup.cluster / exact_dedup.dup_of annotations (no duplicates "
                     "found, or dedup did not run).")
    if docs.pii_spans:
        entities = sorted(docs.pii_spans, key=lambda e: -docs.pii_spans[e])
        fig = go.Figure(go.Bar(x=entities, y=[docs.pii_spans[e] for e in entities], marker_color=PALETTE["quarantined"],
                               text=[f"{docs.pii_spans[e]:,}" for e in entities], textposition="outside"))
        _base_layout(fig, "PII spans masked per entity type (kept documents)", yaxis_title="spans")
        figures.append(("pii", fig))
    return figures, notes


def shard_figure(shards: dict):
    import plotly.graph_objects as go

    files, tokens, padding = [], [], []
    for split, entries in sorted((shards.get("splits") or {}).items()):
        for entry in entries:
            files.append(entry.get("file", split))
            tokens.append(int(entry.get("tokens", 0)))
            padding.append(int(entry.get("padding", 0)))
    if not files:
        return None
    fig = go.Figure([go.Bar(x=files, y=tokens, name="tokens", marker_color=PALETTE["tokens"]),
                     go.Bar(x=files, y=padding, name="padding", marker_color=PALETTE["removed"])])
    _base_layout(fig, "Shards: tokens and padding per file", barmode="stack", yaxis_title="token slots")
    return fig


def elapsed_seconds(metrics: list[dict]) -> list[float]:
    """The time axis of training: wall time from the first record when records carry ``time``, else the
    running sum of step times (each logged step standing for the steps since the previous one)."""
    if metrics and all(_number(r.get("time")) is not None for r in metrics):
        start = float(metrics[0]["time"]) - (_number(metrics[0].get("step_time_s")) or 0.0)
        return [float(r["time"]) - start for r in metrics]
    elapsed, total, previous = [], 0.0, None
    for record in metrics:
        step = record.get("step", 0)
        gap = step - previous if previous is not None and step > previous else 1
        total += (_number(record.get("step_time_s")) or 0.0) * gap
        elapsed.append(total)
        previous = step
    return elapsed


def time_axis(metrics: list[dict]) -> tuple[list[float], str]:
    """Elapsed seconds when the records carry times; the step number when they do not."""
    xs = elapsed_seconds(metrics)
    if xs and max(xs) > 0:
        return xs, "elapsed training time (s)"
    return [float(r.get("step", i)) for i, r in enumerate(metrics)], "step"


TRAINING_SERIES = (
    # chart name, title, y-axis title, [(metric key, trace name, transform)], log y
    ("loss", "Loss", "loss", [("loss", "train loss", None), ("val_loss", "validation loss", None)], False),
    ("lr", "Learning rate", "lr", [("lr", "lr", None)], False),
    ("grad_norm", "Gradient norm (before clipping)", "global norm", [("grad_norm", "grad norm", None)], False),
    ("throughput", "Throughput", "tokens/s", [("tokens_per_s", "tokens/s", None)], False),
    ("mfu", "Model FLOPs utilization", "MFU", [("mfu", "MFU", None)], False),
    ("memory", "Peak memory", "MiB", [("peak_memory_bytes", "peak memory", 1 / 2**20),
                                      ("gpu_memory_bytes", "GPU memory", 1 / 2**20),
                                      ("rss_bytes", "process RSS", 1 / 2**20)], False),
    ("data_wait", "Data wait share of step time", "share", [("data_wait_fraction", "data wait", None)], False),
)


def training_figures(data: RunData) -> tuple[list[tuple[str, Any]], list[str]]:
    import plotly.graph_objects as go

    metrics, figures, notes = data.metrics, [], []
    xs, x_title = time_axis(metrics)
    step_to_x = {r.get("step"): x for r, x in zip(metrics, xs)}
    alert_xs = [_alert_x(a, step_to_x, xs) for a in data.alerts]
    events = [(x, r) for r, x in zip(metrics, xs) if r.get("event")]
    colors = [PALETTE["tokens"], PALETTE["val"], PALETTE["removed"]]
    for name, title, y_title, keys, log_y in TRAINING_SERIES:
        fig = go.Figure()
        for (key, trace_name, factor), color in zip(keys, colors):
            points = [(x, _number(r.get(key)), r.get("step")) for r, x in zip(metrics, xs)]
            points = [(x, y * factor if factor else y, s) for x, y, s in points if y is not None]
            if not points:
                continue
            mode = "lines+markers" if key == "val_loss" or len(points) < 30 else "lines"
            fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], customdata=[p[2] for p in points],
                                     name=trace_name, mode=mode, line={"color": color},
                                     hovertemplate="step %{customdata}<br>%{x:.1f}<br>%{y:.4g}<extra>" + trace_name
                                                   + "</extra>"))
        if not fig.data:
            notes.append(f"{title}: not in metrics.jsonl.")
            continue
        if name == "loss" and events:
            fig.add_trace(go.Scatter(
                x=[x for x, _ in events], y=[_number(r.get("loss")) or 0.0 for _, r in events], mode="markers",
                name="skipped / rolled back", marker={"symbol": "x", "size": 10, "color": PALETTE["removed"]},
                text=[str(r["event"]) for _, r in events], hovertemplate="%{text}<extra></extra>"))
        for alert, x in zip(data.alerts, alert_xs):
            if x is not None:
                fig.add_vline(x=x, line_dash="dot", line_color=ACTION_COLORS.get(alert.get("action"), "#888"),
                              opacity=0.7)
        _base_layout(fig, title, 260, xaxis_title=x_title, yaxis_title=y_title,
                     legend={"orientation": "h", "y": 1.12, "x": 1, "xanchor": "right"})
        figures.append((name, fig))
    at = next((i + 1 for i, (n, _) in enumerate(figures) if n == "loss"), len(figures))  # right after the loss
    for name, fig in (("val-domains", domain_figure(metrics, xs, x_title)),
                      ("distill", distill_figure(metrics, xs, x_title))):
        if fig is not None:
            figures.insert(at, (name, fig))
            at += 1
    moe = expert_load_figure(metrics)
    if moe is not None:
        figures.append(("expert-load", moe))
    skipped = [(x, r) for r, x in zip(metrics, xs)
               if _number(r.get("skipped_bad_steps")) is not None or _number(r.get("skipped_overflow_steps")) is not None]
    if skipped and any((r.get("skipped_bad_steps") or 0) + (r.get("skipped_overflow_steps") or 0) for _, r in skipped):
        fig = go.Figure()
        for key, color in (("skipped_bad_steps", PALETTE["removed"]), ("skipped_overflow_steps", PALETTE["val"]),
                           ("rollbacks", PALETTE["model"])):
            fig.add_trace(go.Scatter(x=[x for x, _ in skipped], y=[r.get(key) or 0 for _, r in skipped], name=key,
                                     mode="lines", line={"shape": "hv", "color": color}))
        _base_layout(fig, "Skipped steps (cumulative)", 240, xaxis_title=x_title, yaxis_title="steps")
        figures.append(("skipped", fig))
    else:
        notes.append("Skipped steps: none (no NaN/Inf, spike or overflow step was skipped).")
    return figures, notes


DOMAIN_COLORS = ("#e63946", "#2a9d8f", "#457b9d", "#f4a261", "#9b5de5", "#06d6a0", "#ef476f", "#118ab2",
                 "#ff9f1c", "#8338ec", "#3a86ff", "#fb5607")


def domain_figure(metrics: list[dict], xs: list[float], x_title: str):
    """Validation loss per domain (``val_loss_by_domain`` of the validation records), one curve each; None when
    no record has it."""
    import plotly.graph_objects as go

    curves: dict[str, list[tuple[float, float, Any]]] = {}
    for record, x in zip(metrics, xs):
        by_domain = record.get("val_loss_by_domain")
        if not isinstance(by_domain, dict):
            continue
        for name, value in by_domain.items():
            if (y := _number(value)) is not None:
                curves.setdefault(str(name), []).append((x, y, record.get("step")))
    if not curves:
        return None
    fig = go.Figure()
    for i, name in enumerate(sorted(curves)):
        points = curves[name]
        fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], customdata=[p[2] for p in points],
                                 name=name, mode="lines+markers",
                                 line={"color": DOMAIN_COLORS[i % len(DOMAIN_COLORS)]},
                                 hovertemplate="step %{customdata}<br>%{y:.4g}<extra>" + name + "</extra>"))
    _base_layout(fig, "Validation loss per domain", 300, xaxis_title=x_title, yaxis_title="loss")
    return fig


def distill_figure(metrics: list[dict], xs: list[float], x_title: str):
    """Distillation runs (``train.distill``): the loss's two parts, cross-entropy and KL to the teacher (T²-scaled),
    next to their mix; None for a run without them."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for key, name, color in (("ce_loss", "cross-entropy", PALETTE["tokens"]), ("kl_loss", "KL to the teacher",
                                                                                PALETTE["removed"]),
                             ("loss", "loss (mix)", PALETTE["kept"])):
        points = [(x, _number(r.get(key)), r.get("step")) for r, x in zip(metrics, xs) if "kl_loss" in r]
        points = [p for p in points if p[1] is not None]
        if points:
            fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points],
                                     customdata=[p[2] for p in points], name=name, mode="lines",
                                     line={"color": color},
                                     hovertemplate="step %{customdata}<br>%{y:.4g}<extra>" + name + "</extra>"))
    if not any(t.name == "KL to the teacher" for t in fig.data):
        return None
    _base_layout(fig, "Distillation: the loss's parts", 260, xaxis_title=x_title, yaxis_title="loss per token")
    return fig


def _alert_x(alert: dict, step_to_x: dict, xs: list[float]) -> float | None:
    step = alert.get("step")
    if step in step_to_x:
        return step_to_x[step]
    if isinstance(step, int) and step_to_x:
        earlier = [s for s in step_to_x if isinstance(s, int) and s <= step]
        return step_to_x[max(earlier)] if earlier else xs[0]
    return None


def alerts_figure(data: RunData):
    import plotly.graph_objects as go

    if not data.alerts:
        return None
    xs, x_title = time_axis(data.metrics)
    step_to_x = {r.get("step"): x for r, x in zip(data.metrics, xs)}
    fig = go.Figure()
    for action in ("warn", "pause", "stop"):
        chosen = [a for a in data.alerts if a.get("action", "warn") == action]
        if not chosen:
            continue
        positions = [_alert_x(a, step_to_x, xs) for a in chosen]
        if any(p is None for p in positions):  # no metrics to place them on: use the alerts' own clock
            first = min((_number(a.get("time")) or 0.0) for a in data.alerts)
            positions = [(_number(a.get("time")) or first) - first for a in chosen]
        fig.add_trace(go.Scatter(
            x=positions, y=[a.get("rule", "?") for a in chosen], mode="markers", name=action,
            marker={"size": 13, "color": ACTION_COLORS[action], "symbol": "diamond"},
            text=[f"step {a.get('step')}: {a.get('message', '')}" for a in chosen],
            hovertemplate="%{text}<extra>" + action + "</extra>"))
    _base_layout(fig, "Alerts on the training time axis", 240, xaxis_title=x_title)
    return fig


def cost_figure(cost: dict):
    """kWh per stage, one bar each (the source of each stage's energy in the hover text); None without stages."""
    import plotly.graph_objects as go

    stages = cost.get("stages") or {}
    if not stages:
        return None
    names = list(stages)
    fig = go.Figure(go.Bar(x=names, y=[stages[s]["kwh"] for s in names], marker_color="#e76f51",
                           text=[stages[s]["energy_source"] for s in names],
                           hovertemplate="%{x}: %{y:.4g} kWh (%{text})<extra></extra>"))
    _base_layout(fig, "Energy per stage (kWh)", xaxis_title="stage", yaxis_title="kWh")
    return fig


def expert_load_figure(metrics: list[dict]):
    """MoE runs: tokens routed to each expert of each MoE layer over the whole run (``moe_expert_load`` of every
    step, summed), as a heat map of each layer's shares: a balanced router gives 1 / n_experts everywhere, a
    collapsed one a hot column. None for a dense model."""
    import plotly.graph_objects as go

    totals = expert_load_totals(metrics)
    if not totals:
        return None
    layers = sorted(totals, key=int)
    n_experts = max(len(totals[layer]) for layer in layers)
    shares = []
    for layer in layers:
        row = totals[layer] + [0] * (n_experts - len(totals[layer]))
        routed = sum(row)
        shares.append([v / routed if routed else 0.0 for v in row])
    fig = go.Figure(go.Heatmap(
        z=shares, x=[f"expert {e}" for e in range(n_experts)], y=[f"layer {layer}" for layer in layers],
        customdata=[[totals[layer][e] if e < len(totals[layer]) else 0 for e in range(n_experts)] for layer in layers],
        colorscale="YlOrRd", zmin=0.0, colorbar={"title": "share"},
        hovertemplate="%{y}, %{x}<br>%{z:.1%} of the layer's tokens (%{customdata:,})<extra></extra>"))
    _base_layout(fig, f"MoE expert load (share of each layer's routed tokens; balanced = {1 / n_experts:.1%})",
                 max(200, 60 + 40 * len(layers)), xaxis_title="expert", yaxis_title="MoE layer")
    return fig


def expert_load_totals(metrics: list[dict]) -> dict[str, list[int]]:
    """layer -> tokens routed to each expert, summed over every logged step (before capacity dropping)."""
    totals: dict[str, list[int]] = {}
    for record in metrics:
        for layer, loads in (record.get("moe_expert_load") or {}).items():
            if not isinstance(loads, list):
                continue
            row = totals.setdefault(str(layer), [])
            row.extend([0] * (len(loads) - len(row)))
            for e, v in enumerate(loads):
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    row[e] += int(v)
    return totals
