"""The pieces every section of the report page is made of: a table, a chart, a note that something is missing,
a titled section. Shared by ``report.build`` (the run's sections) and ``report.experiments`` (the sweep's and
the ablation's).
"""
from __future__ import annotations

import html
from typing import Any, Iterable

from report.figures import _fmt


def html_table(headers: Iterable[str], rows: Iterable[Iterable[Any]], table_id: str = "") -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c if isinstance(c, str) else _fmt(c))}</td>" for c in row)
                   + "</tr>" for row in rows)
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_chart(name: str, fig) -> str:
    height = int(fig.layout.height or 320)
    inner = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"chart-{name}",
                        config={"displaylogo": False, "responsive": True}, default_height=f"{height}px")
    return f'<div class="chart" data-chart="{html.escape(name)}" style="min-height:{height}px">{inner}</div>'


def html_missing(text: str) -> str:
    return f'<p class="missing">{html.escape(text)}</p>'


def html_section(title: str, body: str, section_id: str) -> str:
    return f'<section id="{section_id}"><h2>{html.escape(title)}</h2>{body}</section>'
